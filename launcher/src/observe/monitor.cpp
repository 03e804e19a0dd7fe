#include "observe/monitor.h"

#include <chrono>
#include <cstdio>

#include "xlaunch/status/step_stats.h"

namespace xlaunch::launcher {

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

std::string JobMonitor::line(double t_s, double dt_s) {
  profile::Totals sum;
  uint64_t steps0 = 0, steps0_before = 0, samples = 0;
  int seen = 0;
  for (int r = 0; r < world_; ++r) {
    const auto s = status::read_stats_file(dir_, r);
    if (!s) continue;
    ++seen;
    for (int p = 0; p < profile::kPhases; ++p) {
      sum.phase_ns[p] += s->total.phase_ns[p] - last_[r].phase_ns[p];
      sum.wall_ns += s->total.phase_ns[p] - last_[r].phase_ns[p];
    }
    samples += s->total.samples - last_[r].samples;
    if (r == 0) {
      steps0 = s->total.steps;
      steps0_before = last_[r].steps;
    }
    last_[r] = s->total;
  }
  char buf[256];
  std::snprintf(buf, sizeof buf, "xlaunch: monitor %.0fs: %.2f steps/s, %.1f samples/s", t_s,
                static_cast<double>(steps0 - steps0_before) / dt_s, static_cast<double>(samples) / dt_s);
  std::string out = buf;
  if (seen == 0) return out + " (no rank has reached its first step)";
  if (sum.wall_ns > 0) {
    out += " |";
    for (int p = 0; p < profile::kPhases; ++p) {
      std::snprintf(buf, sizeof buf, " %s %.0f%%", profile::kPhaseNames[p],
                    100.0 * static_cast<double>(sum.phase_ns[p]) / static_cast<double>(sum.wall_ns));
      out += buf;
    }
  }
  if (gpus_) {
    const auto latest = gpus_->latest();
    for (size_t g = 0; g < latest.size(); ++g) {
      std::snprintf(buf, sizeof buf, " | gpu%zu sm %.0f%% mem %.1f/%.1f GiB %.0f W", g, latest[g].sm_pct,
                    latest[g].mem_used_gib, latest[g].mem_total_gib, latest[g].power_w);
      out += buf;
    }
  }
  return out;
}

void JobMonitor::loop() {
  const auto t0 = std::chrono::steady_clock::now();
  double last_print = 0, last_rate_t = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(mu_);
      if (cv_.wait_for(lk, std::chrono::seconds(1), [&] { return stopping_; })) return;
    }
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (const auto s = status::read_stats_file(dir_, 0)) {
      std::lock_guard<std::mutex> lk(mu_);
      rates_.push_back({t, static_cast<double>(s->total.steps - last_rate_.steps) / (t - last_rate_t)});
      last_rate_ = s->total;
      last_rate_t = t;
    }
    if (print_every_s_ > 0 && t - last_print >= print_every_s_ - 0.01) {
      std::fprintf(stderr, "%s\n", line(t, t - last_print).c_str());
      std::fflush(stderr);
      last_print = t;
    }
  }
}

}  // namespace xlaunch::launcher
