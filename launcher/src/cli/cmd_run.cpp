// `xlaunch run [options] train_bin [args...]`: load the config, apply the options, check
// everything that can be checked before starting, then run the launch plan and report how the
// ranks ended. See docs/cli.md.
#include "cli/cmd_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>

#include "cli/config_in_use.h"
#include "cli/overrides.h"
#include "launch/attempts.h"
#include "launch/cpu_features.h"
#include "launch/elastic.h"
#include "launch/launch_error.h"
#include "launch/launch_plan.h"
#include "launch/machine.h"
#include "launch/programs.h"
#include "observe/attempt_report.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/setting.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/status_dir.h"

namespace xlaunch::launcher {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// Keys that fell back to defaults, with a section whose keys all did shortened to "mpi.*".
std::string defaults_summary(const std::vector<std::string>& defaulted) {
  std::vector<std::string> out;
  for (size_t i = 0; i < defaulted.size(); ++i) {
    const std::string& k = defaulted[i];
    const size_t dot = k.find('.');
    if (dot == std::string::npos) {
      out.push_back(k);
      continue;
    }
    const std::string section = k.substr(0, dot + 1);
    const auto& all = config::schema_keys();
    const long in_schema = std::count_if(all.begin(), all.end(), [&](const std::string& x) { return x.rfind(section, 0) == 0; });
    long in_list = 0;
    while (i + in_list < defaulted.size() && defaulted[i + in_list].rfind(section, 0) == 0) ++in_list;
    if (in_list == in_schema) {
      out.push_back(section + "*");
    } else {
      out.insert(out.end(), defaulted.begin() + static_cast<long>(i), defaulted.begin() + static_cast<long>(i + in_list));
    }
    i += static_cast<size_t>(in_list) - 1;
  }
  return join(out);
}

// The XLAUNCH_* variables of the environment `xlaunch run` started in.
config::EnvMap user_environment() {
  config::EnvMap out;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    const size_t eq = entry.find('=');
    if (entry.rfind("XLAUNCH_", 0) == 0 && eq != std::string::npos) out[entry.substr(0, eq)] = entry.substr(eq + 1);
  }
  return out;
}

// "XLAUNCH_ZERO_STAGE (ddp.zero_stage), ...": the variables that set keys.
std::string variables_of(const std::vector<std::string>& keys) {
  std::vector<std::string> out;
  for (const auto& k : keys) out.push_back(std::string(config::find_setting(k)->var->name) + " (" + k + ")");
  return join(out);
}

// The per-launch variables are `xlaunch run`'s to set for each attempt: one the user set is not
// what the ranks get, and is named.
void warn_per_launch_variables(const config::EnvMap& user_env) {
  for (const env::Var* v : {&env::kResume, &env::kRunId, &env::kRestartCount, &env::kStatusDir})
    if (user_env.count(v->name))
      std::fprintf(stderr, "xlaunch: warning: %s is set in the environment, but xlaunch run sets it for each "
                           "attempt (%s); the ranks get xlaunch run's\n", v->name, v->meaning);
}

// One line: which file was used (or none), what the environment and the command line set, what
// fell back to defaults.
void print_config_line(const ConfigInUse& in_use, const std::vector<std::string>& from_env,
                       const std::vector<std::string>& from_cli) {
  std::string line;
  if (in_use.loaded) {
    line = "config " + in_use.location.path + " (from " + config::to_string(in_use.location.origin) + ")";
  } else {
    line = "no config file" +
           (in_use.location.path.empty() ? std::string() : " at " + in_use.location.path) +
           ", using built-in defaults (write one with `xlaunch config`)";
  }
  if (!from_env.empty()) line += "; from the environment: " + variables_of(from_env);
  if (!from_cli.empty()) line += "; from the command line: " + join(from_cli);
  if (in_use.loaded) {
    const auto in = [](const std::vector<std::string>& v, const std::string& k) {
      return std::find(v.begin(), v.end(), k) != v.end();
    };
    std::vector<std::string> defaulted;
    for (const auto& k : in_use.loaded->defaulted)
      if (!in(from_cli, k) && !in(from_env, k)) defaulted.push_back(k);
    if (!defaulted.empty()) line += "; defaults for: " + defaults_summary(defaulted);
  }
  std::fprintf(stderr, "xlaunch: %s\n", line.c_str());
  if (in_use.loaded && !in_use.loaded->unsupported.empty())
    std::fprintf(stderr, "xlaunch: warning: %s: Accelerate settings xlaunch does not support, ignored: %s\n",
                 in_use.location.path.c_str(), join(in_use.loaded->unsupported).c_str());
  if (in_use.loaded)
    for (const auto& n : in_use.loaded->notes) std::fprintf(stderr, "xlaunch: note: %s\n", n.c_str());
}

