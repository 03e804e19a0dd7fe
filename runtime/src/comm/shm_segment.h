// POSIX shared-memory segments: the memory that the ranks of one machine all map.
#pragma once

#include <cstddef>
#include <string>

namespace xlaunch {

// Creates (create=true: O_EXCL, mode 0600, every page reserved now so that a full /dev/shm fails
// here rather than as SIGBUS mid-step) or opens the segment `name` and maps `bytes` of it.
// Throws CommError naming the segment, the rank and the system's reason.
char* map_shm_segment(const std::string& name, size_t bytes, bool create);

}  // namespace xlaunch
