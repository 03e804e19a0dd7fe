# The tracker's writer thread (tracker.h), the JSONL and CSV backends and the file of lines they
# share, and HParam::to_string.
target_sources(xlaunch_runtime PRIVATE ${CMAKE_CURRENT_LIST_DIR}/tracker.cpp ${CMAKE_CURRENT_LIST_DIR}/hparam.cpp
                                       ${CMAKE_CURRENT_LIST_DIR}/line_file.cpp ${CMAKE_CURRENT_LIST_DIR}/jsonl_backend.cpp
                                       ${CMAKE_CURRENT_LIST_DIR}/csv_backend.cpp)
