# acc.log on several ranks through `xlaunch run`: only rank 0 writes, reduced values are the ranks'
# mean and max, the utilization scalars appear, and a job that crashed and resumed from its last
# checkpoint shows no duplicated steps (read back by TensorBoard's EventAccumulator, json and csv).
add_executable(track_job ${CMAKE_CURRENT_LIST_DIR}/track_job.cpp)
_xlaunch_test_pch(track_job xlaunch::runtime)
add_test(NAME tracking_job_test
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/tracking_job_test.sh $<TARGET_FILE:xlaunch> $<TARGET_FILE:track_job>)
set_tests_properties(tracking_job_test PROPERTIES TIMEOUT 600 LABELS mpi RUN_SERIAL TRUE)
