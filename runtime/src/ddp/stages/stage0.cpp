// zero_stage 0: every bucket allreduced, the optimizer steps every parameter; nothing is sharded.
#include "ddp/stage_strategy.h"

namespace xlaunch {
namespace {

// The defaults of StageStrategy are this stage's.
class Stage0 final : public StageStrategy {
 public:
  using StageStrategy::StageStrategy;
  int stage() const override { return 0; }
};

}  // namespace

std::unique_ptr<StageStrategy> make_zero_stage_0(StageContext ctx) { return std::make_unique<Stage0>(ctx); }

}  // namespace xlaunch
