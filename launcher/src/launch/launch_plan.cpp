#include "launch/launch_plan.h"

#include <sstream>
#include <stdexcept>

#include "xlaunch/env_vars.h"

namespace xlaunch::launcher {

using config::LaunchConfig;

namespace {

std::string flag(bool b) { return b ? "1" : "0"; }

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

// The value of one contract variable. A variable added to env_vars.h without a case here is a
// broken invariant, caught by the launch plan tests.
std::string value_of(const env::Var& v, const LaunchConfig& c, const Environment& e) {
  const std::string name = v.name;
  if (name == env::kUseCpu.name) return flag(config::runs_on_cpu(c));
  if (name == env::kGpuIds.name) return config::gpu_ids_string(c.gpu_ids);
  if (name == env::kMixedPrecision.name) return config::to_string(c.mixed_precision);
  if (name == env::kGradAccumSteps.name) return std::to_string(c.gradient_accumulation_steps);
  if (name == env::kBucketCapMb.name) return number(c.ddp.bucket_cap_mb);
  if (name == env::kFindUnusedParameters.name) return flag(c.ddp.find_unused_parameters);
  if (name == env::kCommHook.name) return c.ddp.comm_hook;
  if (name == env::kPowerSgdRank.name) return std::to_string(c.ddp.powersgd_rank);
  if (name == env::kPowerSgdStartStep.name) return std::to_string(c.ddp.powersgd_start_step);
  if (name == env::kZeroStage.name) return std::to_string(c.ddp.zero_stage);
  if (name == env::kBroadcastBuffers.name) return flag(c.ddp.broadcast_buffers);
  if (name == env::kSyncBatchnorm.name) return flag(c.sync_batchnorm);
  if (name == env::kNumWorkers.name)
    return c.loader.num_workers == config::LoaderSection::kAutoWorkers ? "auto" : std::to_string(c.loader.num_workers);
  if (name == env::kPinMemory.name) return flag(c.loader.pin_memory);
  if (name == env::kEvenBatches.name) return flag(c.loader.even_batches);
  if (name == env::kPrefetchFactor.name) return std::to_string(c.loader.prefetch_factor);
  if (name == env::kNumCpuThreads.name) return std::to_string(c.num_cpu_threads_per_process);
  if (name == env::kDebug.name) return flag(c.debug);
  if (name == env::kTimeoutS.name) return std::to_string(c.timeout_s);
  if (name == env::kReport.name) return flag(c.report);
  if (name == env::kTraceDir.name) return c.trace_dir;
  if (name == env::kTraceSteps.name) return std::to_string(c.trace_steps);
  if (name == env::kProfileOps.name) return std::to_string(c.profile_ops);
  if (name == env::kRecordShapes.name) return flag(c.record_shapes);
  if (name == env::kCudnnBenchmark.name) return flag(c.cudnn_benchmark);
  if (name == env::kDeterministic.name) return flag(c.deterministic);
  if (name == env::kLogWith.name) {
    std::string s;
    for (const auto& t : c.log_with) s += (s.empty() ? "" : ",") + t;
    return s;
  }
  if (name == env::kReportInterval.name) return std::to_string(c.report_interval);
  if (name == env::kLogHistogramsEvery.name) return std::to_string(c.log_histograms_every_n_steps);
  if (name == env::kProjectDir.name) return c.project_dir;
  if (name == env::kCheckpointTotalLimit.name) return std::to_string(c.checkpoint.total_limit);
  if (name == env::kCheckpointEveryNSteps.name) return std::to_string(c.checkpoint.every_n_steps);
  if (name == env::kCheckpointEveryEpoch.name) return flag(c.checkpoint.every_epoch);
  if (name == env::kResume.name) return e.resume;
  if (name == env::kLogDir.name) return c.log_dir;
  if (name == env::kRunId.name) return e.run_id;
  if (name == env::kRestartCount.name) return std::to_string(e.restart_count);
  if (name == env::kStatusDir.name) return e.status_dir;
  if (name == env::kConfigFile.name) return e.config_file;
  throw std::logic_error("launch plan: no value for " + name + " (declared in env_vars.h, unknown to the launcher)");
}

bool needs_quotes(const std::string& w) {
  if (w.empty()) return true;
  for (char ch : w)
    if (!(isalnum(static_cast<unsigned char>(ch)) || std::string("-_./=:,+@%").find(ch) != std::string::npos))
      return true;
  return false;
}

}  // namespace

std::string attempt_resume(const std::string& resume_option, const std::string& project_dir, int attempt) {
  if (attempt == 0) return resume_option;
  if (!project_dir.empty()) return kResumeLatest;
  return resume_option;
}

EnvList exported_env(const LaunchConfig& c, const Environment& e) {
  EnvList out;
  for (const env::Var* v : env::kAll) out.emplace_back(v->name, value_of(*v, c, e));
  return out;
}

LaunchPlan make_launch_plan(const LaunchConfig& c, const Environment& e, const std::string& train_bin,
                            const std::vector<std::string>& train_args) {
  LaunchPlan p;
  p.env = exported_env(c, e);
  auto& a = p.argv;
  a.push_back(e.mpirun);
  if (e.is_root) a.push_back("--allow-run-as-root");
  a.insert(a.end(), {"-np", std::to_string(c.num_processes)});
  const int per_machine = config::processes_per_machine(c);
  if (config::runs_on_cpu(c) && per_machine > e.cpu_cores) a.push_back("--oversubscribe");
  if (!c.mpi.hostfile.empty()) {
    a.insert(a.end(), {"--hostfile", c.mpi.hostfile});
  } else if (!c.mpi.hosts.empty()) {
    std::string hosts;
    for (const auto& h : c.mpi.hosts) hosts += (hosts.empty() ? "" : ",") + h + ":" + std::to_string(per_machine);
    a.insert(a.end(), {"-H", hosts});
  }
  // One machine: fill slots in order. Several: the same number of ranks on each.
  std::string map_by = c.mpi.map_by;
  if (map_by.empty()) map_by = c.num_machines > 1 ? "ppr:" + std::to_string(per_machine) + ":node" : "slot";
  a.insert(a.end(), {"--map-by", map_by, "--bind-to", c.mpi.bind_to});
  if (c.num_machines > 1)
    a.insert(a.end(), {"--mca", "oob_tcp_keepalive_time", std::to_string(kOobKeepaliveTimeS), "--mca",
                       "oob_tcp_keepalive_intvl", std::to_string(kOobKeepaliveIntvlS), "--mca", "oob_tcp_keepalive_probes",
                       std::to_string(kOobKeepaliveProbes)});
  a.insert(a.end(), c.mpi.extra_args.begin(), c.mpi.extra_args.end());
  for (const auto& [name, value] : p.env) a.insert(a.end(), {"-x", name});
  a.insert(a.end(), {e.self_exe, "__rank", "--status_dir", e.status_dir, "--", train_bin});
  a.insert(a.end(), train_args.begin(), train_args.end());
  return p;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& w : argv) {
    if (!s.empty()) s += ' ';
    if (!needs_quotes(w)) {
      s += w;
      continue;
    }
    s += '\'';
    for (char ch : w) s += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    s += '\'';
  }
  return s;
}

}  // namespace xlaunch::launcher
