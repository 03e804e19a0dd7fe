// One table of names to factories, for the extension points a user may add rows to while the
// program runs (augment::register_transform, rl::register_env): rows in the order registered, each
// name once, thread-safe, and every refusal a UsageError in the extension point's own words that
// lists the names registered. Keep one in a function-local static, so that rows registered during
// static initialisation find it built, whatever the order.
#pragma once

#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "xlaunch/error.h"

namespace xlaunch {

// What a registry's messages say, e.g. for the transforms: {"augment::register_transform: ",
// "augment::make: ", "name", "a", "transform", "spell it as Kornia's class, or register yours
// with augment::register_transform"}.
struct RegistryWords {
  const char* register_call;  // prefix of add()'s messages
  const char* make_call;      // prefix of make()'s messages
  const char* key;            // what a row is named by
  const char* article;        // "a" or "an", before `thing`
  const char* thing;          // what a factory makes
  const char* unknown_fix;    // how to mend an unknown name
};

template <class Factory>
class NameRegistry {
 public:
  using Row = std::pair<std::string, Factory>;

  explicit NameRegistry(RegistryWords words, std::vector<Row> rows = {}) : words_(words), rows_(std::move(rows)) {}

  // Adds a row; UsageError for an empty name or factory, and for a name already registered.
  void add(const std::string& name, Factory factory) {
    if (name.empty() || !factory) {
      throw UsageError(std::string(words_.register_call) + "give a non-empty " + words_.key + " and a factory (got " +
                       words_.key + " '" + name + "'" + (factory ? "" : " and an empty factory") + ")");
    }
    std::lock_guard<std::mutex> lock(mutex_);
    for (const Row& row : rows_) {
      if (row.first == name) {
        throw UsageError(std::string(words_.register_call) + words_.article + " " + words_.thing +
                         " is already registered as '" + name + "' (registered: " + listed() +
                         "); register yours under another " + words_.key);
      }
    }
    rows_.emplace_back(name, std::move(factory));
  }

  // What the factory registered as `name` makes of `args`; UsageError when no factory is registered
  // under that name, or it makes nothing. The factory runs outside the lock, so it may use the registry.
  template <class... Args>
  auto make(const std::string& name, const Args&... args) const {
    Factory factory;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const Row& row : rows_) {
        if (row.first == name) factory = row.second;
      }
      if (!factory) {
        throw UsageError(std::string(words_.make_call) + "no " + words_.thing + " is registered as '" + name +
                         "' (registered: " + listed() + "); " + words_.unknown_fix);
      }
    }
    auto made = factory(args...);
    if (!made) {
      throw UsageError(std::string(words_.make_call) + "the factory registered as '" + name + "' returned no " +
                       words_.thing);
    }
    return made;
  }

  // The names, in the order registered.
  std::vector<std::string> names() const {
    std::lock_guard<std::mutex> lock(mutex_);
    std::vector<std::string> out;
    for (const Row& row : rows_) out.push_back(row.first);
    return out;
  }

 private:
  // "a, b, c", or "none"; the caller holds mutex_.
  std::string listed() const {
    std::string out;
    for (const Row& row : rows_) out += (out.empty() ? "" : ", ") + row.first;
    return out.empty() ? "none" : out;
  }

  const RegistryWords words_;
  mutable std::mutex mutex_;
  std::vector<Row> rows_;
};

}  // namespace xlaunch
