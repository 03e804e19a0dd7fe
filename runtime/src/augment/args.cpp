// Reading Kornia keyword arguments, with one message shape for every mistake (args.h).
#include "xlaunch/augment/args.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "xlaunch/error.h"

namespace xlaunch::augment {
namespace {

std::string format(const std::vector<double>& values) {
  std::string out = "(";
  char buf[32];
  for (size_t i = 0; i < values.size(); ++i) {
    std::snprintf(buf, sizeof buf, "%s%g", i ? ", " : "", values[i]);
    out += buf;
  }
  return out + ")";
}

std::string interval(double low, double high) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "[%g, %g]", low, high);
  return buf;
}

}  // namespace

ArgReader::ArgReader(std::string transform, const Args& args, std::vector<std::string> known)
    : transform_(std::move(transform)), args_(args) {
  known.push_back("p");
  known.push_back("same_on_batch");
  for (const auto& [name, values] : args) {
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    std::string list;
    for (const auto& k : known) list += (list.empty() ? "" : ", ") + k;
    throw UsageError(transform_ + ": no argument '" + name + "' (its arguments: " + list +
                     "); spell them as Kornia's keyword arguments");
  }
}

void ArgReader::fail(const std::string& arg, const std::vector<double>& values, const std::string& allowed) const {
  throw UsageError(transform_ + ": " + arg + " = " + format(values) + " is not allowed: " + allowed);
}

bool ArgReader::has(const std::string& arg) const { return args_.count(arg) != 0; }

std::vector<double> ArgReader::values(const std::string& arg, std::vector<double> fallback, size_t min_count,
                                      size_t max_count) const {
  auto it = args_.find(arg);
  if (it == args_.end()) return fallback;
  const std::vector<double>& v = it->second;
  if (v.size() < min_count || v.size() > max_count) {
    fail(arg, v, min_count == max_count ? "give " + std::to_string(min_count) + " number(s)"
                                        : "give " + std::to_string(min_count) + " to " + std::to_string(max_count) +
                                              " numbers");
  }
  for (double x : v) {
    if (!std::isfinite(x)) fail(arg, v, "the numbers must be finite");
  }
  return v;
}

double ArgReader::number(const std::string& arg, double fallback, double low, double high) const {
  const double v = values(arg, {fallback}, 1, 1)[0];
  if (!(v >= low && v <= high)) fail(arg, {v}, "give a number in " + interval(low, high));
  return v;
}

Range ArgReader::pair(const std::string& what, const std::vector<double>& v, double low, double high) const {
  if (v.size() != 2 || !(low <= v[0] && v[0] <= v[1] && v[1] <= high)) {
    char buf[128];
    std::snprintf(buf, sizeof buf, "give (min, max) with %g <= min <= max <= %g", low, high);
    fail(what, v, buf);
  }
  return {v[0], v[1]};
}

Range ArgReader::symmetric(const std::string& arg, std::vector<double> fallback, double floor, double high) const {
  const std::vector<double> v = values(arg, std::move(fallback), 1, 2);
  if (v.size() == 2) return pair(arg, v, floor, high);
  if (!(v[0] >= 0 && v[0] <= high)) {
    fail(arg, v, "one number v in " + interval(0, high) + " gives the range [-v, v]; or give (min, max)");
  }
  return {std::max(-v[0], floor), v[0]};
}

Options ArgReader::options(double default_p) const {
  Options o;
  o.p = number("p", default_p, 0, 1);
  const double same = number("same_on_batch", 0, 0, 1);
  if (same != 0 && same != 1) fail("same_on_batch", {same}, "give 0 (false) or 1 (true)");
  o.same_on_batch = same == 1;
  return o;
}

}  // namespace xlaunch::augment
