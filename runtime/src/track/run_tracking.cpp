// Experiment tracking during training (track/run_tracking.h): the trackers log_with names, the
// values acc.log reduces over the ranks, the utilization and histograms, and resuming after a
// load. docs/tracking.md.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <system_error>

#include "comm/agree.h"
#include "profile/step_clock.h"
#include "state/log_main.h"
#include "track/backends.h"
#include "track/histograms.h"
#include "track/run_tracking.h"
#include "track/utilization.h"
#include "xlaunch/accelerator_options.h"
#include "xlaunch/error.h"
#include "xlaunch/status/status_dir.h"

namespace xlaunch::track {
namespace fs = std::filesystem;

namespace {

constexpr int64_t kMaxReduced = 256;  // numbers one reduced acc.log carries per rank
constexpr double kDrainTimeoutS = 10;  // how long a save waits for the logs to reach the disk

// The names of a reduced call, as one exact double: FNV-1a over them, cut to 52 bits.
double names_fingerprint(const LogValues& values) {
  uint64_t h = 1469598103934665603ull;
  for (const auto& [name, v] : values) {
    for (unsigned char ch : name) h = (h ^ ch) * 1099511628211ull;
    h = (h ^ 0xffu) * 1099511628211ull;  // a separator no name holds
  }
  return static_cast<double>(h & ((uint64_t{1} << 52) - 1));
}

const char* reduce_name(LogReduce r) {
  switch (r) {
    case LogReduce::Mean: return "mean";
    case LogReduce::Sum: return "sum";
    case LogReduce::Max: return "max";
    case LogReduce::None: break;
  }
  return "none";
}

void check_project_name(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos || name.find('\0') != std::string::npos)
    throw UsageError("init_trackers: the project name '" + name + "' is not a directory name (it becomes "
                     "<project_dir>/<project_name>); use letters, digits, '-', '_' or '.', without '/'");
}

// The trackers log_with may name, in the order "all" stands for, each with its backend's maker for
// a run directory (config/launch_config.h's kLogWith spells the same names for the config file).
struct TrackerKind {
  const char* name;
  std::unique_ptr<Backend> (*make)(const std::string& run_dir);
};
const TrackerKind kTrackers[] = {
    {"tensorboard", make_tensorboard_backend},
    {"jsonl", [](const std::string& run_dir) { return make_jsonl_backend(run_dir + "/metrics.jsonl"); }},
    {"csv", make_csv_backend},
};

const TrackerKind* find_tracker(const std::string& name) {
  for (const TrackerKind& k : kTrackers)
    if (name == k.name) return &k;
  return nullptr;
}

// The backends log_with names, for the run directory, and the timeline's copy of the scalars
// (report.html plots them) when `xlaunch run --trace DIR` is on. Throws track::WriteError.
std::vector<std::unique_ptr<Backend>> make_backends(const std::vector<std::string>& names, const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw WriteError("cannot create " + run_dir + ": " + ec.message(), ec.value());
  if (access(run_dir.c_str(), W_OK | X_OK) != 0)
    throw WriteError("cannot write in " + run_dir + ": " + std::strerror(errno), errno);
  std::vector<std::unique_ptr<Backend>> out;
  for (const std::string& n : names) out.push_back(find_tracker(n)->make(run_dir));
  // The timeline's copy is a convenience: a trace_dir it cannot write costs the report its chart only.
  const std::string trace_dir = env::get_string(env::kTraceDir);
  if (!trace_dir.empty()) {
    const std::string path = trace_dir + "/" + status::kLoggedScalarsFile;
    try {
      out.push_back(make_jsonl_backend(path));
    } catch (const WriteError& e) {
      std::cerr << "[xlaunch] warning: tracking: report.html will chart no logged scalars: " << e.what() << std::endl;
    }
  }
  return out;
}

}  // namespace

