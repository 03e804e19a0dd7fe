// comm_hook fp16 and bf16: each floating-point bucket divided by the world size, cast to 16 bits,
// summed, and cast back (Communicator::allreduce_compressed_async): half the bytes of float32.
// Other buckets (integer, or already 16-bit) are averaged as they are.
#include "xlaunch/extend/comm_hook.h"

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

 private:
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
