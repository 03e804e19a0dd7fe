# The environments (runtime/src/rl/env.cpp and the classic-control set).
# env_test: Space, Rng, env_seed and the registry, with literal answers.
xlaunch_add_unit_test(env_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/env_test.cpp LIBS xlaunch::runtime)
# gym_equivalence_test: Gymnasium 1.4 (a test peer: scripts/install-deps.sh --test) records 10,000
# steps of each environment (gym_trace.py), and ours replay them from the same initial states; the
# tensor environments' rows (float32) step from each of Gymnasium's states, and TensorEnv's automatic
# reset and time limit replay Gymnasium's SyncVectorEnv (gym_vector_trace.py).
add_executable(gym_equivalence_test ${CMAKE_CURRENT_LIST_DIR}/gym_equivalence_test.cpp)
target_link_libraries(gym_equivalence_test PRIVATE GTest::gtest nlohmann_json::nlohmann_json xlaunch_kernels)
_xlaunch_test_pch(gym_equivalence_test xlaunch::runtime)
add_test(NAME gym_equivalence_test
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/gym_equivalence_test.sh ${CMAKE_CURRENT_LIST_DIR}/gym_trace.py
                 ${CMAKE_CURRENT_LIST_DIR}/gym_vector_trace.py $<TARGET_FILE:gym_equivalence_test>)
set_tests_properties(gym_equivalence_test PROPERTIES TIMEOUT 300)
