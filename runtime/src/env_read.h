// One read of an XLAUNCH_* variable into an option field of its type, for the from_env() functions
// that expand the settings table's rows (AcceleratorOptions, LoaderOptions). An int field refuses a
// value it cannot hold instead of wrapping it past a range check.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "xlaunch/env_vars.h"

namespace xlaunch::env {

inline void read_into(const Var& v, bool& out) { out = get_bool(v); }
inline void read_into(const Var& v, int64_t& out) { out = get_int(v); }
inline void read_into(const Var& v, double& out) { out = get_float(v); }
inline void read_into(const Var& v, std::string& out) { out = get_string(v); }
inline void read_into(const Var& v, int& out) {
  const int64_t value = get_int(v);
  if (value < std::numeric_limits<int>::min() || value > std::numeric_limits<int>::max())
    throw bad_value(v, std::to_string(value), "an integer of at most 10 digits");
  out = static_cast<int>(value);
}

}  // namespace xlaunch::env
