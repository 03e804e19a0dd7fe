// The communication hooks (ddp.comm_hook, XLAUNCH_COMM_HOOK): how each gradient bucket travels,
// as PyTorch's DDP register_comm_hook. This table is the one list of them: the config validation
// (config/) takes the names and its error message from it, the reducer finds a hook's factory
// through it (make_comm_hook, xlaunch/extend/comm_hook.h), and the docs test checks
// docs/config-reference.md against it.
//
// Adding a hook: one row below, and one file in runtime/src/ddp/hooks/ that defines
// make_comm_hook_<name> (xlaunch/extend/comm_hook.h has the interface it implements); every file
// there is built.
//
// Header-only and free of torch, so the config library and the launcher include it.
#pragma once

#include <string>
#include <vector>

// XLAUNCH_COMM_HOOK(name, one-line meaning), one per hook; `name` is the config value and a C++
// identifier. Expand with a macro of two arguments: XLAUNCH_COMM_HOOKS(MY_MACRO).
// clang-format off
#define XLAUNCH_COMM_HOOKS(XLAUNCH_COMM_HOOK)                                                                   \
  XLAUNCH_COMM_HOOK(none,     "averaged as it is, in the gradients' own type")                                   \
  XLAUNCH_COMM_HOOK(fp16,     "divided by the world size, cast to float16, summed, cast back: half the bytes")   \
  XLAUNCH_COMM_HOOK(bf16,     "divided by the world size, cast to bfloat16, summed, cast back: half the bytes")  \
  XLAUNCH_COMM_HOOK(powersgd, "each weight matrix as two rank-r factors with error feedback (low rank), after "  \
                              "ddp.powersgd_start_step exact steps")
// clang-format on

namespace xlaunch {

struct CommHookInfo {
  const char* name;
  const char* meaning;
};

#define XLAUNCH_COMM_HOOK_INFO(name, meaning) CommHookInfo{#name, meaning},
inline constexpr CommHookInfo kCommHooks[] = {XLAUNCH_COMM_HOOKS(XLAUNCH_COMM_HOOK_INFO)};
#undef XLAUNCH_COMM_HOOK_INFO

// The hooks' names, in table order: the values ddp.comm_hook accepts.
inline std::vector<std::string> comm_hook_names() {
  std::vector<std::string> out;
  for (const CommHookInfo& h : kCommHooks) out.emplace_back(h.name);
  return out;
}

}  // namespace xlaunch
