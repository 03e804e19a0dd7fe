// POSIX shared-memory segments: the memory that the ranks of one machine all map.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace xlaunch {

// The name of the segment `prefix`-<16 hex digits of nonce>.
std::string shm_segment_name(const std::string& prefix, uint64_t nonce);

struct NewShmSegment {
  uint64_t nonce = 0;  // the random part of its name: what the other ranks need to open it
  char* map = nullptr;
};

// Creates a new segment under an unguessable name (a random nonce after `prefix`; O_EXCL, mode
// 0600, every page reserved now so that a full /dev/shm fails here rather than as SIGBUS mid-step)
// and maps `bytes` of it. A name that exists already (a stale job's, or one planted to get in the
// way) is reported on stderr, never reused, and another is drawn. Throws CommError naming the
// segment, the rank and the system's reason.
NewShmSegment create_shm_segment(const std::string& prefix, size_t bytes);

// Opens the segment `name` another rank created and maps `bytes` of it.
char* open_shm_segment(const std::string& name, size_t bytes);

// Test hook: where the nonces come from (default: the kernel's random pool). Tests make the first
// one collide with a segment they created.
void set_shm_nonce_source(std::function<uint64_t()> source);

}  // namespace xlaunch
