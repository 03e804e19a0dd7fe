// Each rank reports itself, then checks one allreduce: the sum over ranks of (rank + 1) must be
// world * (world + 1) / 2 on every rank. Exit code 0 only when the check passes.
#include <ATen/ops/full.h>

#include <cstdio>

#include "xlaunch/accelerator.h"
#include "xlaunch/process_state.h"

int main() {
  const auto& ps = xlaunch::ProcessState::get();
  const auto& place = ps.place();
  std::printf("hello from rank %d of %d (local rank %d of %d) on %s, place from %s\n", place.rank,
              place.world_size, place.local_rank, place.local_world_size, ps.host().c_str(),
              place.source.c_str());
  std::fflush(stdout);
  xlaunch::Accelerator acc;
  auto comm = acc.communicator(at::kCPU);
  at::Tensor t = at::full({4}, static_cast<double>(place.rank + 1), at::kDouble);
  comm->allreduce(t, xlaunch::ReduceOp::Sum);
  const double expected = place.world_size * (place.world_size + 1) / 2.0;
  const bool ok = t.eq(expected).all().item<bool>();
  std::printf("rank %d: allreduce sum = %g, expected %g: %s\n", place.rank, t[0].item<double>(), expected,
              ok ? "OK" : "WRONG");
  return ok ? 0 : 1;
}
