// Reduce-scatter and allgather checked on any communicator, against the answer each rank computes
// alone and against the communicator's own allreduce of the same data. Rank k's input comes from
// (seed, k), so every rank knows every rank's input. Call each check on every rank, in the same
// order, with the same arguments.
#pragma once

#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/ops/cat.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/maximum.h>
#include <ATen/ops/randint.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <string>

#include "xlaunch/error.h"
#include "xlaunch/extend/communicator.h"

namespace xlaunch::test {

inline const char* op_name(ReduceOp op) {
  return op == ReduceOp::Sum ? "Sum" : op == ReduceOp::Avg ? "Avg" : "Max";
}

// Rank `rank`'s input of `numel` values: integers in [-8, 8] (exact in every dtype, and so are their
// sums over a few ranks in any order), or normal values when `integers` is false.
inline at::Tensor rank_input(uint64_t seed, int rank, int64_t numel, at::ScalarType dtype, bool integers = true) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed * 1009 + static_cast<uint64_t>(rank));
  at::Tensor t = integers ? at::randint(-8, 9, {numel}, gen, at::kDouble) : at::randn({numel}, gen, at::kDouble);
  return t.to(dtype);
}

// Chunk `chunk` (of `count` elements) of the reduction of every rank's integer input, reduced here in
// double and rounded once to `dtype`: for integer inputs the sum is exact, and an average rounded
// from float to a 16-bit type equals one rounded from double, so every transport must give it.
inline at::Tensor expected_chunk(uint64_t seed, int world, int chunk, int64_t count, at::ScalarType dtype,
                                 ReduceOp op) {
  at::Tensor acc;
  for (int k = 0; k < world; ++k) {
    at::Tensor x = rank_input(seed, k, world * count, dtype).to(at::kDouble).narrow(0, chunk * count, count);
    acc = !acc.defined() ? x.clone() : op == ReduceOp::Max ? at::maximum(acc, x) : acc.add(x);
  }
  if (op == ReduceOp::Avg) acc.div_(world);
  return acc.to(dtype);
}

// One reduce-scatter of chunks of `count` elements of integer inputs: this rank's chunk equals the
// expected one exactly, and equals the same chunk of the communicator's allreduce of the inputs;
// the input is left as it was.
// `in_place`: out is this rank's chunk of in.
inline void check_reduce_scatter(Communicator& comm, uint64_t seed, int64_t count, at::ScalarType dtype, ReduceOp op,
                                 bool in_place = false) {
  const int w = comm.size(), r = comm.rank();
  const std::string what = std::string(comm.name()) + " " + c10::toString(dtype) + " " + op_name(op) + " count " +
                           std::to_string(count) + " on " + std::to_string(w) + " ranks" + (in_place ? " in place" : "");
  at::Tensor in = rank_input(seed, r, w * count, dtype);
  at::Tensor all = in.clone();
  at::Tensor out = in_place ? in.narrow(0, r * count, count) : at::zeros({count}, in.options());
  comm.reduce_scatter(in, out, op);
  comm.allreduce(all, op);
  EXPECT_TRUE(out.equal(expected_chunk(seed, w, r, count, dtype, op))) << what;
  EXPECT_TRUE(out.equal(all.narrow(0, r * count, count))) << what << ": differs from allreduce";
  // The interface lets `in` serve as scratch; the MPI and in-process communicators leave it alone.
  if (!in_place) EXPECT_TRUE(in.equal(rank_input(seed, r, w * count, dtype))) << what << ": the input changed";
}

// The same with normal (non-integer) inputs, against allreduce within the rounding a different order
// of summation gives in `dtype`.
inline void check_reduce_scatter_close(Communicator& comm, uint64_t seed, int64_t count, at::ScalarType dtype,
                                       ReduceOp op) {
  const int w = comm.size(), r = comm.rank();
  at::Tensor in = rank_input(seed, r, w * count, dtype, /*integers=*/false);
  at::Tensor all = in.clone();
  at::Tensor out = at::empty({count}, in.options());
  comm.reduce_scatter(in, out, op);
  comm.allreduce(all, op);
  const double tol = dtype == at::kDouble ? 1e-12 : dtype == at::kFloat ? 1e-5 : 2e-2;
  EXPECT_TRUE(out.to(at::kDouble).allclose(all.narrow(0, r * count, count).to(at::kDouble), tol, tol))
      << comm.name() << " " << c10::toString(dtype) << " " << op_name(op) << " count " << count;
}

