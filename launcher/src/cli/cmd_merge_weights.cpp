// `xlaunch merge-weights CHECKPOINT OUT [--overwrite] [--max_shard_size SIZE]`: the full model(s) of
// a checkpoint as safetensors, as `accelerate merge-weights`. Unpickling the checkpoint needs torch,
// which xlaunch never links, so this execs xlaunch_merge_weights (launcher/merge_weights/), found
// next to the xlaunch binary as `xlaunch test` finds its self-test, with the words given after
// `merge-weights` unchanged: its options, its --help and its messages are that program's.
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>

#include "cli/subcommand.h"
#include "launch/launch_error.h"

namespace xlaunch::launcher {
namespace {

constexpr const char* kMergeWeightsName = "xlaunch_merge_weights";

int merge_weights(const std::vector<std::string>& words, const std::string& self_exe) {
  const std::string path = self_exe.substr(0, self_exe.rfind('/') + 1) + kMergeWeightsName;
  if (access(path.c_str(), X_OK) != 0)
    throw LaunchError(std::string(kMergeWeightsName) + " not found next to " + self_exe +
                      ": build it (cmake --build BUILD_DIR --target xlaunch_merge_weights), or install it beside xlaunch");
  std::vector<std::string> args = {path};
  args.insert(args.end(), words.begin(), words.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(path.c_str(), argv.data());
  throw LaunchError("cannot run " + path + ": " + std::strerror(errno));
}

}  // namespace

Runner setup_merge_weights(CLI::App* cmd) {
  // Every word goes to xlaunch_merge_weights, --help included.
  cmd->allow_extras();
  cmd->set_help_flag();
  cmd->footer("Usage: xlaunch merge-weights CHECKPOINT OUT [--overwrite] [--max_shard_size SIZE]\n"
              "Writes model 0 as OUT/model.safetensors, model i as OUT/model_<i>.safetensors; "
              "`xlaunch merge-weights --help` says more.");
  return [cmd](const Invocation& inv) { return merge_weights(cmd->remaining(), inv.self_exe); };
}

}  // namespace xlaunch::launcher
