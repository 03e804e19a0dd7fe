// What save_state, load_state and the job's stops tell the user: one line on stderr, from rank 0
// only (every rank knows the same), marked as xlaunch's.
#pragma once

#include <iostream>
#include <string>

namespace xlaunch {

inline void log_main(int rank, const std::string& line) {
  if (rank == 0) std::cerr << "[xlaunch] " << line << std::endl;
}

}  // namespace xlaunch
