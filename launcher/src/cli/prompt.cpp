#include "cli/prompt.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <istream>
#include <ostream>

namespace xlaunch::launcher {

namespace {
std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  return s;
}
std::string trim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t\r") - b + 1);
}
}  // namespace

std::string Prompter::ask(const std::string& prompt, const std::string& def, const Check& check) {
  for (;;) {
    out_ << prompt << " [" << def << "]: " << std::flush;
    std::string line;
    if (!std::getline(in_, line)) throw Aborted{};
    line = trim(line);
    if (line.empty()) line = def;
    const std::string problem = check ? check(line) : "";
    if (problem.empty()) return line;
    out_ << "  '" << line << "' " << problem << "; try again.\n";
  }
}

std::string Prompter::choice(const std::string& question, const std::vector<std::string>& choices,
                             const std::string& def) {
  std::string list;
  for (const auto& c : choices) list += (list.empty() ? "" : "/") + c;
  auto find = [&](const std::string& a) {
    return std::find_if(choices.begin(), choices.end(), [&](const std::string& c) { return lower(c) == lower(a); });
  };
  const std::string answer = ask(question + " (" + list + ")", def, [&](const std::string& a) {
    return find(a) == choices.end() ? "is not one of " + list : std::string();
  });
  return *find(answer);
}

void Prompter::note(const std::string& line) { out_ << line << "\n"; }

int Prompter::integer(const std::string& question, int def, int min, int max, const Check& extra) {
  const std::string answer = ask(question, std::to_string(def), [&](const std::string& a) -> std::string {
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(a.c_str(), &end, 10);
    if (a.empty() || *end != '\0' || errno != 0 || v < min || v > max)
      return "is not a whole number from " + std::to_string(min) + " to " + std::to_string(max);
    return extra ? extra(a) : "";
  });
  return std::atoi(answer.c_str());
}

bool Prompter::yes_no(const std::string& question, bool def) {
  const std::string answer = ask(question + " (yes/no)", def ? "yes" : "no", [](const std::string& a) {
    const std::string l = lower(a);
    return l == "y" || l == "yes" || l == "n" || l == "no" ? "" : "is not yes or no";
  });
  return lower(answer)[0] == 'y';
}

std::string Prompter::text(const std::string& question, const std::string& def, const Check& check) {
  return ask(question, def, check);
}

}  // namespace xlaunch::launcher
