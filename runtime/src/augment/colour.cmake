# The colour transforms (colour.h): ColorJitter (its arguments and draws, the batched ATen steps
# for any device, the fused CPU loop) and Normalize.
set(_xlaunch_augment_colour_fused ${CMAKE_CURRENT_LIST_DIR}/colour_fused.cpp)
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/colour.cpp ${CMAKE_CURRENT_LIST_DIR}/colour_aten.cpp
                                       ${_xlaunch_augment_colour_fused} ${CMAKE_CURRENT_LIST_DIR}/colour_normalize.cpp)
# The fused loop's speed is the compiler's vectorisation of its per-block loops, which -O2's cost
# model mostly declines (the blocks' lengths are not known at compile time), and which the hue
# step's selects get only when floating point operations may be assumed not to trap (GCC keeps
# control flow otherwise). Neither option changes a result: no fast-math, the same roundings.
# -ffp-contract=off keeps them so where the target has FMA (GNU C++ contracts by default).
set_source_files_properties(${_xlaunch_augment_colour_fused} TARGET_DIRECTORY xlaunch_runtime
                            PROPERTIES COMPILE_OPTIONS "-O3;-fno-trapping-math;-ffp-contract=off;-fopenmp" SKIP_PRECOMPILE_HEADERS ON)
