// One checking macro per foreign library. A failed call throws xlaunch::CommError whose message
// carries the call's text, file:line, rank, host and the library's own error string.
// The CUDA and NCCL macros live in cuda_check.h so CPU-only code need not see their headers.
#pragma once

#include <mpi.h>

#include "xlaunch/error.h"

namespace xlaunch::detail {
[[noreturn]] void throw_call_error(const char* library, const char* call, const char* file, int line,
                                   const std::string& library_message);
[[noreturn]] void throw_mpi_error(const char* call, const char* file, int line, int code);
}  // namespace xlaunch::detail

#define XLAUNCH_CHECK_MPI(call)                                                   \
  do {                                                                            \
    const int xlaunch_mpi_rc_ = (call);                                           \
    if (xlaunch_mpi_rc_ != MPI_SUCCESS)                                           \
      ::xlaunch::detail::throw_mpi_error(#call, __FILE__, __LINE__, xlaunch_mpi_rc_); \
  } while (0)

// An internal invariant: a bug in xlaunch, not a user mistake.
#define XLAUNCH_ASSERT(cond, msg)                                                              \
  do {                                                                                         \
    if (!(cond))                                                                               \
      ::xlaunch::detail::throw_call_error("xlaunch internal", #cond, __FILE__, __LINE__, (msg)); \
  } while (0)
