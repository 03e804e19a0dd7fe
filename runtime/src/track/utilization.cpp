#include "track/utilization.h"

#include <algorithm>
#include <string>

namespace xlaunch::track {

RankInterval interval_between(const profile::Totals& before, const profile::Totals& now, bool on_gpu,
                              std::optional<double> gpu_sm) {
  RankInterval r{};
  auto delta = [](uint64_t a, uint64_t b) { return b > a ? static_cast<double>(b - a) : 0.0; };
  r[kSteps] = delta(before.steps, now.steps);
  r[kSamples] = delta(before.samples, now.samples);
  r[kWallNs] = delta(before.wall_ns, now.wall_ns);
  for (int p = 0; p < profile::kPhases; ++p) r[kPhaseNs + p] = delta(before.phase_ns[p], now.phase_ns[p]);
  r[kCpuNs] = delta(before.cpu_ns, now.cpu_ns);
  double gpu = 0;
  for (int p = 0; p < profile::kPhases; ++p) gpu += delta(before.gpu_ns[p], now.gpu_ns[p]);
  r[kGpuNs] = gpu;
  r[kHasGpu] = on_gpu ? 1 : 0;
  r[kGpuSm] = gpu_sm ? *gpu_sm : -1;
  return r;
}

const std::vector<std::string>& utilization_tags() {
  static const std::vector<std::string> tags = [] {
    std::vector<std::string> t = {"xlaunch/steps_per_s", "xlaunch/samples_per_s"};
    for (const char* p : profile::kPhaseNames) t.push_back(std::string("xlaunch/") + p);
    t.insert(t.end(), {"xlaunch/data_wait_max", "xlaunch/comm_wait_max", "xlaunch/cpu_cores", "xlaunch/gpu_busy",
                       "xlaunch/gpu_sm"});
    return t;
  }();
  return tags;
}

std::vector<Scalar> utilization_scalars(const std::vector<RankInterval>& ranks) {
  std::vector<const RankInterval*> live;
  for (const auto& r : ranks)
    if (r[kSteps] > 0 && r[kWallNs] > 0) live.push_back(&r);
  if (live.empty()) return {};
  const double n = static_cast<double>(live.size());
  double steps_per_s = 0, samples_per_s = 0, cpu = 0;
  double phase[profile::kPhases] = {}, phase_max[profile::kPhases] = {};
  double gpu_busy = 0, gpu_ranks = 0, sm = 0, sm_ranks = 0;
  for (const RankInterval* r : live) {
    const double wall = (*r)[kWallNs];
    steps_per_s += (*r)[kSteps] / (wall / 1e9);
    samples_per_s += (*r)[kSamples] / (wall / 1e9);
    cpu += (*r)[kCpuNs] / wall;
    for (int p = 0; p < profile::kPhases; ++p) {
      const double share = (*r)[kPhaseNs + p] / wall;
      phase[p] += share;
      phase_max[p] = std::max(phase_max[p], share);
    }
    if ((*r)[kHasGpu] > 0) {
      gpu_busy += (*r)[kGpuNs] / wall;
      ++gpu_ranks;
    }
    if ((*r)[kGpuSm] >= 0) {
      sm += (*r)[kGpuSm];
      ++sm_ranks;
    }
  }
  std::vector<Scalar> out;
  out.push_back({"xlaunch/steps_per_s", steps_per_s / n});
  out.push_back({"xlaunch/samples_per_s", samples_per_s});
  for (int p = 0; p < profile::kPhases; ++p) out.push_back({std::string("xlaunch/") + profile::kPhaseNames[p], phase[p] / n});
  out.push_back({"xlaunch/data_wait_max", phase_max[profile::kDataWait]});
  out.push_back({"xlaunch/comm_wait_max", phase_max[profile::kCommWait]});
  out.push_back({"xlaunch/cpu_cores", cpu / n});
  if (gpu_ranks > 0) out.push_back({"xlaunch/gpu_busy", gpu_busy / gpu_ranks});
  if (sm_ranks > 0) out.push_back({"xlaunch/gpu_sm", sm / sm_ranks});
  return out;
}

}  // namespace xlaunch::track
