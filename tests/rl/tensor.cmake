# The tensor environments (xlaunch/rl/tensor_env.h): the generator, the fused step against the
# generic one, a user's environment against the pool, and the errors. Their CUDA kernel against the
# CPU (tensor_env_cuda_test.cpp, skipped without a GPU) is in env_pool_test (pool.cmake), the binary
# the GPU bundle already carries. (Their dynamics against
# Gymnasium's own are in gym_equivalence_test, envs.cmake.)
xlaunch_add_unit_test(tensor_env_test SOURCES tensor_env_test.cpp LIBS xlaunch::runtime)
target_link_libraries(tensor_env_test PRIVATE xlaunch_kernels)  # env_rows.h, the rows' generator
set_tests_properties(tensor_env_test PROPERTIES TIMEOUT 300)
