// comm_hook fp16 and bf16: each floating-point bucket divided by the world size, cast to 16 bits,
// summed, and cast back (Communicator::allreduce_compressed_async): half the bytes of float32.
// Other buckets (integer, or already 16-bit) are averaged as they are.
#include "xlaunch/extend/comm_hook.h"

#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/scalar_tensor.h>

namespace xlaunch {
namespace {

class SixteenBitHook final : public CommHook {
 public:
  explicit SixteenBitHook(at::ScalarType wire) : wire_(wire) {}
  std::shared_ptr<Work> start(const GradBucket& bucket) override {
    const at::ScalarType t = bucket.buffer.scalar_type();
    if (t == at::kFloat || t == at::kDouble)
      return bucket.comm->allreduce_compressed_async({bucket.buffer}, ReduceOp::Avg, wire_);
    return bucket.comm->allreduce_async(bucket.buffer, ReduceOp::Avg);
  }
  std::string reduce_scatter_refusal() const override { return ""; }
  // Stage 2: divided by W and cast in one pass, reduce-scattered as 16-bit sums, cast back into out.
  std::shared_ptr<Work> start_reduce_scatter(const GradBucket& bucket, at::Tensor out) override {
    const at::ScalarType t = bucket.buffer.scalar_type();
    if ((t != at::kFloat && t != at::kDouble) || bucket.comm->size() == 1)
      return CommHook::start_reduce_scatter(bucket, std::move(out));
    // Divided by the job's size: with ddp.shard_group machine the sums also run over the replicas.
    at::Tensor on_wire = at::empty({bucket.buffer.numel()}, bucket.buffer.options().dtype(wire_));
    at::div_out(on_wire, bucket.buffer, at::scalar_tensor(static_cast<double>(bucket.comm->size())));
    at::Tensor out_wire = at::empty({out.numel()}, out.options().dtype(wire_));
    auto inner = (bucket.shard_comm ? bucket.shard_comm : bucket.comm)->reduce_scatter_async(on_wire, out_wire, ReduceOp::Sum);
    return std::make_shared<CastBack>(std::move(inner), std::move(on_wire), std::move(out_wire), std::move(out));
  }

 private:
  // Waits for the 16-bit reduce-scatter, then casts its chunk into the caller's output.
  class CastBack final : public Work {
   public:
    CastBack(std::shared_ptr<Work> inner, at::Tensor in, at::Tensor wire, at::Tensor out)
        : inner_(std::move(inner)), in_(std::move(in)), wire_(std::move(wire)), out_(std::move(out)) {}
    void wait() override {
      inner_->wait();
      out_.copy_(wire_);
      in_ = at::Tensor();
    }

   private:
    std::shared_ptr<Work> inner_;
    at::Tensor in_, wire_, out_;
  };
  at::ScalarType wire_;
};

}  // namespace

std::unique_ptr<CommHook> make_comm_hook_fp16(const ReducerOptions&) {
  return std::make_unique<SixteenBitHook>(at::kHalf);
}

std::unique_ptr<CommHook> make_comm_hook_bf16(const ReducerOptions&) {
  return std::make_unique<SixteenBitHook>(at::kBFloat16);
}

}  // namespace xlaunch
