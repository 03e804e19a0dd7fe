// The "--key value" arguments of the test programs that mpirun or a test script starts
// (train_resume, train_job, resume_world, partition_train).
#pragma once

#include <map>
#include <string>

namespace xlaunch::test {

using Args = std::map<std::string, std::string>;

inline Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i + 1 < argc; i += 2) a[argv[i]] = argv[i + 1];
  return a;
}

// The value of `key`, or `fallback` when it was not given.
inline std::string get(const Args& a, const std::string& key, const std::string& fallback = "") {
  const auto it = a.find(key);
  return it == a.end() ? fallback : it->second;
}

}  // namespace xlaunch::test
