// The report's arithmetic and its advice rules on stats made by hand: each rule fires on the
// measurement it names, and a balanced job gets no advice (docs/performance.md).
#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpuinfo_samples.h"
#include "observe/report.h"

using namespace xlaunch::launcher;
using xlaunch::profile::kPhases;
using xlaunch::profile::RankStats;

namespace {

enum { D, F, B, C, O, X };

// `steps` steps of rank r, each with these milliseconds per phase and 32 samples.
std::optional<RankStats> stats(int rank, uint64_t steps, std::vector<double> ms, int local_rank = -1) {
  RankStats s;
  s.magic = xlaunch::profile::kStatsMagic;
  s.rank = rank;
  s.local_rank = local_rank < 0 ? rank : local_rank;
  std::snprintf(s.host, sizeof s.host, "host%d", rank);
  for (uint64_t i = 0; i < steps; ++i) {
    auto& rec = s.ring[i % xlaunch::profile::kRingSteps];
    for (int p = 0; p < kPhases; ++p) rec.phase_ns[p] = static_cast<uint64_t>(ms[p] * 1e6);
    rec.samples = 32;
    rec.cpu_ns = (i + 1) * 1000000;  // 1 ms of CPU per step
    rec.end_ns = (i + 1) * 1000000000ull;  // step i ends at i + 1 s
    for (int p = 0; p < kPhases; ++p) s.total.phase_ns[p] += rec.phase_ns[p];
    ++s.total.steps;
    s.total.samples += 32;
    s.total.collectives += 3;
    s.total.bytes += 4000000;
    if (s.total.steps == 10) s.at_warmup = s.total;
  }
  return s;
}

JobReport report_of(std::vector<std::optional<RankStats>> all, std::vector<GpuUse> gpus = {}) {
  JobReport r = make_report(all, gpus);
  r.advice = advise(r, xlaunch::config::LaunchConfig{});
  return r;
}

// The same stats with `cpu_ms` of CPU time per step (all threads; the cpu column is cpu_ms over
// the step's wall time), on machine `host`.
std::optional<RankStats> cpu(std::optional<RankStats> s, double cpu_ms, const char* host = nullptr) {
  for (uint64_t i = 0; i < s->total.steps; ++i)
    s->ring[i % xlaunch::profile::kRingSteps].cpu_ns = static_cast<uint64_t>(static_cast<double>(i + 1) * cpu_ms * 1e6);
  if (host) std::snprintf(s->host, sizeof s->host, "%s", host);
  return s;
}

// The same stats with `per_step` collectives moving `mb` MB (1e6 bytes) per step.
std::optional<RankStats> collectives(std::optional<RankStats> s, uint64_t per_step, double mb) {
  const auto bytes = static_cast<uint64_t>(mb * 1e6);
  s->total.collectives = s->total.steps * per_step;
  s->total.bytes = s->total.steps * bytes;
  s->at_warmup.collectives = s->at_warmup.steps * per_step;
  s->at_warmup.bytes = s->at_warmup.steps * bytes;
  return s;
}

// The advice for these stats, run with config `c` from machine `here`.
std::vector<std::string> advice_of(std::vector<std::optional<RankStats>> all, const xlaunch::config::LaunchConfig& c,
                                   const HostFacts& here = {}) {
  JobReport r = make_report(all, {});
  r.launcher_host = here;
  return advise(r, c);
}

// The launcher's machine: its name, CPUs and flags.
HostFacts machine(const char* name, int cpus, CpuFeatures flags = {}) { return HostFacts{name, cpus, -1, flags}; }

std::string all_of(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += a + "\n";
  return s;
}

xlaunch::config::LaunchConfig workers(int n) {
  xlaunch::config::LaunchConfig c;
  c.use_cpu = true;
  c.distributed_type = xlaunch::config::DistributedType::MultiCpu;
  c.num_processes = 2;
  c.loader.num_workers = n;
  return c;
}

bool any_has(const std::vector<std::string>& v, const std::string& part) {
  for (const auto& s : v)
    if (s.find(part) != std::string::npos) return true;
  return false;
}

const std::vector<double> kBalanced = {0.2, 3, 5, 0.5, 0.8, 0.5};  // 10 ms per step

}  // namespace

