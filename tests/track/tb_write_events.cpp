// Writes a TensorBoard run through make_tensorboard_backend, for tensorboard_oracle_test.py to read
// back with TensorBoard's own reader. Every value is a function of (part, tag, step), written out
// again in the python test.
//
//   tb_write_events RUN_DIR first    part 1: a fresh start, steps 0..99
//   tb_write_events RUN_DIR resume   part 2: the next process, resumed at step 60 (its steps
//                                    60..129), then part 3: resumed again in the same process at
//                                    step 100 (steps 100..119)
//
// Each scalars() call carries all of that step's tags: "train/loss", "lr" (neither exact in
// float32), "special" (NaN, +-inf, float overflow and underflow, a subnormal) and, in part 1 only,
// "only_first". A histogram "weights/w" every 10 steps.
#include <cfloat>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>

#include "track/backends.h"

using namespace xlaunch::track;

namespace {

constexpr double kWallTime0 = 1733300000.0;

double special(int part, int64_t step) {
  const double inf = std::numeric_limits<double>::infinity();
  switch (step % 8) {
    case 0: return std::numeric_limits<double>::quiet_NaN();
    case 1: return inf;
    case 2: return -inf;
    case 3: return 1e39;    // past FLT_MAX: +inf as float32
    case 4: return -1e39;
    case 5: return 1e-46;   // under the smallest float32 subnormal: 0
    case 6: return 3e-40;   // a float32 subnormal
    default: return part * 1e10 + step / 7.0;
  }
}

std::vector<Scalar> values(int part, int64_t step) {
  std::vector<Scalar> v{{"train/loss", part / (step + 3.0)}, {"lr", 0.1 * step + 0.01 * part},
                        {"special", special(part, step)}};
  if (part == 1) v.push_back({"only_first", static_cast<double>(step)});
  return v;
}

Histogram histogram(int part, int64_t step) {
  Histogram h;
  h.tag = "weights/w";
  h.min = -static_cast<double>(step);
  h.max = step + part;
  h.num = step + 1;
  h.sum = step * 0.5 + part;
  h.sum_squares = static_cast<double>(step * step);
  h.bucket_limit = {-1, 0, 1, DBL_MAX};
  h.bucket = {1, 2, 3, static_cast<double>(step)};
  return h;
}

void log_steps(Backend& tb, int part, int64_t from, int64_t to) {
  for (int64_t step = from; step < to; ++step) {
    tb.scalars(step, kWallTime0 + step, values(part, step));
    if (step % 10 == 0) tb.histogram(step, kWallTime0 + step, histogram(part, step));
    if (step % 25 == 24) tb.flush();  // several flushes, as the tracker's writer does
  }
  tb.flush();
}

RunStart run_start(int64_t first_step, const std::string& resumed_from) {
  RunStart start;
  start.project_name = "oracle";
  start.config = {{"lr", 0.001},          {"batch_size", 64},       {"amp", true},
                  {"compile", false},     {"optimizer", "adamw"},  {"note", "a|b"},
                  {"tiny", 1e-300},       {"neg", -2.5},            {"seed", 123456789012}};
  start.wall_time = kWallTime0 + first_step;
  start.first_step = first_step;
  start.resumed_from = resumed_from;
  return start;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3 || (std::strcmp(argv[2], "first") != 0 && std::strcmp(argv[2], "resume") != 0)) {
    std::fprintf(stderr, "usage: %s RUN_DIR first|resume\n", argv[0]);
    return 2;
  }
  try {
    auto tb = make_tensorboard_backend(argv[1]);
    if (std::strcmp(argv[2], "first") == 0) {
      tb->begin(run_start(0, ""));
      log_steps(*tb, 1, 0, 100);
    } else {
      tb->begin(run_start(60, "checkpoint_60"));
      log_steps(*tb, 2, 60, 130);
      tb->begin(run_start(100, "checkpoint_100"));
      log_steps(*tb, 3, 100, 120);
    }
    std::printf("%s\n", tb->where().c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tb_write_events: %s\n", e.what());
    return 1;
  }
  return 0;
}
