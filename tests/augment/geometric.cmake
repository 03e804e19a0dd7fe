# kornia_geometric_test: Kornia 0.9 (a test peer: scripts/install-deps.sh --test) records its
# geometric augmentations with its own parameters (kornia_geometric.py); ours apply the same ones.
add_executable(kornia_geometric_test ${CMAKE_CURRENT_LIST_DIR}/kornia_geometric_test.cpp)
target_link_libraries(kornia_geometric_test PRIVATE GTest::gtest nlohmann_json::nlohmann_json)
_xlaunch_test_pch(kornia_geometric_test xlaunch::runtime)
add_test(NAME kornia_geometric_test
         COMMAND ${CMAKE_CURRENT_LIST_DIR}/kornia_geometric_test.sh ${CMAKE_CURRENT_LIST_DIR}/kornia_geometric.py
                 $<TARGET_FILE:kornia_geometric_test>)
set_tests_properties(kornia_geometric_test PROPERTIES TIMEOUT 300)
