// How the benchmarks time what they measure: the steady clock, seconds of a call or per call of a
// loop, and the median of rounds. A benchmark that compares systems alternates them round by round
// so that each sees the same machine noise, and reports each one's median (or best) round.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

namespace xlaunch::bench {

using Clock = std::chrono::steady_clock;

// A field of /proc/self/status in kB ("VmHWM:", the peak resident set; "VmRSS:"), or -1.
inline int64_t status_kb(const char* field) {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::char_traits<char>::length(field)));
  return -1;
}

inline double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Seconds that f() takes; what must be finished inside (a device's queue, the other ranks) f waits for.
template <typename F>
double seconds_of(F&& f) {
  const Clock::time_point t0 = Clock::now();
  f();
  return seconds_since(t0);
}

// Seconds per call of f(i), i = 0 .. calls - 1.
template <typename F>
double seconds_per_call(int calls, F&& f) {
  return seconds_of([&] {
           for (int i = 0; i < calls; ++i) f(i);
         }) /
         calls;
}

// The middle value of the rounds (the mean of the two middle ones for an even count).
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace xlaunch::bench
