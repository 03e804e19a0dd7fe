#include "observe/report.h"
#include "observe/op_table.h"

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

std::string fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string pct(double v) { return fixed(v, 1) + "%"; }

// "2.0x": how much faster a step gets when a share `p_pct` of it goes away.
std::string speedup(double p_pct) { return fixed(100 / std::max(1.0, 100 - p_pct), 1) + "x"; }

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ", ") + std::to_string(r);
  return (ranks.size() == 1 ? "rank " : "ranks ") + s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace

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

namespace {

using Ranks = std::vector<const RankReport*>;

// The ranks over `threshold` in `phase`.
std::vector<int> over(const Ranks& ranks, int phase, double threshold) {
  std::vector<int> v;
  for (const auto* rr : ranks)
    if (rr->phase_pct[phase] > threshold) v.push_back(rr->rank);
  return v;
}

const RankReport& worst(const Ranks& ranks, int phase) {
  return **std::max_element(ranks.begin(), ranks.end(), [&](const RankReport* a, const RankReport* b) {
    return a->phase_pct[phase] < b->phase_pct[phase];
  });
}

// A rank's own compute per step: forward, backward, optimizer and the rest of its loop; the wait
// for data and for the other ranks left out.
double own_ms(const RankReport& rr) {
  return rr.step_ms * (100 - rr.phase_pct[profile::kDataWait] - rr.phase_pct[profile::kCommWait]) / 100;
}

// How much faster steps can get from more loader workers, as far as the CPU allows
// (docs/performance.md, "Loader workers and busy cores"). The ranks step together, so a shorter
// step makes each host run its ranks' CPU work per step (cpu column x step time, loader workers
// included) in less wall time: a host whose ranks use B of its N cores can run them at most N / B
// times faster. Other machines' cores are not known here: taken as the launcher's. A rank bound
// to one core (mpi.bind_to core or hwthread) using U cores: 1 / U. Other work on the machine is
// not in the cpu column: when the launcher's machine's load average exceeds what the ranks use by
// more than a core, the line says the gain can be far smaller (a caveat; the load average covers
// a minute, not the report's window).
struct CoreBound {
  double gain = 0;    // 0: not known (no core count, no CPU time)
  std::string basis;  // the measurement it rests on
  std::string shared;  // "" or the caveat: other work competes for the cores
};

CoreBound core_bound(const Ranks& ranks, const HostFacts& here, const config::LaunchConfig& c) {
  CoreBound b;
  if (here.cpus <= 0) return b;
  const auto keep = [&](double gain, std::string basis) {
    gain = std::max(1.0, gain);
    if (b.gain == 0 || gain < b.gain) b = {gain, std::move(basis)};
  };
  if (c.mpi.bind_to == "core" || c.mpi.bind_to == "hwthread") {
    for (const auto* rr : ranks)
      if (rr->cpu_pct > 0)
        keep(100 / rr->cpu_pct, "rank " + std::to_string(rr->rank) + " uses " + fixed(rr->cpu_pct / 100, 2) +
                                    " cores and is bound to one (mpi.bind_to " + c.mpi.bind_to + ")");
    return b;
  }
  std::map<std::string, double> busy;  // host -> cores its ranks use
  for (const auto* rr : ranks) busy[rr->host] += rr->cpu_pct / 100;
  for (const auto& [host, used] : busy)
    if (used > 0)
      keep(here.cpus / used, "the ranks on " + host + " use " + fixed(used, 2) + " of its " + std::to_string(here.cpus) +
                                 " cores (cpu column summed" +
                                 (host == here.name ? "" : "; its core count taken as " + here.name + "'s") + ")");
  if (busy.count(here.name) && here.load - busy[here.name] > 1)
    b.shared = "; other work competes for " + here.name + "'s cores (load average " + fixed(here.load, 1) +
               ", the ranks' use " + fixed(busy[here.name], 2) + "): if the samples need CPU rather than wait, the gain can "
               "be far smaller while that work runs";
  return b;
}

// Rule 1: waiting for data. More workers help only as far as idle cores let the loader make
// samples faster; with the cores busy the cause is the samples' CPU cost, and the line says so.
void advise_data_wait(const Ranks& ranks, const JobReport& r, const config::LaunchConfig& c, std::vector<std::string>& out) {
  const std::vector<int> slow = over(ranks, profile::kDataWait, kDataWaitPct);
  if (slow.empty()) return;
  const RankReport& w = worst(ranks, profile::kDataWait);
  const double d = std::min(w.phase_pct[profile::kDataWait], 99.9) / 100;
  const double wait_gain = 1 / (1 - d);
  const CoreBound cores = core_bound(ranks, r.launcher_host, c);
  const double gain = cores.gain > 0 ? std::min(wait_gain, cores.gain) : wait_gain;
  const std::string head = "data wait is " + pct(100 * d) + " of the step on " + rank_list(slow) + " (threshold " +
                           pct(kDataWaitPct) + ")";
  if (cores.gain > 0 && cores.gain < wait_gain && gain < kWorkerGain) {
    out.push_back(head + ", and the cores are busy: " + cores.basis +
                  ", so more loader workers (loader.num_workers) would give at most " + fixed(gain, 1) +
                  "x (the wait alone would allow " + fixed(wait_gain, 1) +
                  "x). The samples burn CPU: make the dataset's get() cheaper, move per-sample augmentation to the "
                  "device (xlaunch/augment.h), or give the job more cores or machines");
    return;
  }
  // Workers needed to hide the wait: with n >= 1 workers the loader makes a batch every n-th of what
  // one worker takes, and that is the step (the wait exists); with 0 the training thread makes it
  // during the step's wait (its share d).
  std::string workers;
  const int n = c.loader.num_workers;
  if (n == config::LoaderSection::kAutoWorkers) {
    workers = "Set loader.num_workers above the count auto chose";
  } else {
    const double need = n >= 1 ? n * gain : d * gain;
    const int to = std::max(n + 1, static_cast<int>(std::ceil(need - 1e-9)));
    workers = "Raise loader.num_workers from " + std::to_string(n) + " to " + std::to_string(to);
  }
  out.push_back(head + ": the loader does not keep up. " + workers +
                (c.use_cpu || config::runs_on_cpu(c) ? "" : " and keep loader.pin_memory: true") +
                ", or make the dataset's get() cheaper; steps would be up to " + fixed(gain, 1) +
                "x faster (the wait allows " + fixed(wait_gain, 1) + "x" +
                (cores.gain > 0 ? "; the idle cores " + fixed(cores.gain, 1) + "x: " + cores.basis : "") + ")" +
                cores.shared);
}

// Rule 3: one rank's own compute slower than the others': everyone waits for it in every allreduce.
// Data wait is left out (rule 1 names it), so a rank waiting for its loader is not called a straggler.
std::vector<int> advise_stragglers(const Ranks& ranks, std::vector<std::string>& out) {
  std::vector<int> stragglers;
  if (ranks.size() < 2) return stragglers;
  std::vector<double> own;
  for (const auto* rr : ranks) own.push_back(own_ms(*rr));
  const double med = median(own);
  for (const auto* rr : ranks) {
    const double mine = own_ms(*rr);
    if (med <= 0 || mine <= kStragglerRatio * med) continue;
    stragglers.push_back(rr->rank);
    // Everyone's step is about the straggler's; without it, shorter by its excess over the others'
    // pace (the median of the other ranks: with two ranks the median of all halves the excess).
    std::vector<double> others;
    for (const auto* o : ranks)
      if (o != rr) others.push_back(own_ms(*o));
    const double excess = std::max(0.0, mine - median(others)), step = std::max(rr->step_ms, mine);
    out.push_back("rank " + std::to_string(rr->rank) + " (" + rr->host + ") is a straggler: its own compute (forward, " +
                  "backward, optimizer and the rest of its loop; waits left out) takes " + fixed(mine, 2) +
                  " ms per step, " + pct(100 * (mine / med - 1)) + " above the median " + fixed(med, 2) +
                  " ms (threshold " + pct(100 * (kStragglerRatio - 1)) + "), and every other rank waits for it in each "
                  "allreduce. Look for what else runs on its machine, its CPU binding (mpi.bind_to), or more work in its "
                  "data shard; steps would be up to " + fixed(step / (step - excess), 1) + "x faster without it");
  }
  return stragglers;
}

// Whether a larger ddp.bucket_cap_mb can make fewer gradient allreduces, from what a step counted.
// The counts include collectives that are not gradient buckets (a streaming loader's byte per batch,
// a loss the loop reduces), so the buckets are taken as at most the collectives (two per bucket
// under ZeRO: the allgather) and at most what the step's bytes fill at the current caps. The first
// bucket closes at 1 MiB whatever the cap (reducer.h), so no cap makes fewer than 2 buckets of
// gradients over 1 MiB: the cap is proposed only above that.
struct BucketView {
  bool propose = false;
  bool counted = true;  // false: the transport counts no collectives (NCCL)
  std::string basis;
};

BucketView buckets_of(const RankReport& w, const config::LaunchConfig& c) {
  BucketView v;
  if (w.collectives_per_step <= 0) {
    v.counted = false;
    v.basis = "the collectives are not counted on this transport";
    return v;
  }
  v.basis = fixed(w.collectives_per_step, 1) + " collectives, " + fixed(w.mb_per_step, 2) + " MB per step";
  if (c.ddp.comm_hook == "powersgd") return v;  // several collectives per bucket: not judged
  const int per_bucket = c.ddp.zero_stage >= 1 ? 2 : 1;
  const double half = c.ddp.comm_hook == "fp16" || c.ddp.comm_hook == "bf16" ? 2 : 1;  // the hook halves the bytes
  const double grad_mib = w.mb_per_step * 1e6 / (1 << 20) / per_bucket * half;
  const double cap = c.ddp.bucket_cap_mb, first = std::min(1.0, cap);
  const double by_bytes = grad_mib <= first ? 1 : 1 + std::ceil((grad_mib - first) / cap - 1e-9);
  const double buckets = std::max(1.0, std::min(std::floor(w.collectives_per_step / per_bucket + 0.05), by_bytes));
  const double fewest = grad_mib > 1 ? 2 : 1;
  v.propose = buckets > fewest;
  v.basis += v.propose ? ": about " + fixed(buckets, 0) + " gradient buckets at ddp.bucket_cap_mb " + fixed(cap, 0)
             : buckets == 1 ? ": one gradient bucket, so ddp.bucket_cap_mb cannot make fewer allreduces"
                            : ": two gradient buckets, the fewest any ddp.bucket_cap_mb gives (the first closes at 1 MiB)";
  return v;
}

// Rule 2: waiting for gradients. The transfer is paid by every rank; waiting for a slower peer only
// by the faster ones (a straggler; a rank waiting for data; jitter: ranks take turns). So it counts
// only when every rank waits (with a straggler: when the stragglers themselves wait).
void advise_comm_wait(const Ranks& ranks, const std::vector<int>& stragglers, const config::LaunchConfig& c,
                      std::vector<std::string>& out) {
  std::vector<int> slow = over(ranks, profile::kCommWait, kCommWaitPct);
  const auto in = [](const std::vector<int>& v, int rank) { return std::find(v.begin(), v.end(), rank) != v.end(); };
  if (!stragglers.empty())
    slow.erase(std::remove_if(slow.begin(), slow.end(), [&](int r) { return !in(stragglers, r); }), slow.end());
  if (slow.empty() || slow.size() != (stragglers.empty() ? ranks.size() : stragglers.size())) return;
  const RankReport& w = **std::max_element(ranks.begin(), ranks.end(), [&](const RankReport* a, const RankReport* b) {
    return (in(slow, a->rank) ? a->phase_pct[profile::kCommWait] : -1) <
           (in(slow, b->rank) ? b->phase_pct[profile::kCommWait] : -1);
  });
  const BucketView buckets = buckets_of(w, c);
  const std::string cap = "ddp.bucket_cap_mb (now " + fixed(c.ddp.bucket_cap_mb, 0) + ")";
  std::string knobs = buckets.propose ? "Raise " + cap + " for fewer, larger allreduces, raise "
                      : !buckets.counted
                          ? "If the gradients fill more than two buckets (over 1 MiB + ddp.bucket_cap_mb MiB), raise " + cap +
                                " for fewer, larger allreduces; raise "
                          : "Raise ";
  knobs += "gradient_accumulation_steps (now " + std::to_string(c.gradient_accumulation_steps) +
           ") to reduce once per several batches, or use a larger batch per rank";
  if (c.num_machines > 1 && c.ddp.comm_hook == "none")
    knobs += "; between machines, send fewer bytes: ddp.comm_hook bf16 (half) or powersgd (low rank)";
  out.push_back("communication wait is " + pct(w.phase_pct[profile::kCommWait]) + " of the step on " + rank_list(slow) +
                " (threshold " + pct(kCommWaitPct) + "; " + buckets.basis + "): the gradient allreduce is not hidden "
                "behind backward. " + knobs + "; without the wait, steps would be up to " +
                speedup(w.phase_pct[profile::kCommWait]) + " faster");
}

// Rules 4 and 5: the GPU (host-bound, memory to spare).
void advise_gpu(const Ranks& ranks, bool stragglers, std::vector<std::string>& out) {
  for (const auto* rr : ranks) {
    if (!rr->gpu) continue;
    // Low SM use with a slow loader, a straggler or a slow network has those causes (above).
    if (rr->gpu->sm_pct >= 0 && rr->gpu->sm_pct < kGpuSmPct && rr->phase_pct[profile::kDataWait] <= kDataWaitPct &&
        rr->phase_pct[profile::kCommWait] <= kCommWaitPct && !stragglers)
      out.push_back("GPU SM use is " + pct(rr->gpu->sm_pct) + " on rank " + std::to_string(rr->rank) +
                    " while data wait is low (" + pct(rr->phase_pct[profile::kDataWait]) + "): the host is the " +
                    "bottleneck. Remove host syncs from the loop (.item(), printing or copying tensors to the CPU every "
                    "step), and batch small kernels (larger batches, fused ops); the GPU has " +
                    pct(100 - rr->gpu->sm_pct) + " of its time to give");
    if (rr->gpu->mem_total_gib > 0 && 100 * rr->gpu->mem_used_gib / rr->gpu->mem_total_gib < kGpuMemPct)
      out.push_back("GPU memory use is " + fixed(rr->gpu->mem_used_gib, 1) + " of " + fixed(rr->gpu->mem_total_gib, 1) +
                    " GiB on rank " + std::to_string(rr->rank) + " (under " + pct(kGpuMemPct) + "): a larger batch " +
                    "per rank fits, and usually raises samples/s (scale the learning rate with it)");
  }
}

// Rule 6: bf16 or fp16 on a CPU job whose CPU (the launcher's machine's flags) lacks the instructions.
void advise_mixed_precision(const Ranks& ranks, const JobReport& r, const config::LaunchConfig& c,
                            std::vector<std::string>& out) {
  const bool on_gpus = std::any_of(ranks.begin(), ranks.end(), [](const RankReport* rr) { return !rr->gpu_bus_id.empty(); });
  if (c.mixed_precision == config::MixedPrecision::No || (on_gpus && !config::runs_on_cpu(c))) return;
  const std::string problem = cpu_mixed_precision_problem(c.mixed_precision, r.launcher_host.cpu);
  if (problem.empty()) return;
  const RankReport& first = *ranks.front();
  out.push_back(problem + " (the flags of " + (r.launcher_host.name.empty() ? "this machine" : r.launcher_host.name) +
                "'s /proc/cpuinfo; forward and backward, where autocast acts, take " +
                pct(first.phase_pct[profile::kForward] + first.phase_pct[profile::kBackward]) + " of rank " +
                std::to_string(first.rank) + "'s step)");
}

}  // namespace

std::vector<std::string> advise(const JobReport& r, const config::LaunchConfig& c) {
  std::vector<std::string> out;
  Ranks ranks;
  for (const auto& rr : r.ranks)
    if (rr.present && rr.steps > 0) ranks.push_back(&rr);
  if (ranks.empty()) return out;
  // The rules of docs/performance.md ("The advice"), numbered as there; the straggler rule (3) runs
  // before the communication rule (2), which needs to know the stragglers.
  advise_data_wait(ranks, r, c, out);
  const std::vector<int> stragglers = advise_stragglers(ranks, out);
  advise_comm_wait(ranks, stragglers, c, out);
  advise_gpu(ranks, !stragglers.empty(), out);
  advise_mixed_precision(ranks, r, c, out);
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
  if (zero.front()->zero_stage >= 2) line += over_ranks(&RankReport::reduce_scattered_bytes_per_step) + " MB reduce-scattered, ";
  line += over_ranks(&RankReport::gathered_bytes_per_step) + " MB gathered";
  if (zero.front()->zero_stage == 1) line += " (the gradients are allreduced whole at stage 1)";
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
