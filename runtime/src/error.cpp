#include "xlaunch/error.h"

#include <mpi.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <sstream>

#include "check.h"
#include "xlaunch/place.h"

namespace xlaunch {

// From the launcher's environment and the host name alone, never through ProcessState: an error
// raised while ProcessState itself is being made (MPI_Init_thread failing) must still be able to
// name the rank, and naming it must not start MPI.
std::string where_am_i() {
  std::string rank;
  try {
    rank = std::to_string(place_from_env([](const char* n) { return std::getenv(n); }).rank);
  } catch (const UsageError&) {
    rank = "?";  // the place variables are malformed; ProcessState reports that on its own
  }
  char name[HOST_NAME_MAX + 1] = {0};
  return "rank " + rank + " (host " + (gethostname(name, sizeof name - 1) == 0 ? name : "unknown-host") + ")";
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
