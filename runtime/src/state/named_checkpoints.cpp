#include "state/named_checkpoints.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>

#include "state/durable_files.h"
#include "xlaunch/error.h"

namespace xlaunch::checkpoint {
namespace {

constexpr const char* kPrefix = "checkpoint_";

// "checkpoint_<digits>" -> step; -1 for any other name.
int64_t step_of(const std::string& name) {
  const std::string prefix = kPrefix;
  if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) return -1;
  const std::string digits = name.substr(prefix.size());
  if (digits.size() > 18 || !std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); }))
    return -1;
  return std::stoll(digits);
}

// A temporary of an interrupted save_state: checkpoint_<step>.tmp-XXXXXX (checkpoint_dir.cpp).
bool is_temporary(const std::string& name) {
  const auto dot = name.find(".tmp-");
  return dot != std::string::npos && step_of(name.substr(0, dot)) >= 0 && name.size() == dot + 11;
}

bool mine(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid == ::geteuid();
}


}  // namespace

std::string checkpoints_dir(const std::string& project_dir) {
  if (project_dir.empty())
    throw UsageError("save_state() and load_state(\"latest\") name checkpoints after the project directory, and "
                     "none is set: set project_dir in the config (XLAUNCH_PROJECT_DIR), or pass a directory "
                     "to save_state(dir) / load_state(dir)");
  return project_dir + (project_dir.back() == '/' ? "" : "/") + "checkpoints";
}

std::string named_path(const std::string& project_dir, int64_t step) {
  return checkpoints_dir(project_dir) + "/" + kPrefix + std::to_string(step);
}

std::vector<Named> list_named(const std::string& project_dir) {
  const std::string dir = checkpoints_dir(project_dir);
  std::vector<Named> out;
  for (const std::string& name : durable::entries(dir)) {
    const int64_t step = step_of(name);
    const std::string path = dir + "/" + name;
    if (step < 0 || !mine(path)) continue;
    out.push_back({step, path, ::access((path + "/MANIFEST").c_str(), F_OK) == 0});
  }
  std::sort(out.begin(), out.end(), [](const Named& a, const Named& b) { return a.step < b.step; });
  return out;
}

Files read_latest(const std::string& project_dir, std::string* chosen,
                  const std::function<void(const std::string&, const std::string&)>& warn, const FileFilter& only,
                  ReadInfo* info) {
  const std::vector<Named> all = list_named(project_dir);
  for (auto it = all.rbegin(); it != all.rend(); ++it) {
    try {
      Files files = read_verified(it->path, nullptr, only, info);
      if (chosen) *chosen = it->path;
      return files;
    } catch (const UsageError& e) {
      warn(it->path, e.what());
    }
  }
  throw UsageError("load_state(\"latest\"): no complete checkpoint in " + checkpoints_dir(project_dir) +
                   (all.empty() ? " (there is none: save_state() writes them there)"
                                : " (the " + std::to_string(all.size()) + " there are torn; see the warnings above)"));
}

std::vector<std::string> rotate(const std::string& project_dir, int64_t keep, const std::string& newest) {
  const std::string dir = checkpoints_dir(project_dir);
  std::vector<std::string> removed;
  const auto remove = [&](const std::string& path) {
    if (path == newest) return;
    remove_directory(path);
    removed.push_back(path);
  };
  for (const std::string& name : durable::entries(dir))
    if (is_temporary(name) && mine(dir + "/" + name)) remove(dir + "/" + name);
  if (keep <= 0) return removed;
  const std::vector<Named> all = list_named(project_dir);
  std::vector<const Named*> complete;
  for (const auto& n : all)
    if (n.complete) complete.push_back(&n);
  if (static_cast<int64_t>(complete.size()) <= keep) return removed;
  const int64_t oldest_kept = complete[complete.size() - keep]->step;
  for (const auto& n : all)
    if (n.step < oldest_kept) remove(n.path);
  return removed;
}

}  // namespace xlaunch::checkpoint
