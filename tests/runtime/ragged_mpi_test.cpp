// Ragged collectives through MPI on 3 ranks (mpirun -np 3): gather of 0, 5 and 17 rows,
// pad_across_processes, gather_object / broadcast_object, the size limit, split_between_processes
// and gather_for_metrics of different row counts. Every rank computes the one-process answer
// itself from (rank, index), and a bad input must fail on every rank, never hang.
#include <gtest/gtest.h>

#include <ATen/ops/arange.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/full.h>
#include <ATen/ops/tensor.h>
#include <ATen/ops/zeros.h>
#include <torch/cuda.h>

#include <map>
#include <string>
#include <vector>

#include "ddp_mpi_helpers.h"
#include "xlaunch/accelerator.h"
#include "xlaunch/error.h"
#include "xlaunch/metrics.h"

namespace {

using xlaunch::Accelerator;
using xlaunch::AcceleratorOptions;
using xlaunch::test::cpu_options;

// Rank r's rows: row i, column c holds r * 1000 + i * 10 + c.
at::Tensor rows_of(int rank, int64_t n) {
  return at::arange(n, at::kFloat).unsqueeze(1) * 10 + at::arange(3, at::kFloat).unsqueeze(0) + rank * 1000.0;
}

std::string usage_error(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const xlaunch::UsageError& e) {
    return e.what();
  }
  return "no error";
}

class RaggedMpi : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(acc.num_processes(), 3) << "run under mpirun -np 3"; }
  Accelerator acc{cpu_options()};
  int rank = acc.process_index();
};

TEST_F(RaggedMpi, GatherOfZeroFiveAndSeventeenRowsIsTheTwentyTwoRowsInRankOrder) {
  const std::vector<int64_t> sizes{0, 5, 17};
  const at::Tensor want = at::cat({rows_of(0, 0), rows_of(1, 5), rows_of(2, 17)});
  const at::Tensor got = acc.gather(rows_of(rank, sizes[rank]));
  EXPECT_EQ(got.sizes(), (std::vector<int64_t>{22, 3}));
  EXPECT_TRUE(got.equal(want));
  // Equal sizes: the fast path gives the same as before.
  EXPECT_TRUE(acc.gather(rows_of(rank, 4)).equal(at::cat({rows_of(0, 4), rows_of(1, 4), rows_of(2, 4)})));
}

TEST_F(RaggedMpi, ADifferenceInDimOneFailsOnEveryRankNamingEachShape) {
  const std::string e = usage_error([&] { acc.gather(at::zeros({rank * 5, rank == 1 ? 4 : 3})); });
  EXPECT_NE(e.find("gather: the ranks' tensors may differ in dim 0 only, but they differ in dim 1: rank 0 has [0, 3] "
                   "Float on cpu; rank 1 has [5, 4] Float on cpu; rank 2 has [10, 3] Float on cpu"),
            std::string::npos)
      << e;
  // The ranks are still in step: the next collective works.
  EXPECT_TRUE(acc.gather(at::full({1}, rank, at::kLong)).equal(at::tensor({0, 1, 2}, at::kLong)));
}

TEST_F(RaggedMpi, PadAcrossProcessesAtTheEndAndAtTheStart) {
  const at::Tensor t = at::full({2, rank + 1}, rank + 1, at::kLong);  // dim 1: 1, 2, 3
  const auto row = [](std::vector<int64_t> v) { return at::tensor(v, at::kLong).reshape({1, 3}).repeat({2, 1}); };
  const std::vector<std::vector<int64_t>> end{{1, -1, -1}, {2, 2, -1}, {3, 3, 3}};
  const std::vector<std::vector<int64_t>> start{{0, 0, 1}, {0, 2, 2}, {3, 3, 3}};
  EXPECT_TRUE(acc.pad_across_processes(t, 1, -1).equal(row(end[rank])));
  EXPECT_TRUE(acc.pad_across_processes(t, 1, 0, /*pad_first=*/true).equal(row(start[rank])));
}

TEST_F(RaggedMpi, GatherObjectOfStringsAndMapsRoundTrips) {
  const std::vector<std::string> strings{"", "rank one", std::string(300, 'z') + std::string("\0end", 4)};
  EXPECT_EQ(acc.gather_object(strings[rank]), strings);
  using Stats = std::map<std::string, std::vector<double>>;
  const auto stats = [](int r) { return Stats{{"loss", {0.25 * r}}, {"rank" + std::to_string(r), {1, 2, 3}}}; };
  EXPECT_EQ(acc.gather_object(stats(rank)), (std::vector<Stats>{stats(0), stats(1), stats(2)}));
  EXPECT_EQ(acc.broadcast_object(stats(rank), 1), stats(1));
}

