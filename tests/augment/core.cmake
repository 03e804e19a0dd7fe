# The core and the geometric transforms without Kornia (augment_test), and on a GPU against the CPU
# (augment_cuda_test: skips, saying so, without one).
xlaunch_add_unit_test(augment_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/augment_test.cpp LIBS xlaunch::runtime)
xlaunch_add_unit_test(augment_cuda_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/augment_cuda_test.cpp LIBS xlaunch::runtime)
