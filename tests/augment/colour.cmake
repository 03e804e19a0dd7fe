# The colour transforms (runtime/src/augment/colour*.cpp).
# colour_test: arguments, draws, literal answers of each step on both implementations, refusals.
xlaunch_add_unit_test(colour_test GROUP augment_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/colour_test.cpp LIBS xlaunch::runtime)
# colour_kornia_test: Kornia 0.9 (a test peer: scripts/install-deps.sh --test) applies its ColorJitter
# and Normalize with explicit parameters (colour_kornia.py), and ours must match within 1e-4.
add_executable(colour_kornia_test ${CMAKE_CURRENT_LIST_DIR}/colour_kornia_test.cpp)
target_link_libraries(colour_kornia_test PRIVATE GTest::gtest nlohmann_json::nlohmann_json)
_xlaunch_test_pch(colour_kornia_test xlaunch::runtime)
add_test(NAME colour_kornia_test
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/colour_kornia_test.sh ${CMAKE_CURRENT_LIST_DIR}/colour_kornia.py
                 $<TARGET_FILE:colour_kornia_test>)
set_tests_properties(colour_kornia_test PROPERTIES TIMEOUT 300)
