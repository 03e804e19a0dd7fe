// Collective communication over the ranks of a job, on flat contiguous tensors: the interface a
// transport implements (extending xlaunch), and what Accelerator::communicator() hands a training
// program for its own collectives.
//
// Implementations (runtime/src/comm/): MpiCommunicator (CPU tensors), ShmCommunicator (CPU
// gradient buckets of ranks that share a machine, through shared memory), NcclCommunicator (CUDA
// tensors) and InProcessCommunicator (ranks as threads of one process, for unit tests).
//
// Contract for every implementation:
//  - Collectives are issued in the same order on every rank; the *_async calls start them in call
//    order, and wait() on the returned Work completes them (CPU: the data is final; CUDA: the
//    caller's current stream is ordered after the collective, with no host synchronisation).
//  - A world of one returns at once (allreduce of one rank is the identity).
//  - Failures throw CommError naming the collective, the rank and the library's error string.
//  - Booleans reduce as PyTorch reduces them: Sum is logical or, Avg is refused (reduce_op_for).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

namespace xlaunch {

enum class ReduceOp { Sum, Avg, Max };

class Work {
 public:
  virtual ~Work() = default;
  // Blocks until the collective is complete (see the contract above). Rethrows its error.
  virtual void wait() = 0;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string name() const = 0;

  // In place over a contiguous tensor.
  virtual std::shared_ptr<Work> allreduce_async(at::Tensor t, ReduceOp op) = 0;
  // In place: after completion every rank holds root's values. t must be contiguous.
  virtual std::shared_ptr<Work> broadcast_async(at::Tensor t, int root) = 0;
  // out (contiguous, size() * in.numel() elements, in's dtype) receives every rank's `in`, in
  // rank order.
  virtual std::shared_ptr<Work> allgather_async(at::Tensor in, at::Tensor out) = 0;
  virtual std::shared_ptr<Work> barrier_async() = 0;

  // Reduce-scatter (sharded data parallelism: each rank keeps the reduced gradients of its shard).
  // `in`: contiguous, size() * out.numel() elements, the same count and dtype on every rank;
  // `out`: contiguous, in's dtype and device. After completion rank r's `out` holds chunk r of the
  // reduction of every rank's `in` (elements [r * out.numel(), (r + 1) * out.numel())); `in` may
  // have been used as scratch. Default: an allreduce of a copy of `in`, then this rank's chunk
  // (correct for any transport, but every rank receives the whole result).
  virtual std::shared_ptr<Work> reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op);

  // A buffer that this communicator reduces best (e.g. in memory the other ranks can map).
  // Collective when an implementation needs it: call on every rank in the same order.
  virtual at::Tensor allocate(int64_t numel, const at::TensorOptions& options);

  // In place over several tensors as one collective: the same count, sizes and dtypes on every
  // rank, in the same order. Default: one allreduce_async per tensor.
  virtual std::shared_ptr<Work> allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op);

  // Compressed allreduce, for gradients on slow links (the fp16/bf16 communication hooks): the
  // tensors (floating point, contiguous; the same count, sizes and dtype on every rank) are cast to
  // `wire` (float16 or bfloat16) after dividing by size() for Avg, reduced in `wire`, and cast back
  // in place by wait(): half the bytes of float32 travel, and every rank ends with the same values.
  // Leave the tensors alone until wait() returns. Default: one flat `wire` buffer through
  // allreduce_async (MPI and NCCL reduce 16-bit types natively); a world of one is the identity.
  virtual std::shared_ptr<Work> allreduce_compressed_async(std::vector<at::Tensor> ts, ReduceOp op,
                                                           at::ScalarType wire);

  void allreduce(const at::Tensor& t, ReduceOp op) { allreduce_async(t, op)->wait(); }
  void broadcast(const at::Tensor& t, int root) { broadcast_async(t, root)->wait(); }
  // Returns a tensor of shape [size(), in.sizes()...].
  at::Tensor allgather(const at::Tensor& in);
  void reduce_scatter(const at::Tensor& in, const at::Tensor& out, ReduceOp op) {
    reduce_scatter_async(in, out, op)->wait();
  }
  void barrier() { barrier_async()->wait(); }

  // Every rank's string, in rank order (lengths may differ). For agreeing before collectives.
  std::vector<std::string> allgather_strings(const std::string& s);
};

// A Work that is already complete (world of one, or a synchronous implementation).
std::shared_ptr<Work> completed_work();

// Checks reduce_scatter's arguments for `comm` (sizes, contiguity, dtypes, devices) and throws
// UsageError naming the mismatch; every implementation calls it first.
void check_reduce_scatter_args(const Communicator& comm, const at::Tensor& in, const at::Tensor& out);

// The op an implementation reduces a tensor of `dtype` with, as PyTorch does: booleans have no sum,
// so Sum over bool is Max (logical or, and the bytes stay 0 or 1); Avg over bool throws UsageError
// naming `collective`. Other dtypes keep `op`. Call it before any world-of-one shortcut, so a bad
// op fails on one rank as it would on many.
ReduceOp reduce_op_for(at::ScalarType dtype, ReduceOp op, const char* collective);

}  // namespace xlaunch
