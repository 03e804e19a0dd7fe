#include "comm/threaded_communicator.h"

#include "xlaunch/error.h"

namespace xlaunch {

void check_cpu_collective_tensor(const at::Tensor& t, const char* what) {
  if (!t.defined()) throw UsageError(std::string(what) + ": the tensor is undefined");
  if (!t.device().is_cpu())
    throw UsageError(std::string(what) + ": the CPU communicator got a tensor on " + t.device().str() +
                     "; CUDA tensors go through the NCCL communicator");
  if (!t.is_contiguous()) throw UsageError(std::string(what) + ": the tensor must be contiguous");
}

void check_chunk_overlap(const at::Tensor& whole, const at::Tensor& part, int rank, const char* what,
                         const char* whole_name, const char* part_name) {
  const auto* w = static_cast<const char*>(whole.data_ptr());
  const auto* p = static_cast<const char*>(part.data_ptr());
  const int64_t part_bytes = part.numel() * part.element_size();
  const int64_t whole_bytes = whole.numel() * whole.element_size();
  if (part_bytes == 0 || p + part_bytes <= w || w + whole_bytes <= p) return;  // apart
  if (p == w + rank * part_bytes) return;  // exactly this rank's chunk
  const int64_t n = part.numel();
  throw UsageError(std::string(what) + " on rank " + std::to_string(rank) + ": `" + part_name + "` overlaps `" +
                   whole_name + "` but is not this rank's chunk of it (elements [" + std::to_string(rank * n) + ", " +
                   std::to_string((rank + 1) * n) + ")); pass exactly that chunk, " + whole_name + ".narrow(0, " +
                   std::to_string(rank * n) + ", " + std::to_string(n) + "), or a tensor of its own");
}

std::shared_ptr<Work> ThreadedCommunicator::allreduce_async(at::Tensor t, ReduceOp op) {
  check_cpu_collective_tensor(t, "allreduce");
  op = reduce_op_for(t.scalar_type(), op, "allreduce");
  if (size() == 1) return completed_work();
  return thread_->enqueue(CollectiveInfo::of("allreduce", t), [this, t, op]() mutable { run_allreduce(t, op); });
}

std::shared_ptr<Work> ThreadedCommunicator::broadcast_async(at::Tensor t, int root) {
  check_cpu_collective_tensor(t, "broadcast");
  if (root < 0 || root >= size())
    throw UsageError("broadcast: root " + std::to_string(root) + " is not a rank of a world of " +
                     std::to_string(size()));
  if (size() == 1) return completed_work();
  return thread_->enqueue(CollectiveInfo::of("broadcast", t), [this, t, root]() mutable { run_broadcast(t, root); });
}

std::shared_ptr<Work> ThreadedCommunicator::allgather_async(at::Tensor in, at::Tensor out) {
  check_cpu_collective_tensor(in, "allgather");
  check_cpu_collective_tensor(out, "allgather");
  if (out.numel() != in.numel() * size() || out.scalar_type() != in.scalar_type())
    throw UsageError("allgather: the output must hold world_size * input elements of the input's dtype");
  check_chunk_overlap(out, in, rank(), "allgather", "out", "in");
  if (size() == 1) {
    out.view(-1).copy_(in.view(-1));
    return completed_work();
  }
  return thread_->enqueue(CollectiveInfo::of("allgather", in), [this, in, out]() mutable { run_allgather(in, out); });
}

std::shared_ptr<Work> ThreadedCommunicator::reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) {
  check_cpu_collective_tensor(in, "reduce_scatter");
  check_cpu_collective_tensor(out, "reduce_scatter");
  check_reduce_scatter_args(*this, in, out);
  check_chunk_overlap(in, out, rank(), "reduce_scatter", "in", "out");
  op = reduce_op_for(in.scalar_type(), op, "reduce_scatter");
  if (size() == 1) {
    out.view(-1).copy_(in.view(-1));
    return completed_work();
  }
  return thread_->enqueue(CollectiveInfo::of("reduce_scatter", in),
                          [this, in, out, op]() mutable { run_reduce_scatter(in, out, op); });
}

std::shared_ptr<Work> ThreadedCommunicator::barrier_async() {
  if (size() == 1) return completed_work();
  return thread_->enqueue(CollectiveInfo{"barrier"}, [this] { run_barrier(); });
}

}  // namespace xlaunch
