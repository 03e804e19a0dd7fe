// rank0/trainer_state.txt of a checkpoint: "key value" lines (values without spaces), read and
// written by the parts of save_state / load_state that keep counters and positions there.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <sstream>
#include <string>

#include "xlaunch/error.h"

namespace xlaunch::checkpoint {

using KeyValues = std::map<std::string, std::string>;

inline std::string key_values_text(const KeyValues& kv) {
  std::ostringstream os;
  for (const auto& [k, v] : kv) os << k << " " << v << "\n";
  return os.str();
}

inline KeyValues parse_key_values(const std::string& text) {
  KeyValues kv;
  std::istringstream in(text);
  for (std::string k, v; in >> k >> v;) kv[k] = v;
  return kv;
}

// Throws UsageError naming the key when the checkpoint lacks it.
inline int64_t get_int(const KeyValues& kv, const std::string& key) {
  const auto it = kv.find(key);
  if (it == kv.end()) throw UsageError("load_state: rank0/trainer_state.txt in the checkpoint has no '" + key + "'");
  return std::stoll(it->second);
}

// A double that reads back to the same bits.
inline std::string exact(double x) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", x);
  return buf;
}

}  // namespace xlaunch::checkpoint
