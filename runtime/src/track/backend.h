// The interface every tracker backend implements (TensorBoard event files, JSONL, CSV), and what
// the tracker hands them. Backends are called on the tracker's writer thread only (tracker.h),
// one record at a time, in the order the training loop logged them; they never see the training
// thread. A write that fails throws WriteError; the tracker then stops that backend with one
// warning (a full disk stops logging, never training).
#pragma once

#include <cerrno>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "xlaunch/tracking.h"

namespace xlaunch::track {

// A write that failed: the path, what was being done, and errno (ENOSPC: the disk is full).
class WriteError : public std::runtime_error {
 public:
  WriteError(const std::string& what, int err) : std::runtime_error(what), err_(err) {}
  int err() const { return err_; }

 private:
  int err_;
};

struct Scalar {
  std::string tag;
  double value = 0;  // may be NaN or +-inf: written as the backend's format writes them
};

// TensorBoard's HistogramProto, already computed (bucket i counts the values in
// (bucket_limit[i-1], bucket_limit[i]]; the first bucket from min).
struct Histogram {
  std::string tag;
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> bucket_limit, bucket;
};

// How this process's part of the run begins: written once, before its first record.
struct RunStart {
  std::string project_name;
  HParams config;              // init_trackers' hyperparameters
  double wall_time = 0;        // seconds since the epoch, when init_trackers was called
  // The first step this process logs. Records of earlier processes of the run at this step or
  // later are orphans (logged after the checkpoint this process resumed from, or by a run that
  // restarted from scratch) and are dropped from what the run shows: TensorBoard by a SessionLog
  // START at this step, JSONL and CSV by rewriting their file without them.
  int64_t first_step = 0;
  std::string resumed_from;    // the checkpoint loaded, or "" for a fresh start
};

class Backend {
 public:
  virtual ~Backend() = default;
  // "tensorboard", "jsonl", "csv": as log_with names it.
  virtual std::string name() const = 0;
  // The file or directory it writes, for messages.
  virtual std::string where() const = 0;
  // Before this process's first record, and again when the process resumes from a checkpoint after
  // it wrote records (start.first_step then says which of them are orphans).
  virtual void begin(const RunStart& start) = 0;
  // On the training thread, before a record is queued: throws UsageError for a record this
  // backend refuses (CSV: a name that is not one of its columns), so that the mistake surfaces at
  // the acc.log call that made it. Must be safe against the writer thread's calls.
  virtual void admit(const std::vector<Scalar>& values) { (void)values; }
  // One acc.log call (or one utilization report): its values, all at `step`.
  virtual void scalars(int64_t step, double wall_time, const std::vector<Scalar>& values) = 0;
  // A backend without histograms (JSONL, CSV) ignores them.
  virtual void histogram(int64_t step, double wall_time, const Histogram& h) = 0;
  // Hands what is buffered to the operating system (no fsync: a crash of the machine may lose
  // the last records, never earlier ones). Called when the writer's queue runs empty and at the end.
  virtual void flush() = 0;
};

}  // namespace xlaunch::track