TEST_F(RaggedMpi, ATooLargeObjectIsRefusedOnEveryRank) {
  AcceleratorOptions o = cpu_options();
  o.max_object_bytes = 1000;
  Accelerator small(o);
  const std::string mine(rank == 2 ? 5000 : 10, 'v');
  const std::string e = usage_error([&] { small.gather_object(mine); });
  EXPECT_NE(e.find("gather_object: a value is larger than the limit of 1000 bytes"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 2's is 5013 bytes"), std::string::npos) << e;
  const std::string b = usage_error([&] { small.broadcast_object(mine, 2); });
  EXPECT_NE(b.find("rank 2's is 5013 bytes"), std::string::npos) << b;
  EXPECT_EQ(small.gather_object(rank * 2), (std::vector<int>{0, 2, 4}));
}

TEST_F(RaggedMpi, SplitBetweenProcessesWithAndWithoutPadding) {
  const std::vector<int> items{10, 11, 12, 13, 14, 15, 16};
  const std::vector<std::vector<int>> plain{{10, 11, 12}, {13, 14}, {15, 16}};
  const std::vector<std::vector<int>> padded{{10, 11, 12}, {13, 14, 14}, {15, 16, 16}};
  EXPECT_EQ(acc.split_between_processes(items), plain[rank]);
  EXPECT_EQ(acc.split_between_processes(items, true), padded[rank]);
}

TEST_F(RaggedMpi, GatherForMetricsOfShardsThatEndAtDifferentBatches) {
  // n = 10 strided over 3 ranks without padding (4, 3 and 3 samples), batches of 2: the last
  // batch has 2, 1 and 1 rows. Prediction of position p: 10 * p. One process: 0, 10, ..., 90.
  const int64_t n = 10;
  std::vector<int64_t> mine;
  for (int64_t p = rank; p < n; p += 3) mine.push_back(p);
  std::vector<int64_t> gathered;
  for (int64_t first = 0; first < 4; first += 2) {
    const int64_t to = std::min<int64_t>(first + 2, static_cast<int64_t>(mine.size()));
    const at::Tensor preds = at::tensor(std::vector<int64_t>(mine.begin() + first, mine.begin() + to), at::kLong) * 10;
    const at::Tensor g =
        xlaunch::gather_for_metrics(*acc.communicator(acc.device()), preds, xlaunch::ShardSpan{first, n, 3});
    for (int64_t i = 0; i < g.size(0); ++i) gathered.push_back(g[i].item<int64_t>());
  }
  EXPECT_EQ(gathered, (std::vector<int64_t>{0, 10, 20, 30, 40, 50, 60, 70, 80, 90}));
}

// The CUDA path: the shapes through MPI, the padded rows through NCCL. Needs a GPU per rank.
TEST_F(RaggedMpi, OnCudaTheRaggedGatherAndGatherForMetricsGoThroughNccl) {
  if (torch::cuda::device_count() < 3) GTEST_SKIP() << "needs 3 GPUs (one per rank); this machine has "
                                                    << torch::cuda::device_count();
  AcceleratorOptions o = cpu_options();
  o.cpu = false;
  Accelerator gpu(o);
  ASSERT_TRUE(gpu.device().is_cuda());
  const std::vector<int64_t> sizes{0, 5, 17};
  const at::Tensor got = gpu.gather(rows_of(rank, sizes[rank]).to(gpu.device()));
  EXPECT_TRUE(got.is_cuda());
  EXPECT_TRUE(got.cpu().equal(at::cat({rows_of(0, 0), rows_of(1, 5), rows_of(2, 17)})));
  // Rows 2, 1, 1 of the last batch (positions 6, 9 | 7 | 8), as in the CPU test below.
  std::vector<int64_t> last;
  for (int64_t p = rank + 6; p < 10; p += 3) last.push_back(p);
  const at::Tensor g = xlaunch::gather_for_metrics(*gpu.communicator(gpu.device()),
                                                   at::tensor(last, at::kLong).to(gpu.device()), xlaunch::ShardSpan{2, 10, 3});
  EXPECT_TRUE(g.cpu().equal(at::tensor({6, 7, 8, 9}, at::kLong)));
}

}  // namespace
