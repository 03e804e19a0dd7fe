// Questions on a terminal for `xlaunch config`. Each question shows its choices and its default
// in brackets; Enter takes the default; an invalid answer is explained and the question asked
// again; end of input throws Aborted, so the caller writes nothing.
#pragma once

#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

namespace xlaunch::launcher {

struct Aborted {};

class Prompter {
 public:
  // Returns "" for a valid answer, else what is wrong with it.
  using Check = std::function<std::string(const std::string&)>;

  Prompter(std::istream& in, std::ostream& out) : in_(in), out_(out) {}

  // One of `choices` (case-insensitive); returns it spelled as in `choices`.
  std::string choice(const std::string& question, const std::vector<std::string>& choices, const std::string& def);
  int integer(const std::string& question, int def, int min, int max, const Check& extra = {});
  bool yes_no(const std::string& question, bool def);
  // Free text; `def` may be empty, in which case Enter gives "" (if `check` allows it).
  std::string text(const std::string& question, const std::string& def, const Check& check = {});
  // A line of information between the questions.
  void note(const std::string& line);

 private:
  std::string ask(const std::string& prompt, const std::string& def, const Check& check);
  std::istream& in_;
  std::ostream& out_;
};

}  // namespace xlaunch::launcher
