// main() for GoogleTest programs run under mpirun: every rank runs every test; a failure on any
// rank makes mpirun (and so CTest) fail. Only rank 0 prints the per-test progress. In a test group
// (test_group.h), --test_files picks the tests.
#include <gtest/gtest.h>

#include "test_group.h"
#include "xlaunch/process_state.h"

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  xlaunch::test::select_test_files(argc, argv);
  const auto& ps = xlaunch::ProcessState::get();
  if (ps.rank() != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int rc = RUN_ALL_TESTS();
  if (rc != 0) std::fprintf(stderr, "rank %d: tests FAILED\n", ps.rank());
  return rc;
}
