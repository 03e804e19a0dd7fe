// AcceleratorOptions::from_env: the launched job's settings, from the XLAUNCH_* variables: one read
// per row of xlaunch/settings.h that says ACC or ACC_AT, into the field it names.
#include "xlaunch/accelerator_options.h"

namespace xlaunch {
namespace {

void read_option(const env::Var& v, bool& out) { out = env::get_bool(v); }
void read_option(const env::Var& v, int& out) { out = static_cast<int>(env::get_int(v)); }
void read_option(const env::Var& v, int64_t& out) { out = env::get_int(v); }
void read_option(const env::Var& v, double& out) { out = env::get_float(v); }
void read_option(const env::Var& v, std::string& out) { out = env::get_string(v); }
// A list of names, as XLAUNCH_LOG_WITH carries the trackers ("all": every one).
void read_option(const env::Var& v, std::vector<std::string>& out) {
  out = AcceleratorOptions::split_log_with(env::get_string(v));
}

}  // namespace

#define XLAUNCH_FROM_ENV_READ(constant, name, type, path) read_option(env::constant, o.path);
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