void make_dirs(const std::string& dir) {
  if (std::string why; !files::make_dirs(dir, &why)) throw LaunchError(why);
}

struct EffectiveConfig {
  ConfigInUse in_use;
  config::LaunchConfig config;
  std::vector<std::string> from_env;  // keys XLAUNCH_* variables set
  std::vector<std::string> from_cli;  // keys the options set
};

// File (or defaults), then the XLAUNCH_* variables of the environment, then the options (the
// precedence of xlaunch/settings.h), then validate() with this machine's GPUs. An error in a value
// the options set names the command line instead of the file; one a variable set, the variable.
EffectiveConfig effective_config(const RunOptions& o, int gpu_count) {
  EffectiveConfig e;
  e.in_use = find_config(o.config_file, std::nullopt);  // GPUs are checked after the options
  if (e.in_use.loaded) e.config = e.in_use.loaded->config;
  const config::EnvMap user_env = user_environment();
  warn_per_launch_variables(user_env);
  e.from_env = config::apply_environment(e.config, user_env);
  e.from_cli = apply_overrides(e.config, o.overrides, gpu_count);
  const auto in = [](const std::vector<std::string>& v, const std::string& k) {
    return std::find(v.begin(), v.end(), k) != v.end();
  };
  try {
    std::map<std::string, int> lines = e.in_use.loaded ? e.in_use.loaded->lines : std::map<std::string, int>{};
    for (const auto& k : e.from_env) lines.erase(k);
    for (const auto& k : e.from_cli) lines.erase(k);
    config::validate(e.config, gpu_count, e.in_use.loaded ? e.in_use.location.path : "", lines);
  } catch (const config::ConfigError& err) {
    const std::string& key = err.info().key;
    if (!in(e.from_cli, key) && !in(e.from_env, key)) throw;
    config::ConfigErrorInfo info = err.info();
    info.file = in(e.from_cli, key) ? "command line" : config::find_setting(key)->var->name;
    info.line = 0;
    throw config::ConfigError(info);
  }
  return e;
}

// What can be wrong before mpirun starts, besides the config itself.
void check_launchable(const config::LaunchConfig& c) {
  if (c.machine_rank != 0)
    throw LaunchError("machine_rank is " + std::to_string(c.machine_rank) +
                      ": with Open MPI the job is started once, on the machine of rank 0 (main_process_ip), and "
                      "mpirun starts the ranks of the other machines itself; run xlaunch there");
  if (!c.mpi.hostfile.empty() && !file_exists(c.mpi.hostfile))
    throw LaunchError("hostfile " + c.mpi.hostfile + " not found; fix mpi.hostfile or --hostfile");
  if (config::is_elastic(c) && c.max_restarts == 0)
    std::fprintf(stderr, "xlaunch: warning: num_machines %s with max_restarts 0: the job starts on the machines that "
                         "answer, but the loss of one ends it; set max_restarts to continue on the others\n",
                 config::machines_string(c).c_str());
  if (c.timeout_s == 0)
    std::fprintf(stderr, "xlaunch: warning: timeout_s is 0: the collective watchdog is off, so a stuck collective "
                         "waits until mpirun or your scheduler ends the job; set timeout_s (default %s) to bound it\n",
                 env::kTimeoutS.default_value);
}

// --resume: a bare one needs project_dir (it continues from the newest checkpoint there); a
// directory must exist. Refused before anything starts.
void check_resume(const config::LaunchConfig& c, const std::optional<std::string>& resume) {
  if (!resume) return;
  if (*resume == kResumeLatest) {
    if (c.project_dir.empty())
      throw LaunchError("--resume continues from the newest checkpoint in project_dir, and no project_dir is set: set "
                        "project_dir in the config (or --project_dir DIR), or name the checkpoint: --resume DIR");
    return;
  }
  struct stat st {};
  if (stat(resume->c_str(), &st) != 0)
    throw LaunchError("--resume " + *resume + ": " + std::strerror(errno) +
                      "; give a checkpoint directory (one save_state wrote), or a bare --resume for the newest in "
                      "project_dir");
  if (!S_ISDIR(st.st_mode))
    throw LaunchError("--resume " + *resume + ": not a directory; give a checkpoint directory (one save_state wrote)");
}

}  // namespace

