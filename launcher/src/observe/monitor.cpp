#include "observe/monitor.h"

#include <chrono>
#include <cstdio>

#include "xlaunch/status/step_stats.h"

namespace xlaunch::launcher {

std::string monitor_line(double t_s, double dt_s, const std::vector<profile::Totals>& before,
                         const std::vector<std::optional<profile::Totals>>& now, const std::vector<GpuSample>& gpus) {
  profile::Totals sum;
  uint64_t steps0 = 0, steps0_before = 0, samples = 0, steps_any = 0;
  int seen = 0;
  for (size_t r = 0; r < now.size(); ++r) {
    if (!now[r]) continue;
    ++seen;
    steps_any += now[r]->steps;
    for (int p = 0; p < profile::kPhases; ++p) {
      sum.phase_ns[p] += now[r]->phase_ns[p] - before[r].phase_ns[p];
      sum.wall_ns += now[r]->phase_ns[p] - before[r].phase_ns[p];
    }
    samples += now[r]->samples - before[r].samples;
    if (r == 0) {
      steps0 = now[r]->steps;
      steps0_before = before[r].steps;
    }
  }
  char buf[256];
  std::string out;
  if (steps_any == 0) {  // no rate yet: a zero would read as a stuck job
    std::snprintf(buf, sizeof buf, "xlaunch: monitor %.0fs: the ranks are starting (%d of %zu up, no step yet)", t_s,
                  seen, now.size());
    out = buf;
  } else {
    std::snprintf(buf, sizeof buf, "xlaunch: monitor %.0fs: %.2f steps/s, %.1f samples/s", t_s,
                  static_cast<double>(steps0 - steps0_before) / dt_s, static_cast<double>(samples) / dt_s);
    out = buf;
  }
  if (sum.wall_ns > 0) {
    out += " |";
    for (int p = 0; p < profile::kPhases; ++p) {
      std::snprintf(buf, sizeof buf, " %s %.0f%%", profile::kPhaseNames[p],
                    100.0 * static_cast<double>(sum.phase_ns[p]) / static_cast<double>(sum.wall_ns));
      out += buf;
    }
  }
  for (size_t g = 0; g < gpus.size(); ++g) {
    std::snprintf(buf, sizeof buf, " | gpu%zu sm %.0f%% mem %.1f/%.1f GiB %.0f W", g, gpus[g].sm_pct, gpus[g].mem_used_gib,
                  gpus[g].mem_total_gib, gpus[g].power_w);
    out += buf;
  }
  return out;
}

JobMonitor::JobMonitor(std::string status_dir, int world, double print_every_s, const GpuSampler* gpus)
    : dir_(std::move(status_dir)), world_(world), print_every_s_(print_every_s), gpus_(gpus),
      last_(static_cast<size_t>(world)) {
  thread_ = std::thread([this] { loop(); });
}

JobMonitor::~JobMonitor() { stop(); }

void JobMonitor::stop() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::vector<RatePoint> JobMonitor::rates() const {
  std::lock_guard<std::mutex> lk(mu_);
  return rates_;
}

void JobMonitor::print_line(double t_s, double dt_s, bool only_after_steps) {
  std::vector<std::optional<profile::Totals>> now;
  bool stepped = false;
  for (int r = 0; r < world_; ++r) {
    const auto s = status::read_stats_file(dir_, r);
    now.push_back(s ? std::optional<profile::Totals>(s->total) : std::nullopt);
    stepped = stepped || (s && s->total.steps > last_[r].steps);
  }
  if (only_after_steps && !stepped) return;
  const std::string line = monitor_line(t_s, dt_s, last_, now, gpus_ ? gpus_->latest() : std::vector<GpuSample>{});
  std::fprintf(stderr, "%s\n", line.c_str());
  std::fflush(stderr);
  for (int r = 0; r < world_; ++r)
    if (now[r]) last_[r] = *now[r];
}

void JobMonitor::loop() {
  const auto t0 = std::chrono::steady_clock::now();
  const auto since_start = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); };
  double last_print = 0, last_rate_t = 0;
  for (;;) {
    bool stopping = false;
    {
      std::unique_lock<std::mutex> lk(mu_);
      stopping = cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stopping_; });
    }
    const double t = since_start();
    if (stopping) {
      // The steps since the last line, so that a job shorter than one interval shows its rate too.
      if (print_every_s_ > 0 && t - last_print > 0) print_line(t, t - last_print, true);
      return;
    }
    if (const auto s = status::read_stats_file(dir_, 0)) {
      std::lock_guard<std::mutex> lk(mu_);
      // Before rank 0's first step there is no rate: the curve starts with it.
      if (s->total.steps > 0)
        rates_.push_back({t, static_cast<double>(s->total.steps - last_rate_.steps) / (t - last_rate_t)});
      last_rate_ = s->total;
      last_rate_t = t;
    }
    if (print_every_s_ > 0 && t - last_print >= print_every_s_ - 0.01) {
      print_line(t, t - last_print, false);
      last_print = t;
    }
  }
}

}  // namespace xlaunch::launcher
