// The Accelerator's experiment tracking (accelerator.h: init_trackers, log, end_training) and its
// hooks into the training step: utilization at the step boundary, histograms after an optimizer
// step, the resumption after load_state. docs/tracking.md.
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <system_error>

#include "comm/agree.h"
#include "profile/step_clock.h"
#include "state/log_main.h"
#include "track/backends.h"
#include "track/histograms.h"
#include "track/tracking_state.h"
#include "track/utilization.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"
#include "xlaunch/status/status_dir.h"

namespace xlaunch {
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
  std::unique_ptr<track::Backend> (*make)(const std::string& run_dir);
};
const TrackerKind kTrackers[] = {
    {"tensorboard", track::make_tensorboard_backend},
    {"jsonl", [](const std::string& run_dir) { return track::make_jsonl_backend(run_dir + "/metrics.jsonl"); }},
    {"csv", track::make_csv_backend},
};

const TrackerKind* find_tracker(const std::string& name) {
  for (const TrackerKind& k : kTrackers)
    if (name == k.name) return &k;
  return nullptr;
}

// The backends log_with names, for the run directory, and the timeline's copy of the scalars
// (report.html plots them) when `xlaunch run --trace DIR` is on. Throws track::WriteError.
std::vector<std::unique_ptr<track::Backend>> make_backends(const std::vector<std::string>& names, const std::string& run_dir) {
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw track::WriteError("cannot create " + run_dir + ": " + ec.message(), ec.value());
  if (access(run_dir.c_str(), W_OK | X_OK) != 0)
    throw track::WriteError("cannot write in " + run_dir + ": " + std::strerror(errno), errno);
  std::vector<std::unique_ptr<track::Backend>> out;
  for (const std::string& n : names) out.push_back(find_tracker(n)->make(run_dir));
  // The timeline's copy is a convenience: a trace_dir it cannot write costs the report its chart only.
  const std::string trace_dir = env::get_string(env::kTraceDir);
  if (!trace_dir.empty()) {
    const std::string path = trace_dir + "/" + status::kLoggedScalarsFile;
    try {
      out.push_back(track::make_jsonl_backend(path));
    } catch (const track::WriteError& e) {
      std::cerr << "[xlaunch] warning: tracking: report.html will chart no logged scalars: " << e.what() << std::endl;
    }
  }
  return out;
}

}  // namespace

std::vector<std::string> AcceleratorOptions::split_log_with(const std::string& list) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i <= list.size()) {
    const size_t j = std::min(list.find(',', i), list.size());
    std::string part = list.substr(i, j - i);
    part.erase(0, part.find_first_not_of(" "));
    part.erase(part.find_last_not_of(" ") + 1);
    if (part == "all")
      for (const TrackerKind& k : kTrackers) out.push_back(k.name);
    else if (!part.empty() && part != "none") out.push_back(part);
    i = j + 1;
  }
  return out;
}

void Accelerator::init_trackers(const std::string& project_name, const HParams& config) {
  if (tracking_) throw UsageError("init_trackers was called twice; call it once, before training");
  check_project_name(project_name);
  std::vector<std::string> names;
  for (const std::string& n : options_.log_with) {
    if (!find_tracker(n))
      throw UsageError("log_with: '" + n + "' is not a tracker xlaunch has; use tensorboard, jsonl, csv or all");
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  }
  // Whether tracking is on, and when the utilization and histograms come, decide collectives: every
  // rank must hold rank 0's settings (each machine's `xlaunch run` may read a config of its own).
  std::string settings = "log_with";
  for (const auto& n : names) settings += " " + n;
  settings += "; report_interval " + std::to_string(options_.report_interval) + "; report " +
              (profile::enabled() ? "on" : "off") + "; log_histograms_every_n_steps " +
              std::to_string(options_.log_histograms_every_n_steps) + "; project " + project_name;
  const Agreement same = agree_on_rank0(*cpu_comm_, settings);
  if (same.failed())
    throw UsageError("init_trackers: the ranks do not share the tracking settings, so their collectives would not match: " +
                     same.message + ". Give every machine the same config (log_with, report_interval, report)");
  if (names.empty()) {
    log_main(rank_, "init_trackers: log_with is not set, so acc.log writes nothing (set log_with: tensorboard, "
                    "jsonl, csv or all in the config, or --log_with)");
    return;
  }
  if (options_.project_dir.empty())
    throw UsageError("init_trackers: log_with " + names.front() + " writes to <project_dir>/" + project_name +
                     ", and no project_dir is set: set project_dir in the config (or --project_dir DIR)");
  if (options_.report_interval < 1)
    throw UsageError("report_interval must be at least 1 (got " + std::to_string(options_.report_interval) + ")");
  auto state = std::make_unique<TrackingState>();
  state->run_dir = (fs::path(options_.project_dir) / project_name).string();
  std::string error;
  if (rank_ == 0) {
    try {
      track::RunStart start;
      start.project_name = project_name;
      start.config = config;
      start.wall_time = static_cast<double>(profile::realtime_ns()) / 1e9;
      start.first_step = loaded_from_.empty() ? step_ : step_ + 1;
      start.resumed_from = loaded_from_;
      state->tracker = std::make_unique<track::Tracker>(make_backends(names, state->run_dir), std::move(start));
    } catch (const track::WriteError& e) {
      error = std::string("init_trackers: ") + e.what() + "; set project_dir to a directory this job can write";
    } catch (const std::exception& e) {
      error = std::string("init_trackers: ") + e.what();
    }
  }
  const Agreement outcome = agree_on_error(*cpu_comm_, error);
  if (outcome.failed()) throw UsageError(outcome.message);
  state->reported = profile::stats().total;
  state->reported_step = step_;
  if (device_.is_cuda()) state->gpu = std::make_unique<track::GpuUse>(profile::stats().bus_id());
  tracking_ = std::move(state);
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  log_main(rank_, "tracking: " + list + " in " + tracking_->run_dir + (options_.report_interval > 0 ? ", utilization every " +
                  std::to_string(options_.report_interval) + " steps" : ""));
}