std::unique_ptr<TrackingState> start_tracking(Communicator& comm, const TrackingSetup& setup,
                                              const std::string& project_name, const HParams& config) {
  check_project_name(project_name);
  const int rank = comm.rank();
  std::vector<std::string> names;
  for (const std::string& n : setup.log_with) {
    if (!find_tracker(n))
      throw UsageError("log_with: '" + n + "' is not a tracker xlaunch has; use tensorboard, jsonl, csv or all");
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  // Whether tracking is on, and when the utilization and histograms come, decide collectives: every
  // rank must hold rank 0's settings (each machine's `xlaunch run` may read a config of its own).
  std::string settings = "log_with";
  for (const auto& n : names) settings += " " + n;
  settings += "; report_interval " + std::to_string(setup.report_interval) + "; report " +
              (profile::enabled() ? "on" : "off") + "; log_histograms_every_n_steps " +
              std::to_string(setup.log_histograms_every_n_steps) + "; project " + project_name;
  const Agreement same = agree_on_rank0(comm, settings);
  if (same.failed())
    throw UsageError("init_trackers: the ranks do not share the tracking settings, so their collectives would not match: " +
                     same.message + ". Give every machine the same config (log_with, report_interval, report)");
  if (names.empty()) {
    log_main(rank, "init_trackers: log_with is not set, so acc.log writes nothing (set log_with: tensorboard, "
                   "jsonl, csv or all in the config, or --log_with)");
    return nullptr;
  }
  if (setup.project_dir.empty())
    throw UsageError("init_trackers: log_with " + names.front() + " writes to <project_dir>/" + project_name +
                     ", and no project_dir is set: set project_dir in the config (or --project_dir DIR)");
  if (setup.report_interval < 1)
    throw UsageError("report_interval must be at least 1 (got " + std::to_string(setup.report_interval) + ")");
  auto state = std::make_unique<TrackingState>();
  state->run_dir = (fs::path(setup.project_dir) / project_name).string();
  std::string error;
  if (rank == 0) {
    try {
      RunStart start;
      start.project_name = project_name;
      start.config = config;
      start.wall_time = static_cast<double>(profile::realtime_ns()) / 1e9;
      start.first_step = setup.loaded_from.empty() ? setup.step : setup.step + 1;
      start.resumed_from = setup.loaded_from;
      state->tracker = std::make_unique<Tracker>(make_backends(names, state->run_dir), std::move(start));
    } catch (const WriteError& e) {
      error = std::string("init_trackers: ") + e.what() + "; set project_dir to a directory this job can write";
    } catch (const std::exception& e) {
      error = std::string("init_trackers: ") + e.what();
    }
  }
  const Agreement outcome = agree_on_error(comm, error);
  if (outcome.failed()) throw UsageError(outcome.message);
  state->reported = profile::stats().total;
  state->reported_step = setup.step;
  if (setup.cuda) state->gpu = std::make_unique<track::GpuUse>(profile::stats().bus_id());
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  log_main(rank, "tracking: " + list + " in " + state->run_dir + (setup.report_interval > 0 ? ", utilization every " +
                 std::to_string(setup.report_interval) + " steps" : ""));
  return state;
}

LogValues reduce_logged(Communicator& comm, const LogValues& values, int64_t step, LogReduce reduce, bool uneven) {
  const int rank = comm.rank(), world = comm.size();
  LogValues out = values;
  if (uneven)
    throw UsageError("acc.log with reduce " + std::string(reduce_name(reduce)) + " and uneven inputs (even_batches "
                     "false, already_sharded or acc.expect_uneven_inputs): a rank whose data has ended takes part "
                     "in the others' steps without running your loop, so it cannot join the call's collective. "
                     "Log without reduce (the main process's values), or keep even_batches true");
  const int64_t n = static_cast<int64_t>(values.size());
  at::Tensor mine = at::zeros({2 + kMaxReduced}, at::kDouble);
  double* m = mine.data_ptr<double>();
  m[0] = static_cast<double>(n);
  m[1] = names_fingerprint(values);
  int64_t i = 2;
  for (const auto& [name, v] : values) {
    if (i == 2 + kMaxReduced) break;  // refused below, on every rank
    m[i++] = v;
  }
  const at::Tensor all = comm.allgather(mine).contiguous();
  const double* a = all.data_ptr<double>();
  for (int r = 0; r < world; ++r)
    if (a[r * (2 + kMaxReduced)] > kMaxReduced)
      throw UsageError("acc.log with reduce " + std::string(reduce_name(reduce)) + ": rank " + std::to_string(r) +
                       " passed " + std::to_string(static_cast<int64_t>(a[r * (2 + kMaxReduced)])) +
                       " values, more than the " + std::to_string(kMaxReduced) + " one reduced call carries; "
                       "split them over several calls");
  for (int r = 0; r < world; ++r) {
    const double* ar = a + r * (2 + kMaxReduced);
    if (ar[0] != m[0] || ar[1] != m[1])
      throw UsageError("acc.log with reduce " + std::string(reduce_name(reduce)) + " at step " + std::to_string(step) +
                       ": rank " + std::to_string(r) + " logged other names than rank " + std::to_string(rank) +
                       " (" + std::to_string(static_cast<int64_t>(ar[0])) + " against " + std::to_string(n) +
                       " values); a reduced call must have the same names on every rank");
  }
  i = 2;
  for (auto& [name, v] : out) {
    double acc = reduce == LogReduce::Max ? -INFINITY : 0;
    for (int r = 0; r < world; ++r) {
      const double x = a[r * (2 + kMaxReduced) + i];
      acc = reduce == LogReduce::Max ? (std::isnan(x) || std::isnan(acc) ? NAN : std::max(acc, x)) : acc + x;
    }
    v = reduce == LogReduce::Mean ? acc / world : acc;
    ++i;
  }
  return out;
}

void report_utilization(TrackingState& t, Communicator& comm, int64_t step, int64_t report_interval, bool cuda) {
  if (!profile::enabled()) return;
  if (step % report_interval != 0 || step == t.reported_step) return;
  const int world = comm.size();
  const profile::Totals now = profile::stats().total;
  std::optional<double> sm;
  if (t.gpu) {
    sm = t.gpu->sm_pct();
    if (const std::string why = t.gpu->why_nothing(); !why.empty())
      std::cerr << "[xlaunch] rank " << comm.rank() << ": no xlaunch/gpu_sm: " << why << std::endl;
  }
  const RankInterval mine = interval_between(t.reported, now, cuda, sm);
  t.reported = now;
  t.reported_step = step;
  std::vector<RankInterval> ranks(1, mine);
  if (world > 1) {
    at::Tensor row = at::empty({kFields}, at::kDouble);
    std::memcpy(row.data_ptr<double>(), mine.data(), sizeof(double) * kFields);
    const at::Tensor all = comm.allgather(row).contiguous();
    ranks.assign(static_cast<size_t>(world), {});
    std::memcpy(ranks.data(), all.data_ptr<double>(), sizeof(double) * kFields * world);
  }
  if (t.tracker) {
    const std::vector<Scalar> scalars = utilization_scalars(ranks);
    if (!scalars.empty()) t.tracker->log(step, scalars);  // never refused: xlaunch's own names
  }
}

void log_histograms(TrackingState& t, int64_t step, int64_t every, const std::vector<const torch::nn::Module*>& models) {
  if (!t.tracker || every <= 0 || step % every != 0) return;
  for (size_t id = 0; id < models.size(); ++id) {
    const std::string prefix = models.size() == 1 ? "" : "model" + std::to_string(id) + "/";
    for (const auto& p : models[id]->named_parameters()) {
      t.tracker->histogram(step, histogram_of(prefix + "weights/" + p.key(), p.value()));
      if (p.value().grad().defined())
        t.tracker->histogram(step, histogram_of(prefix + "grads/" + p.key(), p.value().grad()));
    }
  }
}

void drain(TrackingState& t) {
  // A disk too slow to write the logs within the bound once is not waited for at every save.
  if (t.tracker && !t.drain_gave_up) t.drain_gave_up = !t.tracker->drain(kDrainTimeoutS);
}

void resumed(TrackingState& t, int64_t step, const std::string& checkpoint) {
  t.reported = profile::stats().total;
  t.reported_step = step;
  if (t.tracker) t.tracker->resume(step + 1, checkpoint);
}

}  // namespace xlaunch::track

namespace xlaunch {

std::vector<std::string> AcceleratorOptions::split_log_with(const std::string& list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= list.size()) {
    const size_t j = std::min(list.find(',', i), list.size());
    std::string part = list.substr(i, j - i);
    part.erase(0, part.find_first_not_of(" "));
    part.erase(part.find_last_not_of(" ") + 1);
    if (part == "all")
      for (const track::TrackerKind& k : track::kTrackers) out.push_back(k.name);
    else if (!part.empty() && part != "none") out.push_back(part);
    i = j + 1;
  }
  return out;
}

}  // namespace xlaunch
