# The environment pool: its pure parts (plan, action checks, doorbell), its trajectories against
# the same environments stepped one by one, its errors, and its GPU hand-over (skipped without one);
# with it, for the GPU bundle, the tensor environments' CUDA kernel (tensor_env_cuda_test.cpp).
xlaunch_add_unit_test(env_pool_test
  SOURCES env_pool_test.cpp env_pool_errors_test.cpp env_pool_cuda_test.cpp pool_plan_test.cpp
          env_pool_classic_test.cpp tensor_env_cuda_test.cpp
  LIBS xlaunch::runtime)
set_tests_properties(env_pool_test PROPERTIES TIMEOUT 300)