TEST(Report, TheWindowSkipsTheWarmupAndThePhasesAddUp) {
  const JobReport r = report_of({stats(0, 60, kBalanced), stats(1, 60, kBalanced)});
  EXPECT_EQ(r.first_step, 11u);
  EXPECT_EQ(r.last_step, 60u);
  ASSERT_EQ(r.ranks.size(), 2u);
  EXPECT_EQ(r.ranks[0].steps, 50u);
  EXPECT_NEAR(r.ranks[0].steps_per_s, 100, 0.01);
  EXPECT_NEAR(r.ranks[0].samples_per_s, 3200, 0.1);
  EXPECT_NEAR(r.ranks[0].phase_pct[F], 30, 1e-6);
  double sum = 0;
  for (double p : r.ranks[1].phase_pct) sum += p;
  EXPECT_NEAR(sum, 100, 1e-6);
  EXPECT_NEAR(r.ranks[0].cpu_pct, 10, 1e-6);  // 1 ms of CPU in 10 ms
  EXPECT_NEAR(r.ranks[0].collectives_per_step, 3, 1e-9);
  EXPECT_TRUE(r.advice.empty()) << r.advice[0];
  const std::string text = format_report(r);
  EXPECT_NE(text.find("xlaunch: utilization, steps 11-60 of 60, 2 ranks"), std::string::npos) << text;
  EXPECT_EQ(text.find("advice"), std::string::npos) << text;
}

// The GPU means cover the window: from the end of the warm-up's last step.
TEST(Report, TheWindowStartsWhenTheWarmupEnds) {
  EXPECT_DOUBLE_EQ(window_start_s(*stats(0, 60, kBalanced)), 10.0);
  EXPECT_DOUBLE_EQ(window_start_s(*stats(0, 10, kBalanced)), 2.0);
}

TEST(Report, AShortRunLeavesOutAFifth) {
  const JobReport r = report_of({stats(0, 10, kBalanced)});
  EXPECT_EQ(r.first_step, 3u);
  EXPECT_EQ(r.ranks[0].steps, 8u);
}

TEST(Advice, DataWaitNamesTheLoaderWorkers) {
  const std::vector<double> slow = {6, 3, 5, 0.5, 0.8, 0.5};  // 38% data wait
  const JobReport r = report_of({stats(0, 60, slow), stats(1, 60, slow)});
  ASSERT_EQ(r.advice.size(), 1u);
  EXPECT_TRUE(any_has(r.advice, "data wait is 38.0% of the step on ranks 0, 1")) << r.advice[0];
  // Without the machine's cores known, the wait's share bounds the gain: 1 / (1 - 0.38) = 1.6x,
  // which 2 workers x 1.6 = 4 workers give.
  EXPECT_TRUE(any_has(r.advice, "Raise loader.num_workers from 2 to 4")) << r.advice[0];
  EXPECT_TRUE(any_has(r.advice, "steps would be up to 1.6x faster (the wait allows 1.6x)")) << r.advice[0];
}

// Slow storage: the samples wait (90% of the step), the ranks use 0.2 cores each of the machine's
// 2. The cores allow 2 / 0.4 = 5x, less than the wait's 10x: 5 workers instead of 1, up to 5.0x.
TEST(Advice, MoreWorkersPromiseNoMoreThanTheIdleCoresAllow) {
  const std::vector<double> waits = {90, 3, 5, 0.5, 0.8, 0.7};  // 100 ms
  const auto advice = advice_of({cpu(stats(0, 60, waits), 20, "node"), cpu(stats(1, 60, waits), 20, "node")}, workers(1),
                                machine("node", 2));
  ASSERT_EQ(advice.size(), 1u) << all_of(advice);
  EXPECT_EQ(advice[0], "data wait is 90.0% of the step on ranks 0, 1 (threshold 10.0%): the loader does not keep up. "
                       "Raise loader.num_workers from 1 to 5, or make the dataset's get() cheaper; steps would be up to "
                       "5.0x faster (the wait allows 10.0x; the idle cores 5.0x: the ranks on node use 0.40 of its 2 "
                       "cores (cpu column summed))");
  // With 16 cores the wait is the bound: 10 workers, up to 10.0x.
  const auto roomy = advice_of({cpu(stats(0, 60, waits), 20, "node"), cpu(stats(1, 60, waits), 20, "node")}, workers(1),
                               machine("node", 16));
  EXPECT_TRUE(any_has(roomy, "Raise loader.num_workers from 1 to 10, or make")) << all_of(roomy);
  EXPECT_TRUE(any_has(roomy, "up to 10.0x faster (the wait allows 10.0x; the idle cores 40.0x")) << all_of(roomy);
}

