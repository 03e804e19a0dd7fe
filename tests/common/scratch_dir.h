// A scratch directory for a test: made fresh under /tmp (mkdtemp: mode 0700, a name nobody else
// holds), named after the test suite, removed when the test passed and kept for a look when it
// failed. Removed with `rm -rf`, not std::filesystem::remove_all: the torch wheel's libtorch exports
// a remove_all of its own that crashes in test programs that link it.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>
#include <string>

namespace xlaunch::test {

// /tmp/xlaunch_<suite>.XXXXXX, made; `suite` defaults to the running test's suite name.
inline std::string make_scratch_dir(std::string suite = "") {
  if (suite.empty()) {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    suite = info ? info->test_suite_name() : "test";
    for (char& ch : suite)
      if (ch == '/') ch = '_';  // parameterised suites: "Prefix/Suite"
  }
  std::string path = "/tmp/xlaunch_" + suite + ".XXXXXX";
  if (!mkdtemp(path.data())) throw std::runtime_error("mkdtemp " + path + " failed");
  return path;
}

inline void remove_scratch_dir(const std::string& dir) {
  if (!dir.empty()) std::system(("rm -rf '" + dir + "'").c_str());
}

// A scratch directory for the scope of a test body: `path` is made at construction and removed at
// destruction unless the test has failed by then.
struct ScratchDir {
  const std::string path = make_scratch_dir();
  ScratchDir() = default;
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;
  ~ScratchDir() {
    if (!::testing::Test::HasFailure()) remove_scratch_dir(path);
  }
};

// A fixture whose dir_ is the test's scratch directory. A fixture that sets up more calls
// ScratchDirTest::SetUp() first. Base: ::testing::Test, or ::testing::TestWithParam<T>.
template <class Base = ::testing::Test>
class ScratchDirTest : public Base {
 protected:
  void SetUp() override { dir_ = make_scratch_dir(); }
  void TearDown() override {
    if (!::testing::Test::HasFailure()) remove_scratch_dir(dir_);
  }
  std::string dir_;
};

}  // namespace xlaunch::test
