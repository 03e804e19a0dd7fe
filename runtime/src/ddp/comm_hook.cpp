#include "xlaunch/extend/comm_hook.h"

#include "xlaunch/error.h"

namespace xlaunch {

std::unique_ptr<CommHook> make_comm_hook(const ReducerOptions& options) {
  using Factory = std::unique_ptr<CommHook> (*)(const ReducerOptions&);
  struct Row {
    const char* name;
    Factory make;
  };
#define XLAUNCH_COMM_HOOK_ROW(name, meaning) Row{#name, &make_comm_hook_##name},
  static constexpr Row kRows[] = {XLAUNCH_COMM_HOOKS(XLAUNCH_COMM_HOOK_ROW)};
#undef XLAUNCH_COMM_HOOK_ROW
  for (const Row& row : kRows)
    if (options.comm_hook == row.name) return row.make(options);
  std::string names;
  for (const Row& row : kRows) names += std::string(names.empty() ? "" : ", ") + row.name;
  throw UsageError("comm_hook '" + options.comm_hook + "' is not one of " + names +
                   "; set ddp.comm_hook in the config (XLAUNCH_COMM_HOOK)");
}

std::shared_ptr<Work> CommHook::start_reduce_scatter(const GradBucket& bucket, at::Tensor out) {
  return (bucket.shard_comm ? bucket.shard_comm : bucket.comm)->reduce_scatter_async(bucket.buffer, std::move(out), ReduceOp::Avg);
}

NamedTensors CommHook::state_for_world(NamedTensors saved, int saved_world, int world, std::string* note) const {
  note->clear();
  if (saved_world == world) return saved;
  if (!saved.empty())
    *note = "the hook's state belongs to a job of " + std::to_string(saved_world) + " processes and restarts";
  return {};
}

std::string CommHook::state_mismatch(const NamedTensors& saved) const {
  if (saved.empty()) return "";
  return "'" + saved.front().first + "' is not part of this hook's state";
}

}  // namespace xlaunch
