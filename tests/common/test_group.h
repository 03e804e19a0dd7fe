// A test group is one GoogleTest program built from the test files of one area (tests/CMakeLists.txt:
// GROUP). CTest keeps one test per former program: each passes --test_files=a_test.cpp,b_test.cpp,
// and only the tests defined in those files run, so a failure still names the test it was.
#pragma once

namespace xlaunch::test {

// Call after testing::InitGoogleTest. Removes --test_files=... from argv and narrows the test
// filter (--gtest_filter, which still applies) to the tests defined in those files. Exits with a
// message when a named file defines no test: a CTest test that ran nothing would pass unseen.
void select_test_files(int& argc, char** argv);

}  // namespace xlaunch::test
