// Booleans reduced as PyTorch reduces them, on any communicator (reduce_op_for in
// xlaunch/extend/communicator.h): Sum and Max are logical or, with every byte 0 or 1 (a plain sum
// of bytes would leave 2, 3... in a bool), and Avg is refused with a UsageError, even in a world
// of one. Call on every rank.
#pragma once

#include <gtest/gtest.h>

#include <ATen/ops/empty.h>

#include <string>

#include "xlaunch/error.h"
#include "xlaunch/extend/communicator.h"

namespace xlaunch::test {

// A bool tensor on `device`: [true everywhere, true on rank 0 only, false everywhere, true on the
// last rank only].
inline at::Tensor bool_probe(const Communicator& comm, const at::Device& device) {
  at::Tensor t = at::empty({4}, at::TensorOptions().dtype(at::kBool));
  const int r = comm.rank(), last = comm.size() - 1;
  t[0] = true;
  t[1] = r == 0;
  t[2] = false;
  t[3] = r == last;
  return t.to(device);
}

inline void expect_bools_reduce_as_pytorch(Communicator& comm, const at::Device& device = at::kCPU) {
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) {
    at::Tensor t = bool_probe(comm, device);
    comm.allreduce(t, op);
    const at::Tensor bytes = t.cpu().view(at::kByte);
    EXPECT_EQ(bytes[0].item<int>(), 1) << comm.name() << (op == ReduceOp::Sum ? " Sum" : " Max");
    EXPECT_EQ(bytes[1].item<int>(), 1) << comm.name();
    EXPECT_EQ(bytes[2].item<int>(), 0) << comm.name();
    EXPECT_EQ(bytes[3].item<int>(), 1) << comm.name();
  }
  at::Tensor t = bool_probe(comm, device);
  try {
    comm.allreduce(t, ReduceOp::Avg);
    ADD_FAILURE() << comm.name() << ": Avg over bool was not refused";
  } catch (const UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("Avg over bool"), std::string::npos) << e.what();
  }
}

}  // namespace xlaunch::test
