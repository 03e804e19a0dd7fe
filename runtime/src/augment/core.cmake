# The core (transform.h, args.h, sequential.h): the draw protocol, the registry, reading Kornia's
# keyword arguments, and the sequence.
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/transform.cpp ${CMAKE_CURRENT_LIST_DIR}/registry.cpp
                                       ${CMAKE_CURRENT_LIST_DIR}/args.cpp ${CMAKE_CURRENT_LIST_DIR}/sequential.cpp)
# The sequence's per-row loop (parallel_rows, rows.h) runs on the intra-op threads only where its file
# is compiled with OpenMP (runtime/src/optim/CMakeLists.txt says why); so do the kernels' files.
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/sequential.cpp TARGET_DIRECTORY xlaunch_runtime
                            PROPERTIES COMPILE_OPTIONS "-fopenmp" SKIP_PRECOMPILE_HEADERS ON)
