// The environment contract between the launcher and the runtime: every XLAUNCH_* variable, declared
// once, with its type, default and meaning. The launcher exports exactly those of kAll (with
// mpirun -x); the runtime reads its settings only from them, never from the YAML file. The few of
// kLauncherOnly tune `xlaunch` itself and stay in its own environment.
//
// The variables of settings come from the settings table's rows (xlaunch/settings.h), whose
// defaults are the only spelling of each setting's default: the config schema and the runtime's
// option structs (AcceleratorOptions, LoaderOptions, the watchdog's settings) initialise their
// fields from them, and tests/contract/defaults_test.cpp fails if any of them differ.
//
// Header-only and free of torch and MPI, so the launcher can include it without linking either.
// A malformed value is the user's mistake: the readers throw xlaunch::UsageError naming it.
#pragma once

#include <cstdlib>
#include <string>

#include "xlaunch/error.h"
#include "xlaunch/settings.h"

namespace xlaunch::env {

enum class Type { Bool, Int, Float, String };

struct Var {
  const char* name;
  Type type;
  const char* default_value;
  const char* meaning;
};

// The variables of the settings (xlaunch/settings.h): one per row with ENV(...), its default and
// meaning taken from the row.
#define XLAUNCH_ENV_DECLARE(constant, name, type, S, key, dflt, meaning) \
  inline constexpr Var constant{name, Type::type, dflt, meaning};
#define XLAUNCH_ENV_ROW(S, key, ctype, env, dflt, cli, check, runtime, meaning) \
  XLAUNCH_WHEN_ENV(env, XLAUNCH_ENV_DECLARE, S, key, dflt, meaning)
XLAUNCH_SETTINGS(XLAUNCH_ENV_ROW)
#undef XLAUNCH_ENV_ROW
#undef XLAUNCH_ENV_DECLARE

// Per launch, not settings: set by `xlaunch run` for each attempt.
// clang-format off
inline constexpr Var kResume                 {"XLAUNCH_RESUME", Type::String, "", "what acc.maybe_load_state() loads: 'latest' (the newest complete checkpoint in project_dir) or a checkpoint directory; empty: start afresh"};
inline constexpr Var kRunId                  {"XLAUNCH_RUN_ID", Type::String, "", "identifier of this launch, the same on every rank"};
inline constexpr Var kRestartCount           {"XLAUNCH_RESTART_COUNT", Type::Int, "0", "how many times the launcher has restarted this job"};
inline constexpr Var kStatusDir              {"XLAUNCH_STATUS_DIR", Type::String, "", "this attempt's directory for the ranks' exit statuses and progress boards (made by xlaunch run)"};
inline constexpr Var kConfigFile             {"XLAUNCH_CONFIG_FILE", Type::String, "", "the config file: read by `xlaunch` when no --config_file is given; exported to the ranks as the file used"};
// clang-format on

// Every variable the launcher exports, in the order it exports them: the settings' in the table's
// order, then the per-launch ones.
#define XLAUNCH_ENV_POINTER(constant, name, type, unused) &constant,
#define XLAUNCH_ENV_ROW(S, key, ctype, env, dflt, cli, check, runtime, meaning) \
  XLAUNCH_WHEN_ENV(env, XLAUNCH_ENV_POINTER, 0)
inline constexpr const Var* kAll[] = {
    XLAUNCH_SETTINGS(XLAUNCH_ENV_ROW) &kResume, &kRunId, &kRestartCount, &kStatusDir, &kConfigFile,
};
#undef XLAUNCH_ENV_ROW
#undef XLAUNCH_ENV_POINTER

// The config key a setting's variable carries, for messages ("ddp.zero_stage" for kZeroStage), so
// a message names the key as the table spells it; "" for a per-launch variable.
inline const char* key_of(const Var& v) {
#define XLAUNCH_ENV_KEY(constant, name, type, S, key) \
  if (&v == &constant) return #S #key;
#define XLAUNCH_ENV_ROW(S, key, ctype, env, dflt, cli, check, runtime, meaning) \
  XLAUNCH_WHEN_ENV(env, XLAUNCH_ENV_KEY, S, key)
  XLAUNCH_SETTINGS(XLAUNCH_ENV_ROW)
#undef XLAUNCH_ENV_ROW
#undef XLAUNCH_ENV_KEY
  return "";
}

// Read by the launcher from its own environment, never exported to the ranks (so not in kAll).
// clang-format off
inline constexpr Var kNvmlLibrary            {"XLAUNCH_NVML_LIBRARY", Type::String, "libnvidia-ml.so.1", "the NVML library `xlaunch run` samples the GPUs with (the report, --monitor), and a GPU rank reads its SM use with (xlaunch/gpu_sm, inherited, not exported); empty: the default"};
inline constexpr Var kCpuinfoFile            {"XLAUNCH_CPUINFO_FILE", Type::String, "", "a copy of /proc/cpuinfo that `xlaunch config` and `xlaunch run` read this machine's CPU flags from (whether bf16/fp16 mixed precision pays on a CPU job); empty: /proc/cpuinfo"};
// clang-format on
inline constexpr const Var* kLauncherOnly[] = {&kNvmlLibrary, &kCpuinfoFile};

// The raw value: the environment's, or the declared default when unset.
inline std::string raw(const Var& v) {
  const char* s = std::getenv(v.name);
  return s ? std::string(s) : std::string(v.default_value);
}

inline UsageError bad_value(const Var& v, const std::string& value, const char* expected) {
  return UsageError(std::string(v.name) + "='" + value + "' is not " + expected + " (" +
                               v.meaning + "); unset it or fix the launcher config");
}

// Parsing a value as the variable's type; `value` is the environment's or the declared default.
inline bool parse_bool(const Var& v, const std::string& s) {
  if (s == "1" || s == "true" || s == "True" || s == "yes") return true;
  if (s == "0" || s == "false" || s == "False" || s == "no" || s.empty()) return false;
  throw bad_value(v, s, "a boolean (0 or 1)");
}

inline long parse_int(const Var& v, const std::string& s) {
  char* end = nullptr;
  const long x = std::strtol(s.c_str(), &end, 10);
  if (s.empty() || *end != '\0') throw bad_value(v, s, "an integer");
  return x;
}

inline double parse_float(const Var& v, const std::string& s) {
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') throw bad_value(v, s, "a number");
  return x;
}

// The value this process was given (the declared default when unset).
inline std::string get_string(const Var& v) { return raw(v); }
inline bool get_bool(const Var& v) { return parse_bool(v, raw(v)); }
inline long get_int(const Var& v) { return parse_int(v, raw(v)); }
inline double get_float(const Var& v) { return parse_float(v, raw(v)); }

// The declared default, typed: what every struct that holds the setting starts from.
inline std::string default_string(const Var& v) { return v.default_value; }
inline bool default_bool(const Var& v) { return parse_bool(v, v.default_value); }
inline long default_int(const Var& v) { return parse_int(v, v.default_value); }
inline double default_float(const Var& v) { return parse_float(v, v.default_value); }

}  // namespace xlaunch::env
