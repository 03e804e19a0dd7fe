// The communication hooks (ddp.comm_hook, XLAUNCH_COMM_HOOK): how each gradient bucket travels,
// as PyTorch's DDP register_comm_hook. This table is the one list of them: the config validation
// (config/) takes the names and its error message from it, the reducer finds a hook's factory
// through it (make_comm_hook, xlaunch/extend/comm_hook.h), and the docs test checks
// docs/config-reference.md against it.
//
// Adding a hook: one row below (and its own settings' rows, if it has any), and one file in
// runtime/src/ddp/hooks/ that defines make_comm_hook_<name> (xlaunch/extend/comm_hook.h has the
// interface it implements); every file there is built.
//
// Header-only and free of torch, so the config library and the launcher include it.
#pragma once

#include <string>
#include <vector>

// The hooks, one row each: R(X, name, wire_fraction, one-line meaning), for a macro R that takes X.
// `name` is the config value and a C++ identifier. wire_fraction: the bytes the hook sends for each
// byte of float32 gradients, as the report counts them (1: as they are; 0: no fixed fraction, as a
// low-rank approximation's depends on each matrix's shape).
// clang-format off
#define XLAUNCH_COMM_HOOK_TABLE(R, X)                                                                            \
  R(X, none,     1.0, "averaged as it is, in the gradients' own type")                                                  \
  R(X, fp16,     0.5, "divided by the world size, cast to float16, summed, cast back: half the bytes")                  \
  R(X, bf16,     0.5, "divided by the world size, cast to bfloat16, summed, cast back: half the bytes")                 \
  R(X, powersgd, 0.0, "each weight matrix as two rank-r factors with error feedback (low rank), after "                 \
                      "ddp.powersgd_start_step exact steps")

// A hook's own settings: rows of the settings table's ddp section (xlaunch/settings.h explains the
// columns), declared here beside the hook that reads them and listed by the table in its place.
#define XLAUNCH_COMM_HOOK_SETTINGS(X, S)                                                                          \
  X(S, powersgd_rank, int, ENV(kPowerSgdRank, "XLAUNCH_POWERSGD_RANK", Int), "1", NO_CLI,                           \
    RANGE(v >= 1 && v <= 1024, "an integer from 1 to 1024",                                                         \
          "1 to 4 is usual: the rank of the approximation of each weight matrix"),                                   \
    ACC_AT(ddp.powersgd_rank), "rank of PowerSGD's approximation of each weight matrix")                            \
  X(S, powersgd_start_step, int, ENV(kPowerSgdStartStep, "XLAUNCH_POWERSGD_START_STEP", Int), "1000", NO_CLI,       \
    RANGE(v >= 0, "an integer >= 0", "0 compresses from the first step; PyTorch's default is 1000"),                 \
    ACC_AT(ddp.powersgd_start_step), "synced backward passes reduced exactly before PowerSGD starts")
// clang-format on

// XLAUNCH_COMM_HOOK(name, one-line meaning), one per hook. Expand with a macro of two arguments:
// XLAUNCH_COMM_HOOKS(MY_MACRO).
#define XLAUNCH_COMM_HOOK_NAME_MEANING(X, name, wire_fraction, meaning) X(name, meaning)
#define XLAUNCH_COMM_HOOKS(XLAUNCH_COMM_HOOK) XLAUNCH_COMM_HOOK_TABLE(XLAUNCH_COMM_HOOK_NAME_MEANING, XLAUNCH_COMM_HOOK)

namespace xlaunch {

struct CommHookInfo {
  const char* name;
  double wire_fraction;
  const char* meaning;
};

#define XLAUNCH_COMM_HOOK_INFO(X, name, wire_fraction, meaning) CommHookInfo{#name, wire_fraction, meaning},
inline constexpr CommHookInfo kCommHooks[] = {XLAUNCH_COMM_HOOK_TABLE(XLAUNCH_COMM_HOOK_INFO, _)};
#undef XLAUNCH_COMM_HOOK_INFO

// The row of the hook `name`; nullptr for a name that is none of them.
inline const CommHookInfo* find_comm_hook(const std::string& name) {
  for (const CommHookInfo& h : kCommHooks)
    if (name == h.name) return &h;
  return nullptr;
}

// The hooks' names, in table order: the values ddp.comm_hook accepts.
inline std::vector<std::string> comm_hook_names() {
  std::vector<std::string> out;
  for (const CommHookInfo& h : kCommHooks) out.emplace_back(h.name);
  return out;
}

}  // namespace xlaunch
