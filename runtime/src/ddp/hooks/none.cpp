// comm_hook none: each bucket averaged as it is, in one allreduce, or where its gradients lie.
#include "xlaunch/extend/comm_hook.h"

namespace xlaunch {
namespace {

class NoHook final : public CommHook {
 public:
  bool reduces_in_place() const override { return true; }
  std::string reduce_scatter_refusal() const override { return ""; }
  std::shared_ptr<Work> start(const GradBucket& bucket) override {
    if (!bucket.in_place.empty()) return bucket.comm->allreduce_coalesced_async(bucket.in_place, ReduceOp::Avg);
    return bucket.comm->allreduce_async(bucket.buffer, ReduceOp::Avg);
  }
};

}  // namespace

std::unique_ptr<CommHook> make_comm_hook_none(const ReducerOptions&) { return std::make_unique<NoHook>(); }

}  // namespace xlaunch
