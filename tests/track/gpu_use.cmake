# A rank's GPU use (runtime/src/track/gpu_use.h) against the stand-in NVML (tests/report/fake_nvml.c).
xlaunch_add_unit_test(gpu_use_test GROUP track_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/gpu_use_test.cpp LIBS xlaunch::runtime)
target_compile_definitions(track_tests PRIVATE FAKE_NVML="$<TARGET_FILE:fake_nvml>")
add_dependencies(track_tests fake_nvml)
