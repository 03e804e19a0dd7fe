// main() of a test group (test_group.h): GoogleTest's own main, run on the tests of the files
// named by --test_files.
#include <gtest/gtest.h>

#include "test_group.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  xlaunch::test::select_test_files(argc, argv);
  return RUN_ALL_TESTS();
}