// Booleans: Sum and Max are logical or, bytes stay 0 or 1; Avg is refused with a UsageError.
// Rank k's input, per chunk: [true, rank 0 only, false, last rank only].
inline void check_bool_reduce_scatter(Communicator& comm) {
  const int w = comm.size(), r = comm.rank();
  const auto bool_input = [&] {
    at::Tensor one = at::zeros({4}, at::kBool);
    one[0] = true;
    one[1] = r == 0;
    one[3] = r == w - 1;
    return at::cat(std::vector<at::Tensor>(w, one));
  };
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    at::Tensor out = at::zeros({4}, at::kBool);
    comm.reduce_scatter(bool_input(), out, op);
    const at::Tensor bytes = out.view(at::kByte);
    EXPECT_EQ(bytes[0].item<int>(), 1) << comm.name() << " " << op_name(op);
    EXPECT_EQ(bytes[1].item<int>(), 1) << comm.name() << " " << op_name(op);
    EXPECT_EQ(bytes[2].item<int>(), 0) << comm.name() << " " << op_name(op);
    EXPECT_EQ(bytes[3].item<int>(), 1) << comm.name() << " " << op_name(op);
  }
  at::Tensor out = at::zeros({4}, at::kBool);
  try {
    comm.reduce_scatter(bool_input(), out, ReduceOp::Avg);
    ADD_FAILURE() << comm.name() << ": Avg over bool was not refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("Avg over bool"), std::string::npos) << e.what();
  }
}

// Wrong arguments are UsageErrors on every rank alike (and nothing is left half-issued: a
// collective after them still works).
inline void check_reduce_scatter_usage_errors(Communicator& comm) {
  const int w = comm.size(), r = comm.rank();
  at::Tensor in = at::zeros({w * 6}), out = at::zeros({6});
  EXPECT_THROW(comm.reduce_scatter(in, at::zeros({5}), ReduceOp::Sum), UsageError) << "size";
  EXPECT_THROW(comm.reduce_scatter(in, at::zeros({6}, at::kDouble), ReduceOp::Sum), UsageError) << "dtype";
  EXPECT_THROW(comm.reduce_scatter(at::zeros({w * 3, 2}).t(), out, ReduceOp::Sum), UsageError) << "contiguity";
  if (w > 1)  // out overlapping in, one element off this rank's chunk
    EXPECT_THROW(comm.reduce_scatter(in, in.narrow(0, r * 6 + (r + 1 < w ? 1 : -1), 6), ReduceOp::Sum), UsageError)
        << "overlap";
  check_reduce_scatter(comm, 99, 3, at::kFloat, ReduceOp::Sum);
}

// Allgather of `count` elements per rank of rank k's input (from (seed, k)): chunk k of the result is
// rank k's input, on every rank. `in_place`: in is this rank's chunk of out.
inline void check_allgather(Communicator& comm, uint64_t seed, int64_t count, at::ScalarType dtype,
                            bool in_place = false) {
  const int w = comm.size(), r = comm.rank();
  at::Tensor out = at::zeros({w * count}, dtype);
  at::Tensor mine = rank_input(seed, r, count, at::kDouble).to(dtype);
  at::Tensor in = in_place ? out.narrow(0, r * count, count) : mine;
  if (in_place) in.copy_(mine);
  comm.allgather_async(in, out)->wait();
  for (int k = 0; k < w; ++k)
    EXPECT_TRUE(out.narrow(0, k * count, count).equal(rank_input(seed, k, count, at::kDouble).to(dtype)))
        << comm.name() << " allgather " << c10::toString(dtype) << " count " << count << " chunk " << k
        << (in_place ? " in place" : "");
}

}  // namespace xlaunch::test
