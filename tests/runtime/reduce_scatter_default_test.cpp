// The default reduce-scatter of the Communicator interface (what a transport that does not
// override it gets: an allreduce of a copy, then this rank's chunk), called by its qualified name on
// ranks as threads, against one process summing the ranks' inputs; and the argument checks every
// transport shares.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <atomic>

#include "inprocess_ranks.h"
#include "xlaunch/error.h"

namespace {

using xlaunch::ReduceOp;

// Rank r's input: chunk c of it holds 100 * r + c + k / 8 at element k of the chunk.
at::Tensor input_of(int rank, int world, int64_t chunk, at::ScalarType dtype) {
  auto t = torch::empty({world * chunk}, torch::kDouble);
  for (int c = 0; c < world; ++c)
    for (int64_t k = 0; k < chunk; ++k) t[c * chunk + k] = 100.0 * rank + c + k / 8.0;
  return t.to(dtype);
}

TEST(ReduceScatterDefault, EachRankGetsItsChunkOfTheReduction) {
  for (int world : {1, 2, 3}) {
    for (int64_t chunk : {int64_t{0}, int64_t{1}, int64_t{7}}) {
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
        xlaunch::test::run_ranks(world, [&](std::shared_ptr<xlaunch::InProcessCommunicator> comm) {
          const int r = comm->rank();
          auto in = input_of(r, world, chunk, torch::kFloat);
          auto out = torch::full({chunk}, -1.0f);
          comm->xlaunch::Communicator::reduce_scatter_async(in, out, op)->wait();
          // One process: every rank's input, reduced, then this rank's chunk.
          std::vector<at::Tensor> all;
          for (int q = 0; q < world; ++q) all.push_back(input_of(q, world, chunk, torch::kDouble));
          const auto stacked = torch::stack(all);
          at::Tensor want = op == ReduceOp::Max ? std::get<0>(stacked.max(0)) : stacked.sum(0);
          if (op == ReduceOp::Avg) want = want / world;
          EXPECT_TRUE(torch::equal(out, want.narrow(0, r * chunk, chunk).to(torch::kFloat)))
              << "world " << world << " chunk " << chunk << " rank " << r;
        });
      }
    }
  }
}

TEST(ReduceScatterDefault, ArgumentMismatchesAreNamed) {
  xlaunch::test::run_ranks(2, [&](std::shared_ptr<xlaunch::InProcessCommunicator> comm) {
    auto expect_refused = [&](const at::Tensor& in, const at::Tensor& out, const std::string& part) {
      try {
        comm->xlaunch::Communicator::reduce_scatter_async(in, out, ReduceOp::Sum);
        ADD_FAILURE() << "no UsageError for " << part;
      } catch (const xlaunch::UsageError& e) {
        EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
      }
    };
    expect_refused(torch::zeros({5}), torch::zeros({2}), "size() * out.numel()");
    expect_refused(torch::zeros({4}), torch::zeros({2}, torch::kDouble), "same dtype");
    expect_refused(torch::zeros({4, 2}).t(), torch::zeros({4}), "contiguous");
    // Both ranks must enter the same collectives: nothing above started one.
    comm->barrier();
  });
}

}  // namespace
