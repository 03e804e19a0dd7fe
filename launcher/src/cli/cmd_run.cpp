// `xlaunch run [options] train_bin [args...]`: load the config, apply the options, check
// everything that can be checked before starting, then run the launch plan and report how the
// ranks ended. See docs/cli.md.
#include "cli/cmd_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <map>
#include <memory>

#include "cli/config_in_use.h"
#include "cli/elastic.h"
#include "cli/overrides.h"
#include "launch/cpu_features.h"
#include "launch/job.h"
#include "launch/job_outcome.h"
#include "launch/launch_error.h"
#include "launch/launch_plan.h"
#include "launch/machine.h"
#include "launch/programs.h"
#include "observe/monitor.h"
#include "observe/nvml.h"
#include "observe/op_table.h"
#include "observe/report.h"
#include "observe/timeline.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/preemption.h"
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

// One line: which file was used (or none), what the command line set, what fell back to defaults.
void print_config_line(const ConfigInUse& in_use, const std::vector<std::string>& from_cli) {
  std::string line;
  if (in_use.loaded) {
    line = "config " + in_use.location.path + " (from " + config::to_string(in_use.location.origin) + ")";
  } else {
    line = "no config file" +
           (in_use.location.path.empty() ? std::string() : " at " + in_use.location.path) +
           ", using built-in defaults (write one with `xlaunch config`)";
  }
  if (!from_cli.empty()) line += "; from the command line: " + join(from_cli);
  if (in_use.loaded) {
    std::vector<std::string> defaulted;
    for (const auto& k : in_use.loaded->defaulted)
      if (std::find(from_cli.begin(), from_cli.end(), k) == from_cli.end()) defaulted.push_back(k);
    if (!defaulted.empty()) line += "; defaults for: " + defaults_summary(defaulted);
  }
  std::fprintf(stderr, "xlaunch: %s\n", line.c_str());
  if (in_use.loaded && !in_use.loaded->unsupported.empty())
    std::fprintf(stderr, "xlaunch: warning: %s: Accelerate settings xlaunch does not support, ignored: %s\n",
                 in_use.location.path.c_str(), join(in_use.loaded->unsupported).c_str());
  if (in_use.loaded)
    for (const auto& n : in_use.loaded->notes) std::fprintf(stderr, "xlaunch: note: %s\n", n.c_str());
}

std::string make_run_id() {
  char buf[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::gmtime(&t));
  return std::string(buf) + "-" + std::to_string(getpid());
}

void make_dirs(const std::string& dir) {
  if (std::string why; !files::make_dirs(dir, &why)) throw LaunchError(why);
}

// Where each attempt's status directory goes: under log_dir when there is one, so ranks on other
// machines can report through a shared filesystem; else $TMPDIR or /tmp.
std::string status_base(const config::LaunchConfig& c) { return !c.log_dir.empty() ? c.log_dir : status::temp_dir(); }

std::string status_prefix(const std::string& run_id, int attempt) {
  return "xlaunch-status-" + run_id + "-" + std::to_string(attempt) + "-";
}

// A new directory of this user's, mode 0700, with a random part in its name (docs/security.md):
// another user can neither predict it nor plant files in it.
std::string make_status_dir(const config::LaunchConfig& c, const std::string& run_id, int attempt) {
  std::string why;
  const std::string dir = files::make_private_dir(status_base(c), status_prefix(run_id, attempt), &why);
  if (dir.empty())
    throw LaunchError("cannot make the job's status directory: " + why +
                      (c.log_dir.empty() ? "; set TMPDIR to a directory of your own"
                                         : "; choose a log_dir of your own (--log_dir)"));
  return dir;
}

void print_plan(FILE* out, const LaunchPlan& plan) {
  for (const auto& [name, value] : plan.env)
    std::fprintf(out, "export %s\n", shell_join({name + "=" + value}).c_str());
  std::fprintf(out, "%s\n", shell_join(plan.argv).c_str());
}

struct EffectiveConfig {
  ConfigInUse in_use;
  config::LaunchConfig config;
  std::vector<std::string> from_cli;  // keys the options set
};

