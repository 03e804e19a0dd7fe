# A rank's own GPU use for the tracker's xlaunch/gpu_sm (gpu_use.h), through the status library's NVML.
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/gpu_use.cpp)
