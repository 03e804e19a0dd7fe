#include "xlaunch/error.h"

#include <mpi.h>

#include <sstream>

#include "check.h"
#include "xlaunch/process_state.h"

namespace xlaunch {

std::string where_am_i() {
  const auto& ps = ProcessState::get();
  return "rank " + std::to_string(ps.rank()) + " (host " + ps.host() + ")";
}

namespace detail {

void throw_call_error(const char* library, const char* call, const char* file, int line,
                      const std::string& library_message) {
  std::ostringstream os;
  os << library << " call `" << call << "` failed at " << file << ":" << line << " on " << where_am_i()
     << ": " << library_message;
  throw CommError(os.str());
}

void throw_mpi_error(const char* call, const char* file, int line, int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) len = 0;
  throw_call_error("MPI", call, file, line, std::string(text, len) + " (code " + std::to_string(code) + ")");
}

}  // namespace detail
}  // namespace xlaunch
