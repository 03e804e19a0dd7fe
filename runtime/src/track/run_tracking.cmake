# Tracking during training, as the Accelerator's init_trackers, log and end_training drive it
# (run_tracking.h), and what it computes: the utilization scalars over the ranks, and histograms of
# tensors.
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/run_tracking.cpp
                                       ${CMAKE_CURRENT_LIST_DIR}/utilization.cpp ${CMAKE_CURRENT_LIST_DIR}/histograms.cpp)
