#include "observe/report.h"

#include "observe/op_table_print.h"
#include "observe/report_text.h"
#include "xlaunch/zero_stages.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

namespace xlaunch::launcher {

using profile::kPhases;
using profile::RankStats;

namespace {

// Steps left out at the start: kWarmupSteps, or a fifth of a short run.
uint64_t warmup_of(uint64_t steps) {
  return steps >= 2 * static_cast<uint64_t>(profile::kWarmupSteps) ? profile::kWarmupSteps : steps / 5;
}

}  // namespace

double window_start_s(const RankStats& s) {
  const uint64_t steps = s.total.steps, warmup = warmup_of(steps);
  if (warmup > 0 && steps <= static_cast<uint64_t>(profile::kRingSteps))
    return static_cast<double>(s.ring[warmup - 1].end_ns) / 1e9;
  return static_cast<double>(s.start_ns) / 1e9;
}

namespace {

RankReport summarize(const RankStats& s, uint64_t warmup) {
  RankReport r;
  r.rank = s.rank;
  r.present = true;
  r.host = std::string(s.host, strnlen(s.host, sizeof s.host));
  if (s.zero.stage > 0 && s.zero.steps > 0) {
    r.zero_stage = s.zero.stage;
    r.optimizer_state_bytes = static_cast<double>(s.zero.optimizer_state_bytes);
    r.reduce_scattered_bytes_per_step = static_cast<double>(s.zero.reduce_scattered_bytes) / static_cast<double>(s.zero.steps);
    r.gathered_bytes_per_step = static_cast<double>(s.zero.gathered_bytes) / static_cast<double>(s.zero.steps);
  }
  const uint64_t steps = s.total.steps;
  if (steps <= warmup) return r;
  profile::Totals w;  // the window's
  if (steps <= static_cast<uint64_t>(profile::kRingSteps)) {
    for (uint64_t i = warmup; i < steps; ++i) {
      const profile::StepRecord& rec = s.ring[i % profile::kRingSteps];
      for (int p = 0; p < kPhases; ++p) {
        w.phase_ns[p] += rec.phase_ns[p];
        w.wall_ns += rec.phase_ns[p];
      }
      w.samples += rec.samples;
    }
    w.steps = steps - warmup;
    const uint64_t cpu_before = warmup > 0 ? s.ring[(warmup - 1) % profile::kRingSteps].cpu_ns : 0;
    w.cpu_ns = s.ring[(steps - 1) % profile::kRingSteps].cpu_ns - cpu_before;
  } else {
    w.steps = steps - s.at_warmup.steps;
    w.samples = s.total.samples - s.at_warmup.samples;
    w.wall_ns = s.total.wall_ns - s.at_warmup.wall_ns;
    w.cpu_ns = s.total.cpu_ns - s.at_warmup.cpu_ns;
    for (int p = 0; p < kPhases; ++p) w.phase_ns[p] = s.total.phase_ns[p] - s.at_warmup.phase_ns[p];
  }
  // Collectives per step: over the window when the warm-up snapshot exists, else over the run.
  const bool snap = s.at_warmup.steps > 0 && warmup == s.at_warmup.steps;
  const double coll_steps = static_cast<double>(snap ? steps - s.at_warmup.steps : steps);
  r.collectives_per_step = static_cast<double>(s.total.collectives - (snap ? s.at_warmup.collectives : 0)) / coll_steps;
  r.mb_per_step = static_cast<double>(s.total.bytes - (snap ? s.at_warmup.bytes : 0)) / coll_steps / 1e6;
  for (int p = 0; p < kPhases; ++p)
    r.gpu_ms_per_step[p] = static_cast<double>(s.total.gpu_ns[p] - (snap ? s.at_warmup.gpu_ns[p] : 0)) / coll_steps / 1e6;
  r.steps = w.steps;
  const double wall_s = static_cast<double>(w.wall_ns) / 1e9;
  if (wall_s <= 0) return r;
  r.steps_per_s = static_cast<double>(w.steps) / wall_s;
  r.samples_per_s = static_cast<double>(w.samples) / wall_s;
  for (int p = 0; p < kPhases; ++p) r.phase_pct[p] = 100.0 * static_cast<double>(w.phase_ns[p]) / static_cast<double>(w.wall_ns);
  r.step_ms = wall_s * 1e3 / static_cast<double>(w.steps);
  r.busy_ms = r.step_ms * (1 - r.phase_pct[profile::kCommWait] / 100);
  r.cpu_pct = 100.0 * static_cast<double>(w.cpu_ns) / static_cast<double>(w.wall_ns);
  return r;
}

}  // namespace

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pct(double v) { return fixed(v, 1) + "%"; }

std::string speedup(double p_pct) { return fixed(100 / std::max(1.0, 100 - p_pct), 1) + "x"; }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

JobReport make_report(const std::vector<std::optional<RankStats>>& stats, const std::vector<GpuUse>& gpus) {
  JobReport out;
  out.world = static_cast<int>(stats.size());
  for (const auto& s : stats) out.total_steps = std::max<uint64_t>(out.total_steps, s ? s->total.steps : 0);
  const uint64_t warmup = warmup_of(out.total_steps);
  if (!gpus.empty()) out.gpu_host = gpus.front().host;
  out.first_step = warmup + 1;
  out.last_step = out.total_steps;
  for (int r = 0; r < out.world; ++r) {
    RankReport rr;
    rr.rank = r;
    if (stats[r]) {
      rr = summarize(*stats[r], warmup);
      rr.gpu_bus_id = status::normalize_pci_bus_id(stats[r]->bus_id());
      for (const GpuUse& g : gpus)
        if (!rr.gpu_bus_id.empty() && g.host == rr.host && status::normalize_pci_bus_id(g.bus_id) == rr.gpu_bus_id)
          rr.gpu = g;
    }
    out.ranks.push_back(rr);
  }
  return out;
}

std::string zero_line(const JobReport& r) {
  std::vector<const RankReport*> zero;
  for (const auto& rr : r.ranks)
    if (rr.present && rr.zero_stage > 0) zero.push_back(&rr);
  if (zero.empty()) return "";
  // MB with a digit that shows even a small model's figures.
  const auto mb = [](double bytes) { return fixed(bytes / 1e6, bytes >= 1e6 ? 1 : 3); };
  // One number when every rank's prints alike, else the ranks' lowest and highest.
  const auto over_ranks = [&](double RankReport::*field) {
    const auto [lo, hi] = std::minmax_element(zero.begin(), zero.end(), [&](const RankReport* a, const RankReport* b) {
      return a->*field < b->*field;
    });
    return mb((*lo)->*field) == mb((*hi)->*field) ? mb((*hi)->*field) : mb((*lo)->*field) + "-" + mb((*hi)->*field);
  };
  std::string line = "ZeRO stage " + std::to_string(zero.front()->zero_stage) + ": optimizer state " +
                     over_ranks(&RankReport::optimizer_state_bytes) + " MB per rank; per step ";
  if (xlaunch::shards_gradients(zero.front()->zero_stage)) line += over_ranks(&RankReport::reduce_scattered_bytes_per_step) + " MB reduce-scattered, ";
  line += over_ranks(&RankReport::gathered_bytes_per_step) + " MB gathered";
  if (!xlaunch::shards_gradients(zero.front()->zero_stage)) line += " (the gradients are allreduced whole at stage 1)";
  return line;
}

std::string format_report(const JobReport& r) {
  std::ostringstream os;
  os << "xlaunch: utilization, steps " << r.first_step << "-" << r.last_step << " of " << r.total_steps << ", "
     << r.world << " rank" << (r.world == 1 ? "" : "s") << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-5s %8s %10s", "rank", "steps/s", "samples/s");
  os << line;
  for (const char* n : profile::kPhaseNames) {
    std::snprintf(line, sizeof line, " %9s", n);
    os << line;
  }
  std::snprintf(line, sizeof line, " %5s %6s %8s\n", "cpu", "gpu_sm", "gpu_mem");
  os << line;
  for (const auto& rr : r.ranks) {
    if (!rr.present || rr.steps == 0) {
      os << std::to_string(rr.rank) << (rr.present ? "     no steps after the warm-up\n"
                                                   : "     - (its stats are not visible here: a machine without a shared "
                                                     "log_dir, or it never started)\n");
      continue;
    }
    std::snprintf(line, sizeof line, "%-5d %8.2f %10.1f", rr.rank, rr.steps_per_s, rr.samples_per_s);
    os << line;
    for (double p : rr.phase_pct) os << " " << std::string(9 - std::min<size_t>(9, pct(p).size()), ' ') << pct(p);
    const std::string sm = rr.gpu && rr.gpu->sm_pct >= 0 ? fixed(rr.gpu->sm_pct, 0) + "%" : "-";
    const std::string mem = rr.gpu && rr.gpu->mem_total_gib > 0
                                ? fixed(100 * rr.gpu->mem_used_gib / rr.gpu->mem_total_gib, 0) + "%"
                                : "-";
    std::snprintf(line, sizeof line, " %4.0f%% %6s %8s\n", rr.cpu_pct, sm.c_str(), mem.c_str());
    os << line;
  }
  // Ranks whose GPU is not among the sampled ones: on another machine (its NVML is not read), or
  // one NVML here does not list.
  std::vector<int> elsewhere, unlisted;
  for (const auto& rr : r.ranks)
    if (!r.gpu_host.empty() && !rr.gpu_bus_id.empty() && !rr.gpu && rr.present)
      (rr.host == r.gpu_host ? unlisted : elsewhere).push_back(rr.rank);
  if (!elsewhere.empty())
    os << "xlaunch: " << rank_list(elsewhere) << " ran on other machines than " << r.gpu_host
       << ", whose GPUs are not sampled: GPU columns left blank\n";
  if (!unlisted.empty())
    os << "xlaunch: " << rank_list(unlisted) << " published a GPU (PCI bus id) that NVML on " << r.gpu_host
       << " does not list: GPU columns left blank\n";
  for (const auto& rr : r.ranks) {
    const double* g = rr.gpu_ms_per_step;
    if (g[profile::kForward] + g[profile::kBackward] + g[profile::kOptimizer] <= 0) continue;
    std::snprintf(line, sizeof line,
                  "xlaunch: rank %d's GPU time per step (CUDA events): forward %.2f ms, backward %.2f ms, optimizer "
                  "%.2f ms, of a %.2f ms step\n",
                  rr.rank, g[profile::kForward], g[profile::kBackward], g[profile::kOptimizer], rr.step_ms);
    os << line;
  }
  if (const std::string zero = zero_line(r); !zero.empty()) os << "xlaunch: " << zero << "\n";
  if (const std::string syncs = syncs_line(r.syncs); !syncs.empty()) os << "xlaunch: " << syncs << "\n";
  for (const auto& a : r.advice) os << "xlaunch: advice: " << a << "\n";
  return os.str();
}

std::string report_json(const JobReport& r) {
  using json = nlohmann::ordered_json;  // the fields in the order a reader expects them
  const auto per_phase = [](const double* v) {
    json o = json::object();
    for (int p = 0; p < kPhases; ++p) o[profile::kPhaseNames[p]] = v[p];
    return o;
  };
  json ranks = json::array();
  for (const auto& rr : r.ranks) {
    json j = {{"rank", rr.rank}, {"present", rr.present}, {"host", rr.host}, {"steps", rr.steps},
              {"steps_per_s", rr.steps_per_s}, {"samples_per_s", rr.samples_per_s}, {"step_ms", rr.step_ms},
              {"busy_ms", rr.busy_ms}, {"cpu_pct", rr.cpu_pct}, {"collectives_per_step", rr.collectives_per_step},
              {"mb_per_step", rr.mb_per_step}, {"phase_pct", per_phase(rr.phase_pct)},
              {"gpu_ms_per_step", per_phase(rr.gpu_ms_per_step)}};
    if (!rr.gpu_bus_id.empty()) j["gpu_bus_id"] = rr.gpu_bus_id;
    if (rr.gpu)
      j["gpu"] = {{"sm_pct", rr.gpu->sm_pct}, {"mem_used_gib", rr.gpu->mem_used_gib},
                  {"mem_total_gib", rr.gpu->mem_total_gib}, {"power_w", rr.gpu->power_w}};
    if (rr.zero_stage > 0)
      j["zero"] = {{"stage", rr.zero_stage}, {"optimizer_state_bytes", rr.optimizer_state_bytes},
                   {"reduce_scattered_bytes_per_step", rr.reduce_scattered_bytes_per_step},
                   {"gathered_bytes_per_step", rr.gathered_bytes_per_step}};
    ranks.push_back(std::move(j));
  }
  json out = {{"world", r.world}, {"first_step", r.first_step}, {"last_step", r.last_step},
              {"total_steps", r.total_steps}, {"ranks", std::move(ranks)}, {"advice", r.advice}};
  if (const std::string zero = zero_line(r); !zero.empty()) out["zero"] = zero;
  if (!r.syncs.empty()) out["host_device_syncs"] = syncs_json(r.syncs);
  if (!r.operators.empty()) out["operators"] = op_tables_json(r.operators);
  return out.dump(2, ' ', false, json::error_handler_t::replace) + "\n";  // a stray byte in a host name: U+FFFD
}

}  // namespace xlaunch::launcher
