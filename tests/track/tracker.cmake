# The tracker's writer thread with fake backends; the JSONL and CSV backends' files byte for byte;
# and the same files read back by Python's json and csv modules (tracked_files writes them through
# the Tracker, including a resume that drops orphans).
xlaunch_add_unit_test(tracker_test GROUP track_tests SOURCES tracker_test.cpp LIBS xlaunch::runtime)
xlaunch_add_unit_test(line_backends_test GROUP track_tests SOURCES line_backends_test.cpp LIBS xlaunch::runtime)
add_executable(tracked_files tracked_files.cpp)
xlaunch_use_runtime_internals(tracked_files)
add_test(NAME tracked_files_test
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tracked_files_test.py $<TARGET_FILE:tracked_files>)
set_tests_properties(tracked_files_test PROPERTIES TIMEOUT 120)