// Samples that burn CPU: each rank's loader keeps one core busy (cpu column 100%), two ranks on a
// machine of two cores. More workers cannot make the samples faster: no worker promise, the cause named.
TEST(Advice, BusyCoresAreNamedInsteadOfMoreWorkers) {
  const std::vector<double> waits = {90, 3, 5, 0.5, 0.8, 0.7};
  const auto advice = advice_of({cpu(stats(0, 60, waits), 100, "node"), cpu(stats(1, 60, waits), 100, "node")},
                                workers(1), machine("node", 2));
  ASSERT_EQ(advice.size(), 1u) << all_of(advice);
  EXPECT_EQ(advice[0], "data wait is 90.0% of the step on ranks 0, 1 (threshold 10.0%), and the cores are busy: the "
                       "ranks on node use 2.00 of its 2 cores (cpu column summed), so more loader workers "
                       "(loader.num_workers) would give at most 1.0x (the wait alone would allow 10.0x). The samples "
                       "burn CPU: make the dataset's get() cheaper, move per-sample augmentation to the device "
                       "(xlaunch/augment.h), or give the job more cores or machines");
  EXPECT_FALSE(any_has(advice, "Raise loader.num_workers")) << advice[0];
  // One idle core of three: 3 / 2 = 1.5x, at or above kWorkerGain: proposed, bounded by it.
  const auto some = advice_of({cpu(stats(0, 60, waits), 100, "node"), cpu(stats(1, 60, waits), 100, "node")},
                              workers(1), machine("node", 3));
  EXPECT_TRUE(any_has(some, "Raise loader.num_workers from 1 to 2, or make the dataset's get() cheaper; steps would be up "
                            "to 1.5x faster"))
      << all_of(some);
}

// Other work on the machine (its load average well above the ranks' use): the promise stays the
// cores' bound, and the line says the gain can be far smaller while that work runs.
TEST(Advice, OtherWorkOnTheMachineIsNamed) {
  const std::vector<double> waits = {90, 3, 5, 0.5, 0.8, 0.7};
  HostFacts busy = machine("node", 2);
  busy.load = 13.5;
  const auto advice = advice_of({cpu(stats(0, 60, waits), 20, "node"), cpu(stats(1, 60, waits), 20, "node")}, workers(1),
                                busy);
  EXPECT_TRUE(any_has(advice, "(cpu column summed)); other work competes for node's cores (load average 13.5, the ranks' "
                              "use 0.40): if the samples need CPU rather than wait, the gain can be far smaller while "
                              "that work runs"))
      << all_of(advice);
  busy.load = 1.2;  // about the ranks' own
  EXPECT_FALSE(any_has(advice_of({cpu(stats(0, 60, waits), 20, "node"), cpu(stats(1, 60, waits), 20, "node")}, workers(1),
                                 busy),
                       "other work"));
}

// Ranks on another machine: its core count is not known here, so it is taken as this machine's, and
// the line says so. Each host's ranks are summed on their own.
TEST(Advice, OtherMachinesAreTakenAsThisOneAndSaySo) {
  const std::vector<double> waits = {90, 3, 5, 0.5, 0.8, 0.7};
  const auto advice = advice_of({cpu(stats(0, 60, waits), 20, "node0"), cpu(stats(1, 60, waits), 100, "node1")},
                                workers(1), machine("node0", 2));
  EXPECT_TRUE(any_has(advice, "the idle cores 2.0x: the ranks on node1 use 1.00 of its 2 cores (cpu column summed; its "
                              "core count taken as node0's)"))
      << all_of(advice);
}

