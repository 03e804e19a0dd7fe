// ConfigError: a config the user must fix. It names the file, the key (and the line where yaml-cpp
// knows it), what was found and what is allowed, so the message alone says how to fix it.
// Library code throws it; only the launcher's main turns it into exit code 2.
#pragma once

#include <stdexcept>
#include <string>

namespace xlaunch::config {

struct ConfigErrorInfo {
  std::string file;     // empty: not from a file (command line, built-in)
  std::string key;      // "num_processes", "mpi.bind_to"; empty: the whole file
  int line = 0;         // 1-based; 0: unknown
  std::string found;    // what the file holds, as written
  std::string allowed;  // what would be accepted
  std::string hint;     // e.g. "did you mean 'num_processes'?"; may be empty
};

class ConfigError : public std::runtime_error {
 public:
  explicit ConfigError(ConfigErrorInfo info);
  const ConfigErrorInfo& info() const { return info_; }

 private:
  ConfigErrorInfo info_;
};

// "file:line: key 'k': found 'x'; allowed: y (hint)", leaving out the parts that are empty.
std::string format_config_error(const ConfigErrorInfo& info);

}  // namespace xlaunch::config
