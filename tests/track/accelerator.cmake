# acc.init_trackers / acc.log on ranks as threads, the utilization scalars, histograms.
xlaunch_add_unit_test(log_test GROUP track_tests SOURCES log_test.cpp LIBS xlaunch::runtime nlohmann_json::nlohmann_json)