// Ranks bound to one core each (mpi.bind_to core): a rank's loader has its one core only.
TEST(Advice, RanksBoundToOneCoreHaveOneCore) {
  const std::vector<double> waits = {90, 3, 5, 0.5, 0.8, 0.7};
  auto c = workers(1);
  c.mpi.bind_to = "core";
  const auto advice = advice_of({cpu(stats(0, 60, waits), 95, "node"), cpu(stats(1, 60, waits), 20, "node")}, c,
                                machine("node", 64));
  EXPECT_TRUE(any_has(advice, "the cores are busy: rank 0 uses 0.95 cores and is bound to one (mpi.bind_to core), so "
                              "more loader workers (loader.num_workers) would give at most 1.1x"))
      << all_of(advice);
}

// Rank 1 waits for its loader; rank 0 waits for rank 1 in the allreduce. Their own compute is the
// same, so neither is a straggler; the data wait has its rule, and rank 0's wait is not the network.
TEST(Advice, ARankWaitingForDataIsNotAStraggler) {
  const std::vector<double> waits_for_peer = {0.2, 3, 5, 5.5, 0.8, 0.5}, waits_for_data = {5.7, 3, 5, 0, 0.8, 0.5};
  const JobReport r = report_of({stats(0, 60, waits_for_peer), stats(1, 60, waits_for_data)});
  EXPECT_FALSE(any_has(r.advice, "straggler")) << all_of(r.advice);
  EXPECT_FALSE(any_has(r.advice, "communication wait")) << all_of(r.advice);
  EXPECT_TRUE(any_has(r.advice, "data wait is 38.0% of the step on rank 1 (threshold 10.0%)")) << all_of(r.advice);
}

TEST(Advice, CommunicationWaitNamesBucketsAndAccumulation) {
  const std::vector<double> comm = {0.2, 3, 5, 4, 0.8, 0.5};  // 29.6% comm wait on both
  // 5 allreduces of 100 MB in all per step: 95.4 MiB fill 5 buckets at 25 MiB (the first of 1 MiB).
  const JobReport r = report_of({collectives(stats(0, 60, comm), 5, 100), collectives(stats(1, 60, comm), 5, 100)});
  ASSERT_EQ(r.advice.size(), 1u);
  EXPECT_TRUE(any_has(r.advice, "communication wait is 29.6% of the step on ranks 0, 1 (threshold 15.0%; 5.0 "
                                "collectives, 100.00 MB per step: about 5 gradient buckets at ddp.bucket_cap_mb 25)"))
      << r.advice[0];
  EXPECT_TRUE(any_has(r.advice, "Raise ddp.bucket_cap_mb (now 25) for fewer, larger allreduces")) << r.advice[0];
  EXPECT_TRUE(any_has(r.advice, "gradient_accumulation_steps (now 1)")) << r.advice[0];
  EXPECT_FALSE(any_has(r.advice, "comm_hook")) << "one machine: no link to spare";
  xlaunch::config::LaunchConfig two;
  two.num_machines = 2;
  JobReport across = make_report({stats(0, 60, comm), stats(1, 60, comm)}, {});
  EXPECT_TRUE(any_has(advise(across, two), "ddp.comm_hook bf16")) << advise(across, two)[0];
  two.ddp.comm_hook = "bf16";
  EXPECT_FALSE(any_has(advise(across, two), "ddp.comm_hook bf16"));
}

// At ddp.zero_stage 3 the buckets are units: the line names the fsdp knobs and stage 2, not the cap.
TEST(Advice, CommunicationWaitAtStageThreeNamesPrefetchReshardAndStageTwo) {
  const std::vector<double> comm = {0.2, 3, 5, 4, 0.8, 0.5};
  xlaunch::config::LaunchConfig c;
  c.ddp.zero_stage = 3;
  JobReport r = make_report({collectives(stats(0, 60, comm), 15, 100), collectives(stats(1, 60, comm), 15, 100)}, {});
  const auto advice = advise(r, c);
  ASSERT_EQ(advice.size(), 1u) << all_of(advice);
  EXPECT_TRUE(any_has(advice, "communication wait is 29.6% of the step on ranks 0, 1 (threshold 15.0%): at "
                              "ddp.zero_stage 3 the units' gathers and reduce-scatters are not hidden"))
      << advice[0];
  EXPECT_TRUE(any_has(advice, "Raise fsdp.prefetch (now 1)")) << advice[0];
  EXPECT_TRUE(any_has(advice, "set fsdp.reshard_after_forward false")) << advice[0];
  EXPECT_TRUE(any_has(advice, "use ddp.zero_stage 2 if the model fits")) << advice[0];
  EXPECT_FALSE(any_has(advice, "bucket_cap_mb")) << advice[0];
  c.fsdp.reshard_after_forward = false;
  EXPECT_FALSE(any_has(advise(r, c), "reshard_after_forward")) << advise(r, c)[0];
}

