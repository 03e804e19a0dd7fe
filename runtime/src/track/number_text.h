// Numbers as text in the tracker's files: the shortest form that reads back as the same double
// (std::to_chars: 0.001, 64, 1e-05, 1733300000.25), as Python's repr and json write them. Each
// format spells the non-finite values its own way, so they are the caller's.
#pragma once

#include <charconv>
#include <string>

namespace xlaunch::track {

inline std::string shortest(double v) {
  char buf[32];  // the longest double, -2.2250738585072014e-308, takes 24
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, r.ptr);
}

}  // namespace xlaunch::track
