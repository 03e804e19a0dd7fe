# The tensor environments (xlaunch/rl/tensor_env.h): TensorEnv and its generic step in tensor
# operations, and the built-in environments' rows (kernels/include/xlaunch/kernels/env_rows.h) on the
# CPU; on a GPU the rows are the kernels library's env_rows.cu, launched from tensor_env_cuda.cpp.
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tensor_env.cpp ${CMAKE_CURRENT_LIST_DIR}/tensor_rows_cpu.cpp)
if(XLAUNCH_DEVICE_PATHS)
  target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tensor_env_cuda.cpp)
endif()
# The rows: each operation rounded on its own (no fused multiply-add, as on the GPU with
# --fmad=false), and at::parallel_for on the intra-op threads, which needs OpenMP in this file
# (runtime/src/optim/CMakeLists.txt says why; the library links -fopenmp there).
set_source_files_properties(${CMAKE_CURRENT_LIST_DIR}/tensor_rows_cpu.cpp TARGET_DIRECTORY xlaunch_runtime
                            PROPERTIES COMPILE_OPTIONS "-O3;-ffp-contract=off;-fopenmp" SKIP_PRECOMPILE_HEADERS ON)
