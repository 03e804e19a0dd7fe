// The one table of transforms by Kornia's names (transform.h). Built on first use, so a
// transform's file may register itself during static initialisation, in any order.
#include <utility>

#include "name_registry.h"
#include "xlaunch/augment/transform.h"

namespace xlaunch::augment {
namespace {

NameRegistry<Factory>& registry() {
  static NameRegistry<Factory> r({"augment::register_transform: ", "augment::make: ", "name", "a", "transform",
                                  "spell it as Kornia's class, or register yours with augment::register_transform"});
  return r;
}

}  // namespace

void register_transform(const std::string& name, Factory factory) { registry().add(name, std::move(factory)); }

std::shared_ptr<Transform> make(const std::string& name, const Args& args) { return registry().make(name, args); }

std::vector<std::string> registered() { return registry().names(); }

}  // namespace xlaunch::augment
