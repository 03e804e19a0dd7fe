// Under mpirun -np 2: each rank loads its shard and gathers every batch's results; the gathered
// sequence must equal what one process computes over the whole dataset (computed locally).
#include <gtest/gtest.h>

#include "test_datasets.h"
#include "xlaunch/metrics.h"
#include "comm/mpi_communicator.h"
#include "xlaunch/process_state.h"

namespace {

TEST(GatherMpi, GatheredResultsEqualOneProcess) {
  const auto& ps = xlaunch::ProcessState::get();
  auto comm = xlaunch::MpiCommunicator::world();
  ASSERT_EQ(comm->size(), ps.world_size());
  const int64_t n = 11;  // does not divide by 2
  const int64_t batch = 3;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    SCOPED_TRACE("epoch " + std::to_string(epoch));
    xlaunch::Loader single(xlaunch::test::IndexDataset(n), xlaunch::test::options(batch * comm->size(), 0));
    single.set_epoch(epoch);
    std::vector<float> expected;  // "predictions": the data's first column, 10 * index
    for (auto& b : single)
      for (int64_t r = 0; r < b.size(); ++r) expected.push_back(b.data[r][0].item<float>());
    xlaunch::Loader loader(xlaunch::test::IndexDataset(n),
                           xlaunch::test::options(batch, 2, comm->rank(), comm->size()));
    loader.set_epoch(epoch);
    std::vector<float> gathered;
    for (auto& b : loader) {
      const at::Tensor g = xlaunch::gather_for_metrics(*comm, b.data.select(1, 0).contiguous(), b.span);
      for (int64_t r = 0; r < g.size(0); ++r) gathered.push_back(g[r].item<float>());
    }
    EXPECT_EQ(gathered, expected) << "on rank " << comm->rank();
    EXPECT_EQ(static_cast<int64_t>(gathered.size()), n);
  }
}

}  // namespace
