#include "subcommand.h"

namespace xlaunch::launcher {

namespace {
std::vector<Subcommand>& registry() {
  static std::vector<Subcommand> r;
  return r;
}
}  // namespace

bool register_subcommand(const Subcommand& s) {
  registry().push_back(s);
  return true;
}

const std::vector<Subcommand>& registered_subcommands() { return registry(); }

}  // namespace xlaunch::launcher
