# The geometric transforms (geometric.h) and their one resampling step (warp.h): its CPU kernel in
# warp_cpu.cpp, compiled as the fused colour loop is (colour.cmake: -O3, whose cost model
# vectorises the per-block loops, no trapping math, which the selects need, and no contraction of
# multiply-adds; none changes a result).
set(_xlaunch_augment_warp_cpu ${CMAKE_CURRENT_LIST_DIR}/warp_cpu.cpp)
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/warp.cpp ${_xlaunch_augment_warp_cpu}
                                       ${CMAKE_CURRENT_LIST_DIR}/affine.cpp ${CMAKE_CURRENT_LIST_DIR}/perspective.cpp
                                       ${CMAKE_CURRENT_LIST_DIR}/resized_crop.cpp ${CMAKE_CURRENT_LIST_DIR}/flip.cpp)
set_source_files_properties(${_xlaunch_augment_warp_cpu} TARGET_DIRECTORY xlaunch_runtime
                            PROPERTIES COMPILE_OPTIONS "-O3;-fno-trapping-math;-ffp-contract=off;-fopenmp" SKIP_PRECOMPILE_HEADERS ON)
