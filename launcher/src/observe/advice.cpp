// The advice of the utilization report (report.h: advise): the rules of docs/performance.md ("The
// advice"), each quoting the measurements it rests on and naming the config key that changes them.
#include <algorithm>
#include <cmath>

#include "launch/cpu_features.h"
#include "observe/report.h"
#include "observe/report_text.h"
#include "xlaunch/comm_hooks.h"
#include "xlaunch/config/setting.h"
#include "xlaunch/zero_stages.h"

namespace xlaunch::launcher {

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
  // The hook's bytes per gradient byte (comm_hooks.h); a hook without a fixed fraction (a low-rank
  // approximation, several collectives per bucket) is not judged.
  const CommHookInfo* hook = find_comm_hook(c.ddp.comm_hook);
  if (!hook || hook->wire_fraction <= 0) return v;
  // Per bucket: its allreduce; at stages 1 and 2 a reduce-scatter or allreduce and an allgather; at
  // stage 3 (a bucket is a unit) a reduce-scatter and one or two gathers.
  const int per_bucket = xlaunch::shards_parameters(c.ddp.zero_stage) ? (c.fsdp.reshard_after_forward ? 3 : 2)
                         : xlaunch::shards_optimizer_state(c.ddp.zero_stage) ? 2 : 1;
  const double grad_mib = w.mb_per_step * 1e6 / (1 << 20) / per_bucket / hook->wire_fraction;
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
  if (xlaunch::shards_parameters(c.ddp.zero_stage)) {
    // Stage 3: the buckets are the model's units, whatever bucket_cap_mb says.
    std::string knobs = "Raise fsdp.prefetch (now " + std::to_string(c.fsdp.prefetch) +
                        ") to start each unit's gather further ahead";
    if (c.fsdp.reshard_after_forward)
      knobs += ", set fsdp.reshard_after_forward false (one gather per unit and step instead of two, for stage 2's "
               "parameter memory)";
    knobs += ", or use ddp.zero_stage 2 if the model fits on each rank";
    out.push_back("communication wait is " + pct(w.phase_pct[profile::kCommWait]) + " of the step on " +
                  rank_list(slow) + " (threshold " + pct(kCommWaitPct) + "): at ddp.zero_stage 3 the units' gathers " +
                  "and reduce-scatters are not hidden behind compute. " + knobs + "; without the wait, steps would " +
                  "be up to " + speedup(w.phase_pct[profile::kCommWait]) + " faster");
    return;
  }
  const BucketView buckets = buckets_of(w, c);
  const std::string cap = "ddp.bucket_cap_mb (now " + fixed(c.ddp.bucket_cap_mb, 0) + ")";
  std::string knobs = buckets.propose ? "Raise " + cap + " for fewer, larger allreduces, raise "
                      : !buckets.counted
                          ? "If the gradients fill more than two buckets (over 1 MiB + ddp.bucket_cap_mb MiB), raise " + cap +
                                " for fewer, larger allreduces; raise "
                          : "Raise ";
  knobs += config::key_and_value(c, env::kGradAccumSteps) +
           " to reduce once per several batches, or use a larger batch per rank";
  const CommHookInfo* hook = find_comm_hook(c.ddp.comm_hook);
  if (c.num_machines > 1 && hook && hook->wire_fraction == 1)  // the gradients travel whole
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

// Rule 7: a CPU job whose optimizer step takes a large share of the step, with the fused step
// turned off (optimizer.fused false). The fused step runs on the CPU only: a GPU job is not told.
void advise_fused_optimizer(const Ranks& ranks, const config::LaunchConfig& c, std::vector<std::string>& out) {
  if (c.optimizer.fused != "false") return;
  if (std::any_of(ranks.begin(), ranks.end(), [](const RankReport* rr) { return !rr->gpu_bus_id.empty(); })) return;
  const RankReport& w = worst(ranks, profile::kOptimizer);
  if (w.phase_pct[profile::kOptimizer] <= kOptimizerPct) return;
  out.push_back("the optimizer step takes " + pct(w.phase_pct[profile::kOptimizer]) + " of rank " +
                std::to_string(w.rank) + "'s step (threshold " + pct(kOptimizerPct) +
                "), and optimizer.fused is false: set optimizer.fused: auto, which steps LibTorch's SGD, Adam and "
                "AdamW in one pass over memory (AdamW's step measured " + fixed(kFusedOptimizerSpeedup, 1) +
                "x to 4.5x LibTorch's on the CPU, docs/benchmarks.md); steps would be up to " +
                fixed(100.0 / (100.0 - w.phase_pct[profile::kOptimizer] * (1.0 - 1.0 / kFusedOptimizerSpeedup)), 2) +
                "x faster");
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
  advise_fused_optimizer(ranks, c, out);
  return out;
}

}  // namespace xlaunch::launcher
