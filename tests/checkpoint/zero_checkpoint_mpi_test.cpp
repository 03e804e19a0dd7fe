// Under mpirun -np 4: ZeRO stage 2 over the real transport (the world's bucket communicator: shared
// memory on one machine), saved; then resumed on MPI sub-communicators of 2 ranks at stage 1 and of
// 3 ranks at stage 0; and stage 3 (parameter shards saved per rank) resumed at stages 3, 2 and 0, and compared bit for bit with a run on the same sub-communicator started from
// the state gathered whole (zero_resume.h), as zero_checkpoint_test does with ranks as threads.
#include <gtest/gtest.h>

#include "comm/agree.h"
#include "comm/mpi_communicator.h"
#include "scratch_dir.h"
#include "zero_resume.h"

using namespace xlaunch::test;

namespace zero_checkpoint_mpi {

// Saved on the 4 ranks at `stage`, resumed on each of `targets` (world, stage), each compared with
// a run on the same ranks started from the saved state gathered whole.
void expect_matrix(int stage, const std::vector<std::pair<int, int>>& targets, const std::string& tag,
                   const std::string& shard_group = "world") {
  const auto world = xlaunch::MpiCommunicator::world();
  ASSERT_EQ(world->size(), 4) << "run under mpirun -np 4";
  // One directory for all ranks: rank 0 makes it, and alone writes and reads in it.
  const std::string dir = xlaunch::broadcast_string(*world, world->rank() == 0 ? make_scratch_dir() : "");
  constexpr int kSaved = 6, kMore = 5;
  for (Opt opt : {Opt::Sgd, Opt::AdamW}) {
    const std::string name = tag + (opt == Opt::Sgd ? "sgd" : "adamw");
    Leg a{4, stage, opt};
    a.shard_group = shard_group;
    a.init = initial_params();
    a.to = kSaved;
    a.save = dir + "/" + name;
    const LegResult saved = leg_on_rank(a, world);
    for (const auto& [w, to_stage] : targets) {
      const auto sub = world->split(world->rank() < w ? 0 : MPI_UNDEFINED, world->rank());
      if (!sub) continue;  // the ranks left out go on to the next split
      Leg to{w, to_stage, opt};
      to.from = kSaved;
      to.to = kSaved + kMore;
      Leg resumed = to;
      resumed.init = initial_params(99);
      resumed.load = a.save;
      const LegResult got = leg_on_rank(resumed, sub);
      Leg straight = to;
      straight.init = unflatten(saved.params);
      straight.seed = &saved.whole;
      const LegResult want = leg_on_rank(straight, sub);
      EXPECT_TRUE(got.params.equal(want.params)) << name << " on " << w << " ranks at stage " << to_stage;
      ASSERT_EQ(got.whole.size(), want.whole.size());
      for (const auto& [k, t] : want.whole) EXPECT_TRUE(got.whole.at(k).equal(t)) << k;
    }
  }
  world->barrier();  // the ranks left out of the last split wait for those in it
  if (world->rank() == 0 && !::testing::Test::HasFailure()) remove_scratch_dir(dir);
}

}  // namespace zero_checkpoint_mpi

TEST(ZeroCheckpointMpi, FourRanksAtStageTwoResumeOnTwoAndThreeRanks) {
  zero_checkpoint_mpi::expect_matrix(2, {{2, 1}, {3, 0}}, "s2_");
}

// Stage 3 over the real transport: every rank's parameter shard (in the communicator's shared
// memory) saved as it is, resumed on 3 ranks at stage 3, 2 at stage 2 and 1 at stage 0.
TEST(ZeroCheckpointMpi, FourRanksAtStageThreeResumeOnEveryLayout) {
  zero_checkpoint_mpi::expect_matrix(3, {{3, 3}, {2, 2}, {1, 0}}, "s3_");
}

// Hybrid sharding (ddp.shard_group machine) on 2 machines of 2 ranks (tests/cluster/zero_cluster_test.sh
// runs this; on one machine it is skipped): the shards of one machine's ranks, written by the first
// machine, resumed on 3 ranks at stage 3, 2 at stage 2 and 1 at stage 0, at stages 3 and 2.
TEST(ZeroCheckpointMpi, HybridShardsResumeOnEveryLayout) {
  {
    xlaunch::AcceleratorOptions o;
    o.cpu = true;
    xlaunch::Accelerator probe(o, xlaunch::MpiCommunicator::world());
    if (probe.bucket_communicator(probe.device())->name() != "hier")
      GTEST_SKIP() << "one machine: hybrid sharding needs several (tests/cluster/zero_cluster_test.sh)";
  }
  zero_checkpoint_mpi::expect_matrix(3, {{3, 3}, {2, 2}, {1, 0}}, "h3_", "machine");
  zero_checkpoint_mpi::expect_matrix(2, {{3, 2}, {2, 1}, {1, 0}}, "h2_", "machine");
}
