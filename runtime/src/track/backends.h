// The backends log_with names, each made for a run directory (<project_dir>/<project_name>).
// Each constructor opens (creating) what it writes, so that a directory that cannot be written is
// refused at init_trackers: it throws WriteError naming the path and the reason.
#pragma once

#include <memory>
#include <string>

#include "track/backend.h"

namespace xlaunch::track {

// events.out.tfevents.<seconds>.<host>.<pid>.<n> in run_dir: TFRecord-framed Event protocol
// buffers (masked CRC-32C), as TensorBoard reads them. A new file per process; each begins with
// file_version "brain.Event:2" and a SessionLog START at RunStart::first_step.
std::unique_ptr<Backend> make_tensorboard_backend(const std::string& run_dir);
// One JSON object per record in `path` (run_dir/metrics.jsonl):
//   {"step": 12, "wall_time": 1733300000.25, "train/loss": 0.5, "lr": 0.1}
// NaN and infinities as Python's json writes them (NaN, Infinity, -Infinity).
std::unique_ptr<Backend> make_jsonl_backend(const std::string& path);
// run_dir/metrics.csv (the user's names) and run_dir/xlaunch.csv (the utilization, names
// "xlaunch/..."): columns step, wall_time and the names of the first record, fixed from then on.
std::unique_ptr<Backend> make_csv_backend(const std::string& run_dir);

}  // namespace xlaunch::track
