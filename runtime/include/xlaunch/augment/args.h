// Reading a factory's Kornia keyword arguments (transform.h's Args), with the messages every
// transform gives for a mistake: the transform, the argument, the value given and what is allowed.
//
//   Args args = {{"degrees", {15}}, {"p", {1}}};
//   ArgReader read("RandomAffine", args, {"degrees", "translate", "scale", "shear"});
//   Range degrees = read.symmetric("degrees", {0, 0}, 0, 360);  // 15 -> [-15, 15]
//   Options options = read.options(0.5);                          // p, same_on_batch
#pragma once

#include <string>
#include <vector>

#include "xlaunch/augment/transform.h"

namespace xlaunch::augment {

// A closed range [low, high] of a uniform draw.
struct Range {
  double low = 0;
  double high = 0;
};

class ArgReader {
 public:
  // Throws UsageError for an argument not in `known` (p and same_on_batch are always known),
  // listing the known ones.
  ArgReader(std::string transform, const Args& args, std::vector<std::string> known);

  bool has(const std::string& arg) const;
  // The argument's values (`fallback` when not given); UsageError unless it has between min_count
  // and max_count values.
  std::vector<double> values(const std::string& arg, std::vector<double> fallback, size_t min_count,
                             size_t max_count) const;
  // One number in [low, high] (`fallback` when not given).
  double number(const std::string& arg, double fallback, double low, double high) const;
  // Kornia's _range_bound: one number v >= 0 gives [-v, v] (the low end floored at `floor`, the
  // high end at most `high`); a pair (a, b) is the range itself, floor <= a <= b <= high.
  Range symmetric(const std::string& arg, std::vector<double> fallback, double floor, double high) const;
  // A pair (a, b) with low <= a <= b <= high, from `values` (the argument's, or a part of them:
  // `what` names it in messages, e.g. "scale[2:4]").
  Range pair(const std::string& what, const std::vector<double>& values, double low, double high) const;
  // p in [0, 1] (default `default_p`, Kornia's for the class) and same_on_batch (0 or 1).
  Options options(double default_p) const;

  // "RandomAffine: degrees = (-5) is out of range: " ... for messages of the transform's own checks.
  [[noreturn]] void fail(const std::string& arg, const std::vector<double>& values, const std::string& allowed) const;
  const std::string& transform() const { return transform_; }

 private:
  std::string transform_;
  const Args& args_;
};

}  // namespace xlaunch::augment
