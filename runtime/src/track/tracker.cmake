# The tracker's writer thread (tracker.h) and HParam::to_string.
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tracker.cpp ${CMAKE_CURRENT_LIST_DIR}/hparam.cpp)
