// What a communicator whose ranks map each other's memory (ShmCommunicator, HierarchicalCommunicator)
// offers the reducer: tensors that live in that memory are reduced where they lie, with no copy
// into a bucket. Such a communicator derives from SharedMemoryTransport as well as Communicator.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

#include "xlaunch/extend/communicator.h"

namespace xlaunch {

class SharedPool;  // comm/shared_pool.h

class SharedMemoryTransport {
 public:
  virtual ~SharedMemoryTransport() = default;
  // Whether t lives in that memory, so that collectives reduce it where it is. Every rank must
  // agree on that for the tensors of one collective.
  virtual bool holds(const at::Tensor& t) const = 0;
  // Collective: a pool of `bytes` of that memory for this rank's gradients (ddp/grad_capture.h),
  // owned by the communicator; or nullptr, identically on every rank, when there is none.
  virtual SharedPool* reserve_pool(size_t bytes) = 0;
};

// What `comm` offers for zero-copy reduction, or null when its ranks share no memory.
inline SharedMemoryTransport* shared_memory(Communicator& comm) { return dynamic_cast<SharedMemoryTransport*>(&comm); }

}  // namespace xlaunch