// One allreduce per step: no cap makes fewer, so the line proposes what can change the wait.
TEST(Advice, OneBucketGetsNoBucketAdvice) {
  const std::vector<double> comm = {0.2, 3, 5, 4, 0.8, 0.5};
  const auto one = advice_of({collectives(stats(0, 60, comm), 1, 0.11), collectives(stats(1, 60, comm), 1, 0.11)}, {});
  ASSERT_EQ(one.size(), 1u) << all_of(one);
  EXPECT_TRUE(any_has(one, "(threshold 15.0%; 1.0 collectives, 0.11 MB per step: one gradient bucket, so "
                           "ddp.bucket_cap_mb cannot make fewer allreduces): the gradient allreduce is not hidden behind "
                           "backward. Raise gradient_accumulation_steps (now 1)"))
      << one[0];
  EXPECT_FALSE(any_has(one, "Raise ddp.bucket_cap_mb")) << one[0];
  // Two collectives whose bytes fit one bucket: a bucket and another collective (a loss the loop
  // reduces, a streaming loader's byte): still one gradient bucket.
  const auto loss_too = advice_of({collectives(stats(0, 60, comm), 2, 0.5), collectives(stats(1, 60, comm), 2, 0.5)}, {});
  EXPECT_TRUE(any_has(loss_too, "one gradient bucket, so ddp.bucket_cap_mb cannot make fewer")) << all_of(loss_too);
  // Two buckets of 4 MB: the first closes at 1 MiB whatever the cap, so no cap makes fewer.
  const auto two = advice_of({collectives(stats(0, 60, comm), 2, 4), collectives(stats(1, 60, comm), 2, 4)}, {});
  EXPECT_TRUE(any_has(two, "two gradient buckets, the fewest any ddp.bucket_cap_mb gives")) << all_of(two);
  EXPECT_FALSE(any_has(two, "Raise ddp.bucket_cap_mb")) << all_of(two);
  // Under ZeRO each bucket is reduced and gathered: 4 collectives are 2 buckets.
  xlaunch::config::LaunchConfig zero;
  zero.ddp.zero_stage = 1;
  const auto sharded = advice_of({collectives(stats(0, 60, comm), 4, 200), collectives(stats(1, 60, comm), 4, 200)}, zero);
  EXPECT_FALSE(any_has(sharded, "Raise ddp.bucket_cap_mb")) << all_of(sharded);
  const auto more = advice_of({collectives(stats(0, 60, comm), 8, 200), collectives(stats(1, 60, comm), 8, 200)}, zero);
  EXPECT_TRUE(any_has(more, "about 4 gradient buckets at ddp.bucket_cap_mb 25")) << all_of(more);
}

// NCCL counts no collectives in the stats: the bucket advice says on what it depends.
TEST(Advice, UncountedCollectivesMakeTheBucketAdviceConditional) {
  const std::vector<double> comm = {0.2, 3, 5, 4, 0.8, 0.5};
  const auto advice = advice_of({collectives(stats(0, 60, comm), 0, 0), collectives(stats(1, 60, comm), 0, 0)}, {});
  EXPECT_TRUE(any_has(advice, "(threshold 15.0%; the collectives are not counted on this transport): the gradient "
                              "allreduce is not hidden behind backward. If the gradients fill more than two buckets (over "
                              "1 MiB + ddp.bucket_cap_mb MiB), raise ddp.bucket_cap_mb (now 25)"))
      << all_of(advice);
}

