# The colour transforms (colour.h): ColorJitter (its arguments and draws, the batched ATen steps
# for any device, the fused CPU loop) and Normalize.
set(_xlaunch_augment_colour_fused ${CMAKE_CURRENT_LIST_DIR}/colour_fused.cpp)
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/colour.cpp ${CMAKE_CURRENT_LIST_DIR}/colour_aten.cpp
                                       ${_xlaunch_augment_colour_fused} ${CMAKE_CURRENT_LIST_DIR}/colour_normalize.cpp)
# The fused loop's speed is the compiler's vectorisation of its per-block loops, which -O2's cost
# model mostly declines (the blocks' lengths are not known at compile time).
set_source_files_properties(${_xlaunch_augment_colour_fused} TARGET_DIRECTORY xlaunch_runtime
                            PROPERTIES COMPILE_OPTIONS -O3)