bool Accelerator::trackers_active() const { return tracking_ != nullptr; }

void Accelerator::log(const LogValues& values, int64_t step, LogReduce reduce) {
  if (step < 0) step = step_;
  if (!tracking_) return;  // init_trackers said why, or was not called (Accelerate's log does nothing either)
  LogValues out = values;
  if (reduce != LogReduce::None && world_ > 1) {
    if (uneven_)
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
    const at::Tensor all = cpu_comm_->allgather(mine).contiguous();
    const double* a = all.data_ptr<double>();
    for (int r = 0; r < world_; ++r)
      if (a[r * (2 + kMaxReduced)] > kMaxReduced)
        throw UsageError("acc.log with reduce " + std::string(reduce_name(reduce)) + ": rank " + std::to_string(r) +
                         " passed " + std::to_string(static_cast<int64_t>(a[r * (2 + kMaxReduced)])) +
                         " values, more than the " + std::to_string(kMaxReduced) + " one reduced call carries; "
                         "split them over several calls");
    for (int r = 0; r < world_; ++r) {
      const double* ar = a + r * (2 + kMaxReduced);
      if (ar[0] != m[0] || ar[1] != m[1])
        throw UsageError("acc.log with reduce " + std::string(reduce_name(reduce)) + " at step " + std::to_string(step) +
                         ": rank " + std::to_string(r) + " logged other names than rank " + std::to_string(rank_) +
                         " (" + std::to_string(static_cast<int64_t>(ar[0])) + " against " + std::to_string(n) +
                         " values); a reduced call must have the same names on every rank");
    }
    i = 2;
    for (auto& [name, v] : out) {
      double acc = reduce == LogReduce::Max ? -INFINITY : 0;
      for (int r = 0; r < world_; ++r) {
        const double x = a[r * (2 + kMaxReduced) + i];
        acc = reduce == LogReduce::Max ? (std::isnan(x) || std::isnan(acc) ? NAN : std::max(acc, x)) : acc + x;
      }
      v = reduce == LogReduce::Mean ? acc / world_ : acc;
      ++i;
    }
  }
  if (!tracking_->tracker) return;
  std::vector<track::Scalar> scalars;
  scalars.reserve(out.size());
  for (const auto& [name, v] : out) scalars.push_back({name, v});
  tracking_->tracker->log(step, scalars);
}

void Accelerator::end_training() {
  if (tracking_ && tracking_->tracker) tracking_->tracker->end();
}

void Accelerator::track_step_boundary() {
  if (!tracking_ || !profile::enabled()) return;
  if (step_ % options_.report_interval != 0 || step_ == tracking_->reported_step) return;
  const profile::Totals now = profile::stats().total;
  std::optional<double> sm;
  if (tracking_->gpu) {
    sm = tracking_->gpu->sm_pct();
    if (const std::string why = tracking_->gpu->why_nothing(); !why.empty())
      std::cerr << "[xlaunch] rank " << rank_ << ": no xlaunch/gpu_sm: " << why << std::endl;
  }
  const track::RankInterval mine = track::interval_between(tracking_->reported, now, device_.is_cuda(), sm);
  tracking_->reported = now;
  tracking_->reported_step = step_;
  std::vector<track::RankInterval> ranks(1, mine);
  if (world_ > 1) {
    at::Tensor t = at::empty({track::kFields}, at::kDouble);
    std::memcpy(t.data_ptr<double>(), mine.data(), sizeof(double) * track::kFields);
    const at::Tensor all = cpu_comm_->allgather(t).contiguous();
    ranks.assign(static_cast<size_t>(world_), {});
    std::memcpy(ranks.data(), all.data_ptr<double>(), sizeof(double) * track::kFields * world_);
  }
  if (tracking_->tracker) {
    const std::vector<track::Scalar> scalars = track::utilization_scalars(ranks);
    if (!scalars.empty()) tracking_->tracker->log(step_, scalars);  // never refused: xlaunch's own names
  }
}

void Accelerator::track_optimizer_step() {
  const int64_t every = options_.log_histograms_every_n_steps;
  if (!tracking_ || !tracking_->tracker || every <= 0 || step_ % every != 0) return;
  for (size_t id = 0; id < models_.size(); ++id) {
    const std::string prefix = models_.size() == 1 ? "" : "model" + std::to_string(id) + "/";
    for (const auto& p : models_[id].module->named_parameters()) {
      tracking_->tracker->histogram(step_, track::histogram_of(prefix + "weights/" + p.key(), p.value()));
      if (p.value().grad().defined())
        tracking_->tracker->histogram(step_, track::histogram_of(prefix + "grads/" + p.key(), p.value().grad()));
    }
  }
}

void Accelerator::drain_trackers() {
  // A disk too slow to write the logs within the bound once is not waited for at every save.
  if (tracking_ && tracking_->tracker && !tracking_->drain_gave_up)
    tracking_->drain_gave_up = !tracking_->tracker->drain(kDrainTimeoutS);
}

void Accelerator::track_loaded(const std::string& checkpoint) {
  loaded_from_ = checkpoint;
  if (!tracking_) return;
  tracking_->reported = profile::stats().total;
  tracking_->reported_step = step_;
  if (tracking_->tracker) tracking_->tracker->resume(step_ + 1, checkpoint);
}

}  // namespace xlaunch
