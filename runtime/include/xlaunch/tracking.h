// Experiment tracking (docs/tracking.md): what acc.init_trackers / acc.log take. The Accelerator's
// calls are in accelerator.h; the backends (TensorBoard event files, JSONL, CSV) write on a thread
// of their own, on the main process only.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>

namespace xlaunch {

// One hyperparameter of init_trackers' config: a number, a bool or a string. Its own type rather
// than a std::variant, so that a string literal stays a string (a variant would take it as bool).
class HParam {
 public:
  enum class Kind { Number, Bool, String };
  HParam(bool b) : kind_(Kind::Bool), number_(b ? 1 : 0) {}
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T> && !std::is_same_v<T, bool>>>
  HParam(T v) : kind_(Kind::Number), number_(static_cast<double>(v)) {}
  HParam(const char* s) : kind_(Kind::String), text_(s) {}
  HParam(std::string s) : kind_(Kind::String), text_(std::move(s)) {}

  Kind kind() const { return kind_; }
  double number() const { return number_; }  // Number; Bool as 0 or 1
  const std::string& text() const { return text_; }  // String
  // As a person reads it: 0.001, true, "adamw" without quotes.
  std::string to_string() const;

 private:
  Kind kind_;
  double number_ = 0;
  std::string text_;
};

using HParams = std::map<std::string, HParam>;
// What acc.log writes: names to numbers. Names are TensorBoard tags ("train/loss"); the order
// written is the names' order.
using LogValues = std::map<std::string, double>;

// acc.log(values, step, reduce): None writes the main process's values as they are (the others'
// calls do nothing); Mean, Sum and Max reduce every rank's values first (one collective per call,
// so every rank must call it, with the same names).
enum class LogReduce { None, Mean, Sum, Max };

}  // namespace xlaunch
