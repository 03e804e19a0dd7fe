#include "comm/mpi_half_ops.h"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <algorithm>

#include "check.h"

namespace xlaunch {
namespace {

// MPI's user function: inout[i] = in[i] (op) inout[i], over *len elements of H.
template <typename H, bool kMax>
void reduce_16(void* in, void* inout, int* len, MPI_Datatype*) {
  const H* a = static_cast<const H*>(in);
  H* b = static_cast<H*>(inout);
  const int n = *len;
  for (int i = 0; i < n; ++i) {
    const float x = static_cast<float>(a[i]), y = static_cast<float>(b[i]);
    b[i] = H(kMax ? std::max(x, y) : x + y);
  }
}

MPI_Op create(MPI_User_function* fn) {
  MPI_Op op = MPI_OP_NULL;
  XLAUNCH_CHECK_MPI(MPI_Op_create(fn, /*commute=*/1, &op));
  return op;
}

}  // namespace

MPI_Op mpi_half_op(at::ScalarType dtype, ReduceOp op) {
  XLAUNCH_ASSERT(dtype == at::kHalf || dtype == at::kBFloat16, "16-bit floating-point dtype");
  const bool max = op == ReduceOp::Max;
  // Freed by MPI_Finalize; only ever touched from the communication thread.
  if (dtype == at::kHalf) {
    static MPI_Op sum = MPI_OP_NULL, maximum = MPI_OP_NULL;
    MPI_Op& slot = max ? maximum : sum;
    if (slot == MPI_OP_NULL) slot = create(max ? &reduce_16<c10::Half, true> : &reduce_16<c10::Half, false>);
    return slot;
  }
  static MPI_Op sum = MPI_OP_NULL, maximum = MPI_OP_NULL;
  MPI_Op& slot = max ? maximum : sum;
  if (slot == MPI_OP_NULL) slot = create(max ? &reduce_16<c10::BFloat16, true> : &reduce_16<c10::BFloat16, false>);
  return slot;
}

}  // namespace xlaunch
