// The ZeRO stages (sharded data parallelism, docs/memory.md), one row per stage built, shared by
// the config's check of ddp.zero_stage (xlaunch/settings.h), the launcher's report and advice, and
// the runtime, where stage N's strategy is made by make_zero_stage_N (runtime/src/ddp/stages/
// stageN.cpp, runtime/src/ddp/stage_strategy.h). Adding a stage: its file and its row here.
//
// The file, the XLAUNCH_ZERO_STAGE variable and DeepSpeed spell a stage as its number, so the
// settings carry an int; code that asks what a stage does asks these functions, not the number.
//
// Header-only, free of torch and MPI.
#pragma once

#include <cstddef>
#include <iterator>
#include <string>

// X(number, enumerator, what it shards); expand with a macro of three arguments.
// clang-format off
#define XLAUNCH_ZERO_STAGES(X)                                               \
  X(0, kReplicated, "no sharding")                                           \
  X(1, kOptimizerState, "optimizer state sharded")                           \
  X(2, kGradients, "optimizer state and gradients sharded")                  \
  X(3, kParameters, "optimizer state, gradients and parameters sharded")
// clang-format on

namespace xlaunch {

#define XLAUNCH_ZERO_STAGE_ENUMERATOR(number, name, meaning) name = number,
enum class ZeroStage : int { XLAUNCH_ZERO_STAGES(XLAUNCH_ZERO_STAGE_ENUMERATOR) };
#undef XLAUNCH_ZERO_STAGE_ENUMERATOR

struct ZeroStageInfo {
  int stage;
  const char* meaning;
};

#define XLAUNCH_ZERO_STAGE_INFO(number, name, meaning) ZeroStageInfo{number, meaning},
inline constexpr ZeroStageInfo kZeroStages[] = {XLAUNCH_ZERO_STAGES(XLAUNCH_ZERO_STAGE_INFO)};
#undef XLAUNCH_ZERO_STAGE_INFO

// Whether `stage` is a row of the table.
inline bool is_zero_stage(int stage) {
  for (const ZeroStageInfo& row : kZeroStages)
    if (row.stage == stage) return true;
  return false;
}

// Each rank keeps and steps only its shard of the optimizer state (stages 1 and up).
inline bool shards_optimizer_state(int stage) { return stage >= static_cast<int>(ZeroStage::kOptimizerState); }
// The gradients are reduce-scattered, each rank keeping its shard (stages 2 and up).
inline bool shards_gradients(int stage) { return stage >= static_cast<int>(ZeroStage::kGradients); }

// The parameters too: each rank keeps its shard of them between uses, and a unit of the model is
// gathered for its forward and its backward (stage 3, FSDP's FULL_SHARD).
inline bool shards_parameters(int stage) { return stage >= static_cast<int>(ZeroStage::kParameters); }

// "0, 1 or 2"; with meanings, "0 (no sharding), 1 (optimizer state sharded) or 2 (...)".
inline std::string zero_stage_choices(bool with_meanings = false) {
  std::string s;
  const size_t n = std::size(kZeroStages);
  for (size_t k = 0; k < n; ++k) {
    s += std::string(k == 0 ? "" : k + 1 == n ? " or " : ", ") + std::to_string(kZeroStages[k].stage);
    if (with_meanings) s += std::string(" (") + kZeroStages[k].meaning + ")";
  }
  return s;
}

}  // namespace xlaunch
