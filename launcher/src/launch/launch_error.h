// LaunchError: something the user must fix before a job can start (a missing binary, no Open MPI,
// a bad option). Its message ends with the fix. main turns it into exit code 2.
#pragma once

#include <stdexcept>

namespace xlaunch::launcher {

class LaunchError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace xlaunch::launcher
