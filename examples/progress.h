// A per-epoch progress bar for the main process: samples per second, the running loss and the
// time left. On a terminal it is redrawn in place (\r, at most 10 times a second); when output
// goes to a file or a pipe (CI logs, `xlaunch run ... | tee`) it prints a plain line at every
// tenth of the epoch instead, so logs stay readable.
//
//   ProgressBar bar("epoch 1/3", total_samples, /*enabled=*/acc.is_main_process());
//   for (...) { ...; bar.update(samples_so_far, [&] { return running_loss(); }); }
//   bar.finish(samples_so_far, running_loss());
//
// A disabled bar (the other ranks) prints nothing, so ranks never interleave. The loss is a
// callback so that reading it (a device synchronisation on a GPU) happens only when a line is
// drawn, not at every step. No torch dependency.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

namespace xlaunch::examples {

class ProgressBar {
 public:
  // total: the samples of the whole epoch (all ranks). interactive: redraw in place; by default
  // when the output reaches a terminal (under mpirun: when mpirun's does).
  ProgressBar(std::string label, int64_t total, bool enabled, FILE* out = stdout);
  ProgressBar(std::string label, int64_t total, bool enabled, bool interactive, FILE* out);

  // done: samples processed so far (all ranks). Draws when it is time to; calls loss() only then.
  void update(int64_t done, const std::function<double()>& loss);
  // Draws the final state and ends the line.
  void finish(int64_t done, double loss);

  // The text of one line (no \r or \n), for given numbers; pure, for tests and the docs.
  static std::string format(const std::string& label, int64_t done, int64_t total, double seconds, double loss);

 private:
  void draw(int64_t done, double loss, bool final_line);

  std::string label_;
  int64_t total_;
  bool enabled_;
  bool interactive_;
  FILE* out_;
  std::chrono::steady_clock::time_point start_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_{};
  int last_tenth_ = 0;
  size_t last_width_ = 0;
};

}  // namespace xlaunch::examples
