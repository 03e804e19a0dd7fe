// The one table of transforms by Kornia's names (transform.h). Built on first use, so a
// transform's file may register itself during static initialisation, in any order.
#include <mutex>
#include <utility>

#include "xlaunch/augment/transform.h"
#include "xlaunch/error.h"

namespace xlaunch::augment {
namespace {

struct Registry {
  std::mutex mutex;
  std::vector<std::pair<std::string, Factory>> rows;
};

Registry& registry() {
  static Registry r;
  return r;
}

std::string names_of(const Registry& r) {
  std::string out;
  for (const auto& row : r.rows) out += (out.empty() ? "" : ", ") + row.first;
  return out.empty() ? "none" : out;
}

}  // namespace

void register_transform(const std::string& name, Factory factory) {
  if (name.empty() || !factory) {
    throw UsageError("augment::register_transform: give a non-empty name and a factory (got name '" + name + "'" +
                     (factory ? "" : " and an empty factory") + ")");
  }
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  for (const auto& row : r.rows) {
    if (row.first == name) {
      throw UsageError("augment::register_transform: a transform is already registered as '" + name +
                       "' (registered: " + names_of(r) + "); register yours under another name");
    }
  }
  r.rows.emplace_back(name, std::move(factory));
}

std::shared_ptr<Transform> make(const std::string& name, const Args& args) {
  Factory factory;
  {
    Registry& r = registry();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& row : r.rows) {
      if (row.first == name) factory = row.second;
    }
    if (!factory) {
      throw UsageError("augment::make: no transform is registered as '" + name + "' (registered: " + names_of(r) +
                       "); spell it as Kornia's class, or register yours with augment::register_transform");
    }
  }
  std::shared_ptr<Transform> t = factory(args);
  if (!t) throw UsageError("augment::make: the factory registered as '" + name + "' returned no transform");
  return t;
}

std::vector<std::string> registered() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::vector<std::string> names;
  for (const auto& row : r.rows) names.push_back(row.first);
  return names;
}

}  // namespace xlaunch::augment
