// MPI reductions of float16 and bfloat16 tensors on the wire as 16-bit values: MPI has no such
// types, so the elements travel as MPI_UINT16_T and user-defined operations add (or take the
// maximum of) them, widening each pair to float32 and rounding the result back. Used by
// MpiCommunicator for 16-bit tensors, which the fp16/bf16 communication hooks send so that half
// the bytes of float32 cross the network.
#pragma once

#include <mpi.h>

#include <c10/core/ScalarType.h>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

// The operation reducing `dtype` (kHalf or kBFloat16) elements sent as MPI_UINT16_T with `op`
// (Avg reduces as Sum; the caller divides). Created on first use and kept: call where MPI may be
// called (the communication thread).
MPI_Op mpi_half_op(at::ScalarType dtype, ReduceOp op);

}  // namespace xlaunch