// File (or defaults), then the options, then validate() with this machine's GPUs. An error in a
// value the options set names the command line instead of the file.
EffectiveConfig effective_config(const RunOptions& o, int gpu_count) {
  EffectiveConfig e;
  e.in_use = find_config(o.config_file, std::nullopt);  // GPUs are checked after the options
  if (e.in_use.loaded) e.config = e.in_use.loaded->config;
  e.from_cli = apply_overrides(e.config, o.overrides, gpu_count);
  try {
    std::map<std::string, int> lines = e.in_use.loaded ? e.in_use.loaded->lines : std::map<std::string, int>{};
    for (const auto& k : e.from_cli) lines.erase(k);
    config::validate(e.config, gpu_count, e.in_use.loaded ? e.in_use.location.path : "", lines);
  } catch (const config::ConfigError& err) {
    if (std::find(e.from_cli.begin(), e.from_cli.end(), err.info().key) == e.from_cli.end()) throw;
    config::ConfigErrorInfo info = err.info();
    info.file = "command line";
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

// preempt_signal as the config spells it ("SIGTERM", "SIGUSR1": validated) to its number.
int signal_number(const std::string& name) { return name == "SIGUSR1" ? SIGUSR1 : SIGTERM; }

void write_report_json(const std::string& dir, const JobReport& r) {
  std::string why;
  const int fd = files::open_private_dir(dir, &why);
  if (fd < 0 || !files::write_private_file(fd, "report.json", report_json(r), &why))
    std::fprintf(stderr, "xlaunch: warning: no report.json in %s: %s\n", dir.c_str(), why.c_str());
  if (fd >= 0) close(fd);
}

// The utilization report (report.h), the operator tables (op_table.h; printed with report: false
// too) and the timeline (timeline.h) of an attempt that ran.
void report_attempt(const config::LaunchConfig& c, const std::string& status_dir, const GpuSampler& gpus,
                    const JobMonitor* monitor) {
  std::vector<std::optional<profile::RankStats>> stats;
  for (int r = 0; r < c.num_processes; ++r) stats.push_back(status::read_stats_file(status_dir, r));
  // The GPUs of this machine belong to the ranks only when they train on GPUs.
  // Over the report's window (rank 0's steps after the warm-up), not the start-up.
  const std::vector<GpuUse> gpu_use = stats.empty() || !stats[0] ? gpus.mean() : gpus.mean_since(window_start_s(*stats[0]));
  JobReport report = make_report(stats, config::runs_on_cpu(c) ? std::vector<GpuUse>{} : gpu_use);
  report.launcher_host = this_host_facts();
  report.advice = advise(report, c);
  if (c.debug) report.syncs = read_syncs(status_dir, c.num_processes, report.first_step - 1);  // counted with debug
  if (c.profile_ops > 0) report.operators = read_op_tables(status_dir, c.num_processes);
  if (c.report && report.total_steps > 0) {
    std::fprintf(stderr, "%s", format_report(report).c_str());
    if (!c.log_dir.empty()) write_report_json(c.log_dir, report);
  }
  std::fprintf(stderr, "%s", format_op_tables(report.operators, c.num_processes, c.profile_ops).c_str());
  if (c.trace_dir.empty()) return;
  std::fprintf(stderr, "xlaunch: %s\n", merge_trace(c.trace_dir, report, gpus.history()).c_str());
  write_report_json(c.trace_dir, report);
  const std::string html = write_report_html(c.trace_dir, report, monitor ? monitor->rates() : std::vector<RatePoint>{});
  if (!html.empty()) std::fprintf(stderr, "xlaunch: report in %s\n", html.c_str());
}

// The first MAX machines listed: an elastic job's first attempt when every machine answers.
std::vector<std::string> first_machines(const config::LaunchConfig& c) {
  std::vector<std::string> hosts = listed_machines(c);
  if (static_cast<int>(hosts.size()) > c.num_machines) hosts.resize(static_cast<size_t>(c.num_machines));
  return hosts;
}

// An elastic job's machines across attempts (elastic.h): which were at fault in failed attempts.
class ElasticMachines {
 public:
  explicit ElasticMachines(const config::LaunchConfig& c)
      : c_(c), listed_(listed_machines(c)), agent_(rsh_agent_argv(c.mpi.extra_args, env_or_empty("OMPI_MCA_plm_rsh_agent"))) {}

  // The machines of the next attempt, after asking each one not kept out whether it answers; prints
  // a line for each machine left out and one for the attempt. Fewer than MIN: prints why, returns {}.
  std::vector<std::string> choose(int attempt) {
    std::vector<std::string> ask;
    for (const auto& h : listed_)
      if (failures_[h] < c_.max_machine_failures) ask.push_back(h);
    const AttemptMachines m =
        choose_machines(listed_, probe_hosts(agent_, ask, kHostProbeTimeoutS), failures_, c_.max_machine_failures,
                        c_.num_machines);
    for (const auto& n : m.notes) std::fprintf(stderr, "xlaunch: %s\n", n.c_str());
    if (static_cast<int>(m.hosts.size()) < c_.min_machines) {
      std::fprintf(stderr,
                   "xlaunch: only %zu machine%s can take part (%s), fewer than the %d that num_machines %s needs; "
                   "ending the job (bring machines back or lower MIN)\n",
                   m.hosts.size(), m.hosts.size() == 1 ? "" : "s", m.hosts.empty() ? "none" : join_hosts(m.hosts).c_str(),
                   c_.min_machines, config::machines_string(c_).c_str());
      return {};
    }
    const int world = static_cast<int>(m.hosts.size()) * config::processes_per_machine(c_);
    std::fprintf(stderr, "xlaunch: attempt %d on %zu of num_machines %s: %s; world size %d\n", attempt + 1,
                 m.hosts.size(), config::machines_string(c_).c_str(), join_hosts(m.hosts).c_str(), world);
    return m.hosts;
  }

  // After a failed attempt on `hosts`: counts a failure against the machine of the rank at fault.
  void blame(const std::vector<std::string>& hosts, int rank) {
    const std::string host = machine_of_rank(hosts, config::processes_per_machine(c_), rank);
    if (host.empty()) return;
    const int n = ++failures_[host];
    std::fprintf(stderr, "xlaunch: machine %s (rank %d) was at fault in %d failed attempt%s (max_machine_failures %d)\n",
                 host.c_str(), rank, n, n == 1 ? "" : "s", c_.max_machine_failures);
  }

 private:
  static std::string env_or_empty(const char* name) {
    const char* v = std::getenv(name);
    return v ? v : "";
  }
  const config::LaunchConfig& c_;
  std::vector<std::string> listed_;
  std::vector<std::string> agent_;
  std::map<std::string, int> failures_;
};

// Runs the job, and again after a failure while max_restarts allows (an elastic job on the machines
// that still answer); returns the exit code.
int run_attempts(const config::LaunchConfig& job, Environment env, const std::string& mpi_version, bool verbose,
                 double monitor_s, const std::string& resume, const std::vector<std::string>& command) {
  const std::vector<std::string> train_args(command.begin() + 1, command.end());
  std::unique_ptr<ElasticMachines> elastic = config::is_elastic(job) ? std::make_unique<ElasticMachines>(job) : nullptr;
  int last_exit = 1;  // an elastic job that cannot even start: 1
  for (int attempt = 0;; ++attempt) {
    std::vector<std::string> hosts;
    if (elastic) {
      hosts = elastic->choose(attempt);
      if (hosts.empty()) {
        std::fprintf(stderr, "xlaunch: exit code %d\n", last_exit);
        return last_exit;
      }
    }
    const config::LaunchConfig c = elastic ? attempt_config(job, hosts) : job;
    env.restart_count = attempt;
    env.resume = attempt_resume(resume, c.project_dir, attempt);
    env.status_dir = make_status_dir(c, env.run_id, attempt);
    const LaunchPlan plan = make_launch_plan(c, env, command[0], train_args);
    if (verbose) {
      std::fprintf(stderr, "xlaunch: Open MPI %s; launching:\n", mpi_version.c_str());
      print_plan(stderr, plan);
    }
    const bool measured = c.report || !c.trace_dir.empty();
    std::unique_ptr<GpuSampler> gpus = measured ? std::make_unique<GpuSampler>() : nullptr;
    std::unique_ptr<JobMonitor> monitor =
        measured ? std::make_unique<JobMonitor>(env.status_dir, c.num_processes, monitor_s, gpus.get()) : nullptr;
    const JobWatch watch{env.status_dir, c.num_processes, rank_hosts(c)};
    JobRun ran;
    try {
      ran = run_plan(plan, watch, Preemption{signal_number(c.preempt_signal), c.preempt_timeout_s});
    } catch (...) {
      files::remove_private_dir(env.status_dir);
      throw;
    }
    if (monitor) monitor->stop();
    if (gpus) gpus->stop();
    try {
      if (measured) {
        report_attempt(c, env.status_dir, *gpus, monitor.get());
      } else if (c.profile_ops > 0) {  // the operator tables alone, without the report's sampling
        std::fprintf(stderr, "%s",
                     format_op_tables(read_op_tables(env.status_dir, c.num_processes), c.num_processes, c.profile_ops)
                         .c_str());
      }
    } catch (const std::exception& e) {  // the job's outcome matters more than its report
      std::fprintf(stderr, "xlaunch: warning: no utilization report: %s\n", e.what());
    }
    const JobOutcome outcome = job_outcome(ran, watch);
    files::remove_private_dir(env.status_dir);
    if (outcome.exit_code == 0) return 0;
    // Preempted: restarted only when the preemption came to the ranks alone (a scheduler signalling
    // them): one that came through `xlaunch run` preempts it too.
    const bool restart_preempted = !ran.preempt_signal && !ran.stop_signal && attempt < c.max_restarts;
    if (outcome.preempted && !restart_preempted) {
      std::fprintf(stderr, "xlaunch: preempted: every rank saved its checkpoint and stopped; continue with "
                           "`xlaunch run --resume ...`\n");
      std::fprintf(stderr, "xlaunch: exit code %d\n", kPreemptedExitCode);
      return kPreemptedExitCode;
    }
    const int sig = ran.stop_signal ? ran.stop_signal : ran.preempt_signal;
    if (sig && !outcome.preempted) {
      // Whatever the ranks died of, the job ended because the user (or a scheduler) stopped it: the
      // shell's convention, 128 + the signal (130 for Ctrl-C), and no restart.
      std::fprintf(stderr, "xlaunch: stopped by signal %d (SIG%s), forwarded to the job; %s\n", sig, sigabbrev_np(sig),
                   outcome.message.c_str());
      std::fprintf(stderr, "xlaunch: exit code %d\n", 128 + sig);
      return 128 + sig;
    }
    std::fprintf(stderr, "xlaunch: %s: %s\n", outcome.preempted ? "the ranks were preempted" : "job failed",
                 outcome.message.c_str());
    last_exit = outcome.exit_code;
    if (attempt >= c.max_restarts) {
      const std::string from = outcome.rank >= 0 ? ", from rank " + std::to_string(outcome.rank) : "";
      std::fprintf(stderr, "xlaunch: exit code %d%s\n", outcome.exit_code, from.c_str());
      return outcome.exit_code;
    }
    if (elastic && !outcome.preempted) elastic->blame(hosts, outcome.rank);
    const std::string next_resume = attempt_resume(resume, c.project_dir, attempt + 1);
    const std::string from = next_resume.empty()                ? ""
                             : next_resume == kResumeLatest ? ", from the newest checkpoint in " + c.project_dir
                                                            : ", from " + next_resume;
    std::fprintf(stderr, "xlaunch: restarting the job (restart %d of %d%s)\n", attempt + 1, c.max_restarts,
                 from.c_str());
  }
}

}  // namespace

int run_job(const RunOptions& o, const Invocation& inv) {
  if (inv.command.empty())
    throw LaunchError("no training binary given: usage: xlaunch run [options] train_bin [args...]");
  const int gpu_count = o.overrides.cpu() ? 0 : static_cast<int>(detect_gpus().gpus.size());
  const EffectiveConfig e = effective_config(o, gpu_count);
  const config::LaunchConfig& c = e.config;
  print_config_line(e.in_use, e.from_cli);
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
  return run_attempts(c, env, mpi.version, o.verbose, o.monitor_s, resume, command);
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
