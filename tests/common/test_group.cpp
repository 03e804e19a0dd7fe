#include "test_group.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace xlaunch::test {
namespace {

constexpr const char* kFlag = "--test_files=";

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// The negative patterns that leave out every test not defined in `files`: a whole suite as
// "Suite.*" when none of it is wanted, else its unwanted tests one by one.
std::string unwanted_patterns(const std::set<std::string>& files, std::set<std::string>& seen) {
  std::string out;
  const auto add = [&out](const std::string& pattern) { out += (out.empty() ? "" : ":") + pattern; };
  const auto* unit = testing::UnitTest::GetInstance();
  for (int s = 0; s < unit->total_test_suite_count(); ++s) {
    const auto* suite = unit->GetTestSuite(s);
    std::vector<std::string> unwanted;
    for (int t = 0; t < suite->total_test_count(); ++t) {
      const auto* info = suite->GetTestInfo(t);
      const std::string file = base_name(info->file());
      if (files.count(file)) {
        seen.insert(file);
      } else {
        unwanted.push_back(std::string(suite->name()) + "." + info->name());
      }
    }
    if (static_cast<int>(unwanted.size()) == suite->total_test_count()) {
      add(std::string(suite->name()) + ".*");
    } else {
      for (const auto& name : unwanted) add(name);
    }
  }
  return out;
}

}  // namespace

void select_test_files(int& argc, char** argv) {
  std::set<std::string> files;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], kFlag, std::strlen(kFlag)) == 0) {
      std::stringstream list(argv[i] + std::strlen(kFlag));
      for (std::string f; std::getline(list, f, ',');) files.insert(f);
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  argv[argc] = nullptr;
  if (files.empty()) return;

  std::set<std::string> seen;
  const std::string unwanted = unwanted_patterns(files, seen);
  for (const auto& f : files) {
    if (!seen.count(f)) {
      std::fprintf(stderr, "%s: no test is defined in %s (--test_files)\n", argv[0], f.c_str());
      std::exit(2);
    }
  }
  // The filter is POSITIVE[-NEGATIVE]: the unwanted tests join its negative patterns.
  const std::string filter = GTEST_FLAG_GET(filter);
  if (!unwanted.empty()) {
    const bool has_negative = filter.find('-') != std::string::npos;
    GTEST_FLAG_SET(filter, filter + (has_negative ? ":" : "-") + unwanted);
  }
}

}  // namespace xlaunch::test
