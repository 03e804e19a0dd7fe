# The Accelerator's tracking calls (init_trackers, log, end_training) and what they compute: the
# utilization scalars over the ranks, and histograms of tensors.
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/accelerator_tracking.cpp
                                       ${CMAKE_CURRENT_LIST_DIR}/utilization.cpp ${CMAKE_CURRENT_LIST_DIR}/histograms.cpp)
