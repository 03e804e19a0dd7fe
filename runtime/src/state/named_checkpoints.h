// Checkpoints that name, rotate and find themselves (docs/checkpointing.md, "Named checkpoints"):
// save_state() without a path writes <project_dir>/checkpoints/checkpoint_<step>, keeps the newest
// checkpoint.total_limit of them, and load_state("latest") takes the newest complete one.
//
// The layout is Accelerate's automatic_checkpoint_naming, with the optimizer step in the name
// instead of a save counter, so the name says where the run was and sorts by it.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "state/checkpoint_dir.h"

namespace xlaunch::checkpoint {

// <project_dir>/checkpoints
std::string checkpoints_dir(const std::string& project_dir);
// <project_dir>/checkpoints/checkpoint_<step>
std::string named_path(const std::string& project_dir, int64_t step);

struct Named {
  int64_t step = 0;
  std::string path;
  bool complete = false;  // has its MANIFEST (files are verified only when loaded)
};
// The checkpoint_<step> directories under <project_dir>/checkpoints, oldest first (by step). Other
// entries (temporaries of an interrupted save, the user's own files) are not listed.
std::vector<Named> list_named(const std::string& project_dir);

// Reads the newest checkpoint under <project_dir>/checkpoints that is complete and verifies
// (read_verified), skipping each torn one with a call to warn(path, why). Sets *chosen to its path.
// Throws UsageError naming the directory when there is none (none at all, or all torn). `only` and
// `info` as read_verified's.
Files read_latest(const std::string& project_dir, std::string* chosen,
                  const std::function<void(const std::string& path, const std::string& why)>& warn,
                  const FileFilter& only = {}, ReadInfo* info = nullptr);

// After a complete save: removes the oldest complete checkpoints beyond the newest `keep` (0: keep
// all), torn ones older than the oldest kept, and temporaries of interrupted saves (this user's,
// not the one being written: none is, as this runs after the save). Never removes `newest`.
// Returns the paths removed. A removal that fails throws Error naming the path.
std::vector<std::string> rotate(const std::string& project_dir, int64_t keep, const std::string& newest);

}  // namespace xlaunch::checkpoint
