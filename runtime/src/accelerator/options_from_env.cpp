// AcceleratorOptions::from_env: the launched job's settings, from the XLAUNCH_* variables: one read
// per row of xlaunch/settings.h that says ACC or ACC_AT, into the field it names.
#include "xlaunch/accelerator_options.h"

#include "env_read.h"

namespace xlaunch {
namespace {

using env::read_into;
// A list of names, as XLAUNCH_LOG_WITH carries the trackers ("all": every one).
void read_into(const env::Var& v, std::vector<std::string>& out) {
  out = AcceleratorOptions::split_log_with(env::get_string(v));
}

}  // namespace

#define XLAUNCH_FROM_ENV_READ(constant, name, type, path) read_into(env::constant, o.path);
#define XLAUNCH_FROM_ENV_AT(path, env) XLAUNCH_WHEN_ENV(env, XLAUNCH_FROM_ENV_READ, path)
#define XLAUNCH_FROM_ENV_ROW(S, name, type, env, dflt, cli, check, runtime, meaning) \
  XLAUNCH_WHEN_ACCELERATOR(runtime, XLAUNCH_FROM_ENV_AT, env)

AcceleratorOptions AcceleratorOptions::from_env() {
  AcceleratorOptions o;
  XLAUNCH_SETTINGS(XLAUNCH_FROM_ENV_ROW)
  o.resume = env::get_string(env::kResume);
  return o;
}

}  // namespace xlaunch
