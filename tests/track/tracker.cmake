# The tracker's writer thread with fake backends.
xlaunch_add_unit_test(tracker_test SOURCES tracker_test.cpp LIBS xlaunch::runtime)
