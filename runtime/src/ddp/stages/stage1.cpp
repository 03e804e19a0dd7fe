// zero_stage 1: every bucket allreduced as at stage 0; each rank's prepared optimizer steps its
// shard of the bucket's flat parameters, which are then allgathered.
#include "ddp/stage_strategy.h"

namespace xlaunch {
namespace {

class Stage1 final : public ShardedStage {
 public:
  using ShardedStage::ShardedStage;
  int stage() const override { return 1; }
  at::Tensor add_bucket(ReducerBucket& bucket, bool last) override {
    shard_params(bucket);
    return ShardedStage::add_bucket(bucket, last);
  }
  // The optimizer steps views of the bucket: the gradients must be there.
  bool in_place_allowed() const override { return false; }
};

}  // namespace

std::unique_ptr<StageStrategy> make_zero_stage_1(StageContext ctx) { return std::make_unique<Stage1>(ctx); }

}  // namespace xlaunch
