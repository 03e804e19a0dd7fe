// What a communicator whose ranks map each other's memory (ShmCommunicator) offers the reducer:
// tensors that live in that memory are reduced where they lie, with no copy into a bucket.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

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

}  // namespace xlaunch
