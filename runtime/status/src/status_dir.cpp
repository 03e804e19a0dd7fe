#include "xlaunch/status/status_dir.h"

#include <cstdlib>

namespace xlaunch::status {

std::string temp_dir() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

std::string progress_board_path(const std::string& dir, int rank) { return dir + "/progress-" + std::to_string(rank); }

}  // namespace xlaunch::status
