#include "observe/syncs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace xlaunch::launcher {
namespace {

std::string count_text(double v) {
  char buf[32];
  if (std::fabs(v - std::round(v)) < 1e-9) std::snprintf(buf, sizeof buf, "%.0f", v);
  else std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}

// "0", "0, 2", "0-3"
std::string ranks_text(const std::vector<int>& ranks) {
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += std::to_string(ranks[i]);
    if (j > i) out += (j == i + 1 ? ", " : "-") + std::to_string(ranks[j]);
    i = j + 1;
  }
  return out;
}

constexpr const char* kRemove =
    "each one makes the CPU wait until the GPU has run everything queued, and the GPU then idles while the CPU "
    "queues the next work. The usual causes are .item(), printing a tensor, .to(kCPU)/.cpu(), nonzero or a boolean "
    "mask, and an if on a tensor's value; keep such values on the GPU (sum the loss into a tensor and read it every "
    "N steps), copy with non_blocking=true into pinned memory, and select with torch::where instead of branching. "
    "Where the caller is MODULE+0xOFF, `addr2line -f -C -e MODULE 0xOFF` names its line";

}  // namespace

RankSyncs summarize_syncs(const profile::SyncStats& s, uint64_t warmup) {
  RankSyncs r;
  r.rank = s.rank;
  if (s.steps > warmup) {
    if (s.steps <= static_cast<uint64_t>(profile::kRingSteps)) {
      r.steps = s.steps - warmup;
      for (uint64_t i = warmup; i < s.steps; ++i) {
        r.syncs += s.per_step[i];
        r.runtime_syncs += s.runtime_per_step[i];
      }
    } else {
      // Past the ring the window starts at kWarmupSteps (report.cpp's warm-up for long runs).
      r.steps = s.steps - profile::kWarmupSteps;
      r.syncs = s.syncs - s.syncs_at_warmup;
      r.runtime_syncs = s.runtime_syncs - s.runtime_syncs_at_warmup;
    }
    r.per_step = static_cast<double>(r.syncs) / static_cast<double>(r.steps);
    r.runtime_per_step = static_cast<double>(r.runtime_syncs) / static_cast<double>(r.steps);
  }
  const profile::SyncSite* site = &s.first;
  if (s.first.step <= warmup && s.first_after_warmup.step > warmup) site = &s.first_after_warmup;
  if (site->step > 0) {
    r.first_step = site->step;
    r.first = site->text();
  }
  r.runtime_what = s.runtime_what.text();
  return r;
}

std::vector<RankSyncs> read_syncs(const std::string& status_dir, int world, uint64_t warmup) {
  std::vector<RankSyncs> out;
  for (int r = 0; r < world; ++r)
    if (const auto s = status::read_sync_stats_file(status_dir, r)) out.push_back(summarize_syncs(*s, warmup));
  return out;
}

std::string syncs_line(const std::vector<RankSyncs>& ranks) {
  std::vector<const RankSyncs*> counted;
  for (const RankSyncs& r : ranks)
    if (r.steps > 0) counted.push_back(&r);
  if (counted.empty()) return "";
  const RankSyncs* most = *std::max_element(counted.begin(), counted.end(), [](const RankSyncs* a, const RankSyncs* b) {
    return a->per_step < b->per_step;
  });
  const auto [lo, hi] = std::minmax_element(counted.begin(), counted.end(), [](const RankSyncs* a, const RankSyncs* b) {
    return a->per_step < b->per_step;
  });
  std::vector<int> same;
  for (const RankSyncs* r : counted)
    if (r->per_step == most->per_step) same.push_back(r->rank);
  // The runtime's own: the rank with the most, and what they are (the runtime's, not to remove).
  const RankSyncs* rt = *std::max_element(counted.begin(), counted.end(), [](const RankSyncs* a, const RankSyncs* b) {
    return a->runtime_per_step < b->runtime_per_step;
  });
  const std::string rt_what = " (" + (rt->runtime_what.empty() ? std::string("kind unknown") : rt->runtime_what) + ")";
  if (most->syncs == 0 && rt->runtime_syncs > 0) {
    std::vector<int> rt_same;
    for (const RankSyncs* r : counted)
      if (r->runtime_per_step == rt->runtime_per_step) rt_same.push_back(r->rank);
    return "host-device syncs: " + count_text(rt->runtime_per_step) + " per step on " +
           (rt_same.size() == 1 ? "rank " : "ranks ") + ranks_text(rt_same) + ", all made by xlaunch itself" + rt_what +
           "; none by the training loop";
  }
  if (most->syncs == 0)
    return "host-device syncs: none in the steps after the warm-up on " +
           (counted.size() == 1 ? "rank " + std::to_string(counted.front()->rank)
                                : "ranks " + ranks_text(same)) +
           " (counted with debug: true)";
  std::string line = "host-device syncs: " + count_text(most->per_step) + " per step on " +
                     (same.size() == 1 ? "rank " : "ranks ") + ranks_text(same);
  if (most->first_step > 0)
    line += " (first: step " + std::to_string(most->first_step) + ", " +
            (most->first.empty() ? std::string("place unknown") : most->first) + ")";
  if ((*lo)->per_step != (*hi)->per_step)
    line += "; " + count_text((*lo)->per_step) + " to " + count_text((*hi)->per_step) + " per step over the ranks";
  line += "; remove it: ";
  line += kRemove;
  if (rt->runtime_syncs > 0)
    line += "; and " + count_text(rt->runtime_per_step) + " per step made by xlaunch itself" + rt_what;
  return line;
}

nlohmann::ordered_json syncs_json(const std::vector<RankSyncs>& ranks) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const RankSyncs& r : ranks)
    out.push_back({{"rank", r.rank}, {"steps", r.steps}, {"syncs", r.syncs}, {"per_step", r.per_step},
                   {"first_step", r.first_step}, {"first", r.first}, {"runtime_syncs", r.runtime_syncs},
                   {"runtime_per_step", r.runtime_per_step}, {"runtime_what", r.runtime_what}});
  return out;
}

}  // namespace xlaunch::launcher