int run_job(const RunOptions& o, const Invocation& inv) {
  if (inv.command.empty())
    throw LaunchError("no training binary given: usage: xlaunch run [options] train_bin [args...]");
  const int gpu_count = o.overrides.cpu() ? 0 : static_cast<int>(detect_gpus().gpus.size());
  const EffectiveConfig e = effective_config(o, gpu_count);
  const config::LaunchConfig& c = e.config;
  print_config_line(e.in_use, e.from_env, e.from_cli);
  warn_ignored_accelerate_options(o.overrides);
  check_launchable(c);
  std::fprintf(stderr, "%s", cpu_mixed_precision_warning(c, gpu_count).c_str());
  check_resume(c, o.resume);
  std::vector<std::string> command = inv.command;
  command[0] = resolve_train_binary(command[0], path_env());

  Environment env;
  env.is_root = geteuid() == 0;
  env.cpu_cores = physical_cpu_cores();
  env.self_exe = inv.self_exe;
  env.run_id = make_run_id();
  env.config_file = e.in_use.loaded ? e.in_use.location.path : "";
  env.rsh_agent = rsh_agent(path_env());
  const std::string resume = o.resume.value_or("");
  if (o.dry_run) {
    env.resume = attempt_resume(resume, c.project_dir, 0);
    const auto found = find_program("mpirun", path_env());
    env.mpirun = found ? *found : "mpirun";
    env.status_dir = status_base(c) + "/" + status_prefix(env.run_id, 0) + "XXXXXX";  // made when it runs
    // An elastic job: the plan of a first attempt on which every listed machine answered.
    const config::LaunchConfig first = config::is_elastic(c) ? attempt_config(c, first_machines(c)) : c;
    print_plan(stdout, make_launch_plan(first, env, command[0], {command.begin() + 1, command.end()}));
    return 0;
  }
  const OpenMpi mpi = find_open_mpi(path_env());
  env.mpirun = mpi.mpirun;
  if (!c.log_dir.empty()) make_dirs(c.log_dir);
  if (!c.trace_dir.empty()) {
    make_dirs(c.trace_dir);
    // report.html charts what this job's tracker logs there, never what an earlier job's did.
    const std::string logged = c.trace_dir + "/" + status::kLoggedScalarsFile;
    if (unlink(logged.c_str()) != 0 && errno != ENOENT)
      std::fprintf(stderr, "xlaunch: warning: cannot remove the earlier job's %s (%s): report.html may chart its scalars\n",
                   logged.c_str(), std::strerror(errno));
  }
  if (o.monitor_s < 0) throw LaunchError("--monitor " + std::to_string(o.monitor_s) + ": give seconds > 0");
  if (o.monitor_s > 0 && !c.report)
    throw LaunchError("--monitor needs the step counters, which report: false turns off; set report: true");
  AttemptReport report(o.monitor_s);
  return run_attempts(c, env, AttemptsOptions{mpi.version, o.verbose, resume, command}, report);
}

Runner setup_run(CLI::App* cmd) {
  auto o = std::make_shared<RunOptions>();
  cmd->alias("launch");  // as Accelerate users type it: `accelerate launch`
  add_override_options(cmd, o->overrides);
  add_ignored_accelerate_options(cmd, o->overrides);
  cmd->add_option("--config_file", o->config_file, "Config file (default: $XLAUNCH_CONFIG_FILE, else "
                                                    "${XDG_CONFIG_HOME:-~/.config}/xlaunch/default_config.yaml, "
                                                    "else Accelerate's default_config.yaml)");
  cmd->add_flag("--dry_run", o->dry_run, "Print the exact command and environment, then exit");
  cmd->add_flag("--verbose", o->verbose, "Print the command before running it");
  cmd->add_option("--monitor", o->monitor_s, "Print the job's steps/s, phase split and GPU use every SECONDS");
  // A bare --resume takes no value (main.cpp's split_command gives it the next word only when that
  // is a directory, so `--resume ./train` leaves ./train the training binary).
  cmd->add_option("--resume", o->resume,
                  "Continue from a checkpoint: DIR, or without one the newest in project_dir (XLAUNCH_RESUME)")
      ->expected(0, 1)
      ->default_str(kResumeLatest);
  cmd->footer("Usage: xlaunch run (or launch) [options] train_bin [args...]\n"
              "Everything from train_bin on is passed to it unchanged (or put it after --).");
  return [o](const Invocation& inv) { return run_job(*o, inv); };
}

}  // namespace xlaunch::launcher
