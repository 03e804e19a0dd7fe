// LoaderOptions::from_env: the launched job's loader settings, from the XLAUNCH_* variables: one
// read per row of xlaunch/settings.h that says LOADER(field), and num_workers' "auto" by hand.
#include <cstdlib>
#include <string>

#include "xlaunch/env_vars.h"
#include "xlaunch/loader.h"

#include "env_read.h"

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

}  // namespace

#define XLAUNCH_LOADER_READ(constant, name, type, field) env::read_into(env::constant, o.field);
#define XLAUNCH_LOADER_AT(field, env) XLAUNCH_WHEN_ENV(env, XLAUNCH_LOADER_READ, field)
#define XLAUNCH_LOADER_ROW(S, name, type, env, dflt, cli, check, runtime, meaning) \
  XLAUNCH_WHEN_LOADER(runtime, XLAUNCH_LOADER_AT, env)

LoaderOptions LoaderOptions::from_env() {
  LoaderOptions o;
  o.num_workers = num_workers_from_env();
  XLAUNCH_SETTINGS(XLAUNCH_LOADER_ROW)
  if (o.prefetch_factor < 1 || o.prefetch_factor > 1024)
    throw env::bad_value(env::kPrefetchFactor, std::to_string(o.prefetch_factor), "in 1..1024");
  return o;
}

}  // namespace xlaunch
