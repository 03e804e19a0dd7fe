// The CUDA communicator: NCCL, one communicator per process on its GPU.
//
// Bootstrapped by broadcasting rank 0's ncclUniqueId over the CPU (MPI) communicator. Collectives
// run on NCCL's own stream, ordered against the caller's current (compute) stream with events:
//  1. an event recorded on the compute stream; the NCCL stream waits for it (the inputs are ready);
//  2. the NCCL call is enqueued on the NCCL stream, followed by a "done" event;
//  3. Work::wait() makes the then-current compute stream wait for "done".
// allreduce, broadcast, allgather (ncclAllGather) and reduce-scatter (ncclReduceScatter) all take
// this path. No step synchronises the host. The tensor's memory is marked as used by the NCCL stream so the
// caching allocator does not reuse it before the collective finished.
#pragma once

#include <memory>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

// Throws UsageError when xlaunch was built without NCCL (XLAUNCH_WITH_NCCL) or CUDA is absent.
std::shared_ptr<Communicator> make_nccl_communicator(std::shared_ptr<Communicator> bootstrap, int device_index);

}  // namespace xlaunch