TEST(Advice, TheStragglerIsNamed) {
  // Rank 2 works 5 ms more per step; the others wait for it (comm wait), so every wall is equal.
  const std::vector<double> waits = {0.2, 3, 5, 5.5, 0.8, 0.5}, slow = {0.2, 3, 10, 0.5, 0.8, 0.5};
  const JobReport r = report_of({stats(0, 60, waits), stats(1, 60, waits), stats(2, 60, slow)});
  // Its own compute 14.3 ms against 9.3 ms; the 5 ms excess of a 15 ms step: 15 / 10 = 1.5x.
  EXPECT_TRUE(any_has(r.advice, "rank 2 (host2) is a straggler: its own compute (forward, backward, optimizer and the "
                                "rest of its loop; waits left out) takes 14.30 ms per step, 53.8% above the median 9.30 ms"))
      << all_of(r.advice);
  EXPECT_TRUE(any_has(r.advice, "steps would be up to 1.5x faster without it")) << all_of(r.advice);
  EXPECT_FALSE(any_has(r.advice, "rank 0 (host0) is a straggler"));
  // Two ranks: the median of both is halfway to the straggler; the gain is against the other's pace:
  // 14.3 against 9.3 ms of own compute, a 15 ms step: 15 / (15 - 5) = 1.5x, not 15 / (15 - 2.5).
  const JobReport two = report_of({stats(0, 60, waits), stats(1, 60, slow)});
  EXPECT_TRUE(any_has(two.advice, "takes 14.30 ms per step, 21.2% above the median 11.80 ms")) << all_of(two.advice);
  EXPECT_TRUE(any_has(two.advice, "steps would be up to 1.5x faster without it")) << all_of(two.advice);
  EXPECT_FALSE(any_has(r.advice, "communication wait")) << "the others wait for the straggler, not the network";
}

// Rank 0's stats with the GPU it published: on host0, the GPU at bus 3b.
std::optional<RankStats> on_gpu(std::optional<RankStats> s) {
  xlaunch::status::set_gpu_bus_id(&*s, "0000:3b:00.0");
  return s;
}

TEST(Advice, TheGpuRules) {
  GpuUse idle{40, 10, 80, 200, "00000000:3B:00.0", "host0"};
  JobReport r = report_of({on_gpu(stats(0, 60, kBalanced))}, {idle});
  EXPECT_TRUE(any_has(r.advice, "GPU SM use is 40.0% on rank 0 while data wait is low")) << r.advice.size();
  EXPECT_TRUE(any_has(r.advice, "GPU memory use is 10.0 of 80.0 GiB on rank 0")) << r.advice.size();
  EXPECT_NE(format_report(r).find("40%"), std::string::npos);
  GpuUse busy{95, 70, 80, 600, "00000000:3B:00.0", "host0"};
  EXPECT_TRUE(report_of({on_gpu(stats(0, 60, kBalanced))}, {busy}).advice.empty());
}

TEST(Report, AMissingRankIsShownNotInvented) {
  const JobReport r = report_of({stats(0, 60, kBalanced), std::nullopt});
  EXPECT_FALSE(r.ranks[1].present);
  EXPECT_NE(format_report(r).find("its stats are not visible here"), std::string::npos);
  const auto json = nlohmann::json::parse(report_json(r));
  EXPECT_EQ(json["ranks"][1]["present"], false) << json;
}

// Ranks that take turns waiting for each other (jitter, not the network): no communication advice.
TEST(Advice, CommunicationWaitOnOneRankOnlyIsNotTheNetwork) {
  const std::vector<double> waits = {0.2, 3, 5, 2.5, 0.8, 0.5};
  EXPECT_TRUE(report_of({stats(0, 60, waits), stats(1, 60, kBalanced)}).advice.empty());
}

// On CUDA the phases' device time (CUDA events) is shown per step; on CPUs nothing.
TEST(Report, GpuTimePerStepFromCudaEvents) {
  auto s = stats(0, 60, kBalanced);
  EXPECT_EQ(format_report(report_of({s})).find("GPU time per step"), std::string::npos);
  s->total.gpu_ns[F] = 60 * 2000000ull;  // 2 ms per step
  s->at_warmup.gpu_ns[F] = 10 * 2000000ull;
  const JobReport r = report_of({s});
  EXPECT_NEAR(r.ranks[0].gpu_ms_per_step[F], 2.0, 1e-9);
  EXPECT_NE(format_report(r).find("rank 0's GPU time per step (CUDA events): forward 2.00 ms"), std::string::npos)
      << format_report(r);
  const auto json = nlohmann::json::parse(report_json(r));
  EXPECT_EQ(json["ranks"][0]["gpu_ms_per_step"]["data_wait"], 0) << json;
  EXPECT_NEAR(json["ranks"][0]["gpu_ms_per_step"]["forward"].get<double>(), 2.0, 1e-9) << json;
}

