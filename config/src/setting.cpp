#include "xlaunch/config/setting.h"

#include <algorithm>
#include <sstream>
#include <stdexcept>

#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"

namespace xlaunch::config {
namespace {

// A value as its variable carries it.
std::string text_of(int v) { return std::to_string(v); }
std::string text_of(bool v) { return v ? "1" : "0"; }
std::string text_of(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
std::string text_of(const std::string& v) { return v; }
std::string text_of(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}
std::string text_of(const std::vector<int>& v) { return gpu_ids_string(v); }
std::string text_of(MixedPrecision v) { return to_string(v); }
std::string text_of(DistributedType v) { return to_string(v); }

// The field's type as the docs name it.
const char* type_name(const int*) { return "int"; }
const char* type_name(const bool*) { return "bool"; }
const char* type_name(const double*) { return "number"; }
const char* type_name(const std::string*) { return "string"; }
const char* type_name(const std::vector<std::string>*) { return "list"; }
const char* type_name(const std::vector<int>*) { return "list of ints"; }
const char* type_name(const DistributedType*) { return "string"; }

const env::Var* var_or_null() { return nullptr; }
const env::Var* var_or_null(const env::Var* v) { return v; }

struct Cli {
  std::string names, help;
};
Cli cli_of() { return {}; }
Cli cli_of(const char* names, const char* help) { return {names, help}; }

// A ONE_OF row's type, as the docs name it: its values, "`none`, `fp16`".
template <class Names>
std::string values_of(const Names& names) {
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "`" : ", `") + std::string(n) + "`";
  return s;
}

#define XLAUNCH_SETTING_VAR(constant, name, type, unused) &env::constant
#define XLAUNCH_SETTING_CLI(names, help, unused) names, help
#define XLAUNCH_SETTING_ALLOWED_RANGE(condition, allowed, hint, unused) allowed
#define XLAUNCH_SETTING_ALLOWED_ANY(condition, allowed, hint, unused) ""
#define XLAUNCH_SETTING_ALLOWED_ONE_OF(names, allowed, hint, unused) "one of these"
#define XLAUNCH_SETTING_TYPE_RANGE(condition, allowed, hint, type) type_name(static_cast<const type*>(nullptr))
#define XLAUNCH_SETTING_TYPE_ANY XLAUNCH_SETTING_TYPE_RANGE
#define XLAUNCH_SETTING_TYPE_BY_HAND XLAUNCH_SETTING_TYPE_RANGE
#define XLAUNCH_SETTING_TYPE_ONE_OF(names, allowed, hint, type) values_of(names)
#define XLAUNCH_SETTING_ALLOWED_BY_HAND(condition, allowed, hint, unused) allowed
#define XLAUNCH_SETTING_ROW(S, name, type, env, dflt, cli, check, runtime, meaning)                                \
  {                                                                                                                \
    const Cli c = cli_of(XLAUNCH_WHEN_CLI(cli, XLAUNCH_SETTING_CLI, 0));                                           \
    rows.push_back(Setting{#S #name, XLAUNCH_BY_CHECK(check, XLAUNCH_SETTING_TYPE_, type),                         \
                           var_or_null(XLAUNCH_WHEN_ENV(env, XLAUNCH_SETTING_VAR, 0)), c.names, c.help, dflt,     \
                           XLAUNCH_BY_CHECK(check, XLAUNCH_SETTING_ALLOWED_, 0), meaning,                          \
                           [](const LaunchConfig& from) { return text_of(from.S name); },                          \
                           [](LaunchConfig& to, const LaunchConfig& from) { to.S name = from.S name; }});          \
  }

std::vector<Setting> build_table() {
  std::vector<Setting> rows;
  XLAUNCH_SETTINGS(XLAUNCH_SETTING_ROW)
  // num_machines MIN:MAX holds MIN beside it.
  Setting& machines = *std::find_if(rows.begin(), rows.end(), [](const Setting& s) { return s.key == "num_machines"; });
  machines.text = [](const LaunchConfig& c) { return machines_string(c); };
  machines.copy = [](LaunchConfig& to, const LaunchConfig& from) {
    to.num_machines = from.num_machines;
    to.min_machines = from.min_machines;
  };
  return rows;
}

#undef XLAUNCH_SETTING_ROW
#undef XLAUNCH_SETTING_TYPE_ONE_OF
#undef XLAUNCH_SETTING_TYPE_BY_HAND
#undef XLAUNCH_SETTING_TYPE_ANY
#undef XLAUNCH_SETTING_TYPE_RANGE
#undef XLAUNCH_SETTING_ALLOWED_BY_HAND
#undef XLAUNCH_SETTING_ALLOWED_ONE_OF
#undef XLAUNCH_SETTING_ALLOWED_ANY
#undef XLAUNCH_SETTING_ALLOWED_RANGE
#undef XLAUNCH_SETTING_CLI
#undef XLAUNCH_SETTING_VAR

// A cell of a Markdown table: | would end it.
std::string cell(const std::string& s) {
  std::string out;
  for (char ch : s) out += ch == '|' ? std::string("\\|") : std::string(1, ch);
  return out;
}

std::string code(const std::string& s) { return "`" + s + "`"; }

// "`-n`, `--num_processes`" from CLI11's "-n,--num_processes"; "—" for none.
std::string option_cell(const std::string& names) {
  if (names.empty()) return "—";
  std::string out;
  size_t i = 0;
  while (i <= names.size()) {
    const size_t j = std::min(names.find(',', i), names.size());
    out += (out.empty() ? "" : ", ") + code(names.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

}  // namespace

const std::vector<Setting>& settings_table() {
  static const std::vector<Setting> rows = build_table();
  return rows;
}

const Setting* find_setting(const std::string& key) {
  for (const Setting& s : settings_table())
    if (s.key == key) return &s;
  return nullptr;
}

const Setting& setting_of(const env::Var& var) {
  for (const Setting& s : settings_table())
    if (s.var == &var) return s;
  throw std::logic_error(std::string(var.name) + " carries no setting of the table");
}

std::string key_and_value(const LaunchConfig& c, const env::Var& var) {
  const Setting& s = setting_of(var);
  return s.key + " (now " + s.text(c) + ")";
}

std::vector<std::string> apply_environment(LaunchConfig& c, const EnvMap& user_env) {
  std::vector<std::string> set;
  for (const Setting& s : settings_table()) {
    if (!s.var) continue;
    const auto it = user_env.find(s.var->name);
    if (it == user_env.end()) continue;
    std::string text = it->second;
    if (s.type == "bool") {  // the variables' 0 and 1 (and the file's spellings)
      if (text == "1") text = "true";
      if (text == "0" || text.empty()) text = "false";
    }
    read_setting(c, s.key, text, it->first);
    set.push_back(s.key);
  }
  return set;
}

std::string settings_markdown() {
  std::string out =
      "| key | type | default | allowed | option | variable | meaning |\n"
      "|---|---|---|---|---|---|---|\n";
  for (const Setting& s : settings_table())
    out += "| `" + s.key + "` | " + s.type + " | " + (s.default_value.empty() ? "(empty)" : code(s.default_value)) +
           " | " + (s.allowed.empty() ? "any" : cell(s.allowed)) + " | " + option_cell(s.cli) + " | " +
           (s.var ? code(s.var->name) : "—") + " | " + cell(s.meaning) + " |\n";
  return out;
}

}  // namespace xlaunch::config
