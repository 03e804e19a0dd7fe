// Errors thrown by the runtime. Library code throws; only a program's main turns them into exit
// codes. A UsageError is the user's mistake and its message says how to fix it; a CommError is a
// failed MPI/NCCL/CUDA call and names the call, the place, the rank, the host and the library's
// own error string.
#pragma once

#include <stdexcept>
#include <string>

namespace xlaunch {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class UsageError : public Error {
 public:
  using Error::Error;
};

class CommError : public Error {
 public:
  using Error::Error;
};

// "rank R (host H)" for messages; works before and without MPI.
std::string where_am_i();

}  // namespace xlaunch