// bf16 or fp16 on a CPU job whose CPU lacks the instructions (the flags of literal cpuinfo texts).
TEST(Advice, MixedPrecisionWithoutTheInstructionsIsNamed) {
  auto c = workers(2);
  c.mixed_precision = xlaunch::config::MixedPrecision::Bf16;
  const HostFacts avx2 = machine("node", 2, cpu_features_of(xlaunch::test::kCpuinfoAvx2));
  const auto advice = advice_of({stats(0, 60, kBalanced), stats(1, 60, kBalanced)}, c, avx2);
  ASSERT_EQ(advice.size(), 1u) << all_of(advice);
  EXPECT_EQ(advice[0], "mixed_precision bf16 on a CPU without AVX512-BF16 or AMX-BF16 (flags looked for: avx512_bf16, "
                       "amx_bf16): bf16 autocast runs in software, measured 0.05x fp32 on such a CPU; set "
                       "mixed_precision: no (the flags of node's /proc/cpuinfo; forward and backward, where autocast "
                       "acts, take 80.0% of rank 0's step)");
  EXPECT_TRUE(advice_of({stats(0, 60, kBalanced)}, c, machine("node", 2, cpu_features_of(xlaunch::test::kCpuinfoAvx512Bf16))).empty());
  c.mixed_precision = xlaunch::config::MixedPrecision::Fp16;
  EXPECT_TRUE(any_has(advice_of({stats(0, 60, kBalanced)}, c, machine("node", 2, cpu_features_of(xlaunch::test::kCpuinfoAvx512Bf16))),
                      "mixed_precision fp16 on a CPU without AVX512-FP16 or AMX-FP16"));
  EXPECT_TRUE(advice_of({stats(0, 60, kBalanced)}, c, machine("node", 2, cpu_features_of(xlaunch::test::kCpuinfoAmx))).empty());
  EXPECT_TRUE(advice_of({stats(0, 60, kBalanced)}, c, {}).empty()) << "CPU not known: not judged";
  // A GPU job: its ranks published their GPUs; the CPU's flags do not matter.
  xlaunch::config::LaunchConfig gpu;
  gpu.mixed_precision = xlaunch::config::MixedPrecision::Bf16;
  EXPECT_TRUE(advice_of({on_gpu(stats(0, 60, kBalanced))}, gpu, avx2).empty());
}


// Rule 7: the optimizer's share of the step with optimizer.fused false on a CPU job.
TEST(Advice, ALargeOptimizerShareWithTheFusedStepOffNamesIt) {
  auto c = workers(2);
  c.optimizer.fused = "false";
  const std::vector<double> heavy = {0.2, 3, 5, 0.5, 4.0, 0.5};  // the optimizer: 4 of 13.2 ms
  const auto advice = advice_of({stats(0, 60, heavy), stats(1, 60, heavy)}, c, machine("node", 2));
  ASSERT_EQ(advice.size(), 1u) << all_of(advice);
  EXPECT_EQ(advice[0], "the optimizer step takes 30.3% of rank 0's step (threshold 20.0%), and optimizer.fused is "
                       "false: set optimizer.fused: auto, which steps LibTorch's SGD, Adam and AdamW in one pass over "
                       "memory (AdamW's step measured 3.4x to 4.5x LibTorch's on the CPU, docs/benchmarks.md); steps "
                       "would be up to 1.27x faster");
  EXPECT_TRUE(advice_of({stats(0, 60, kBalanced), stats(1, 60, kBalanced)}, c, machine("node", 2)).empty())
      << "8% of the step: under the threshold";
  c.optimizer.fused = "auto";
  EXPECT_TRUE(advice_of({stats(0, 60, heavy), stats(1, 60, heavy)}, c, machine("node", 2)).empty()) << "already fused";
  xlaunch::config::LaunchConfig gpu;
  gpu.optimizer.fused = "false";
  EXPECT_TRUE(advice_of({on_gpu(stats(0, 60, heavy))}, gpu).empty()) << "the fused step is the CPU's";
}
