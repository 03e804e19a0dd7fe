# The core and the geometric transforms without Kornia (augment_test), and on a GPU against the CPU
# (augment_cuda_test: skips, saying so, without one).
xlaunch_add_unit_test(augment_test GROUP augment_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/augment_test.cpp
                      ${CMAKE_CURRENT_LIST_DIR}/augment_sequential_test.cpp LIBS xlaunch::runtime)
xlaunch_add_unit_test(augment_cuda_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/augment_cuda_test.cpp LIBS xlaunch::runtime)
# The loader's augmentation: the same batches for any num_workers, equal to the Sequential by hand.
xlaunch_add_unit_test(loader_augment_test GROUP augment_tests SOURCES ${CMAKE_CURRENT_LIST_DIR}/loader_augment_test.cpp LIBS xlaunch::runtime)
