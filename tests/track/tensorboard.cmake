# The TensorBoard backend: its parts with literal answers (CRC-32C, framing, failed writes, the
# Events parsed back in C++), then TensorBoard's own reader (a test peer: scripts/install-deps.sh
# --test) reading a resumed run that tb_write_events writes.
xlaunch_add_unit_test(tensorboard_test GROUP track_tests SOURCES tensorboard_test.cpp LIBS xlaunch::runtime)
xlaunch_use_tensorboard_protos(track_tests)
add_executable(tb_write_events tb_write_events.cpp)
target_link_libraries(tb_write_events PRIVATE GTest::gtest)  # the shared precompiled header holds GoogleTest
_xlaunch_test_pch(tb_write_events xlaunch::runtime)
add_test(NAME tensorboard_oracle_test
         COMMAND python3 ${CMAKE_CURRENT_SOURCE_DIR}/tensorboard_oracle_test.py $<TARGET_FILE:tb_write_events>)
set_tests_properties(tensorboard_oracle_test PROPERTIES TIMEOUT 120)
