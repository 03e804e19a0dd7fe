#include <cstdlib>
#include <string>

#include "xlaunch/env_vars.h"
#include "xlaunch/loader.h"

namespace xlaunch {
namespace {

int num_workers_from_env() {
  const std::string s = env::get_string(env::kNumWorkers);
  if (s == "auto") return kAutoWorkers;
  char* end = nullptr;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0' || v < 0 || v > 1024)
    throw env::bad_value(env::kNumWorkers, s, "a worker count (0..1024) or 'auto'");
  return static_cast<int>(v);
}

int prefetch_factor_from_env() {
  const long v = env::get_int(env::kPrefetchFactor);
  if (v < 1 || v > 1024) throw env::bad_value(env::kPrefetchFactor, std::to_string(v), "in 1..1024");
  return static_cast<int>(v);
}

bool pin_memory_from_env() { return env::get_bool(env::kPinMemory); }

}  // namespace

LoaderOptions LoaderOptions::from_env() {
  LoaderOptions o;
  o.num_workers = num_workers_from_env();
  o.prefetch_factor = prefetch_factor_from_env();
  o.pin_memory = pin_memory_from_env();
  o.even_batches = env::get_bool(env::kEvenBatches);
  return o;
}

}  // namespace xlaunch
