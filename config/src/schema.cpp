#include "schema.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <map>
#include <set>

#include "xlaunch/comm_hooks.h"
#include "xlaunch/config/config_error.h"

namespace xlaunch::config::detail {

[[noreturn]] void fail(const FieldCtx& ctx, const std::string& found, const std::string& allowed,
                       const std::string& hint) {
  throw ConfigError({ctx.file, ctx.key, ctx.line, found, allowed, hint});
}

std::string describe(const YAML::Node& n) {
  if (n.IsScalar()) return "'" + n.Scalar() + "'";
  if (n.IsSequence()) return "a list";
  if (n.IsMap()) return "a mapping";
  return "nothing (null)";
}

int line_of(const YAML::Node& n) {
  const YAML::Mark m = n.Mark();
  return m.is_null() ? 0 : m.line + 1;
}

namespace {

const std::string& scalar(const YAML::Node& n, const FieldCtx& ctx, const char* allowed) {
  if (!n.IsScalar()) fail(ctx, describe(n), allowed);
  return n.Scalar();
}

bool parse_long(const std::string& s, long* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  *out = std::strtol(s.c_str(), &end, 10);
  return *end == '\0' && errno == 0;
}

int read_int(const YAML::Node& n, const FieldCtx& ctx) {
  long v = 0;
  if (!parse_long(scalar(n, ctx, "an integer"), &v) || v < INT32_MIN || v > INT32_MAX)
    fail(ctx, describe(n), "an integer");
  return static_cast<int>(v);
}

double read_double(const YAML::Node& n, const FieldCtx& ctx) {
  const std::string& s = scalar(n, ctx, "a number");
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || *end != '\0') fail(ctx, describe(n), "a number");
  return v;
}

bool read_bool(const YAML::Node& n, const FieldCtx& ctx) {
  std::string s = scalar(n, ctx, "true or false");
  std::transform(s.begin(), s.end(), s.begin(), ::tolower);
  if (s == "true" || s == "yes" || s == "on") return true;
  if (s == "false" || s == "no" || s == "off") return false;
  fail(ctx, describe(n), "true or false");
}

std::string read_string(const YAML::Node& n, const FieldCtx& ctx) {
  if (n.IsNull()) return "";
  return scalar(n, ctx, "a string");
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

std::string read_choice(const YAML::Node& n, const FieldCtx& ctx, const std::vector<std::string>& choices,
                        const std::string& hint = "") {
  const std::string s = read_string(n, ctx);
  if (std::find(choices.begin(), choices.end(), s) == choices.end())
    fail(ctx, describe(n), "one of " + join(choices, ", "), hint);
  return s;
}

// A list of strings; a single scalar is split on `seps`.
std::vector<std::string> read_list(const YAML::Node& n, const FieldCtx& ctx, const char* seps) {
  std::vector<std::string> out;
  if (n.IsNull()) return out;
  if (n.IsSequence()) {
    for (const auto& item : n) out.push_back(scalar(item, ctx, "a list of strings"));
    return out;
  }
  const std::string& s = scalar(n, ctx, "a list of strings");
  size_t i = 0;
  while (i < s.size()) {
    const size_t j = s.find_first_of(seps, i);
    const std::string part = s.substr(i, j == std::string::npos ? std::string::npos : j - i);
    if (!part.empty()) out.push_back(part);
    if (j == std::string::npos) break;
    i = j + 1;
  }
  return out;
}

std::vector<int> read_gpu_ids(const YAML::Node& n, const FieldCtx& ctx) {
  const char* allowed = "'all', or GPU ids as a list or comma list (e.g. 0,1)";
  if (n.IsScalar() && (n.Scalar() == "all" || n.Scalar().empty())) return {};
  std::vector<int> ids;
  for (const std::string& s : read_list(n, ctx, ", ")) {
    long v = 0;
    if (!parse_long(s, &v) || v < 0 || v > 4096) fail(ctx, describe(n), allowed);
    ids.push_back(static_cast<int>(v));
  }
  if (ids.empty()) fail(ctx, describe(n), allowed);
  return ids;
}

// log_with: a tracker name, "all", or a list (or comma list) of them; "all" expands to every
// tracker, and a name given twice counts once.
std::vector<std::string> read_log_with(const YAML::Node& n, const FieldCtx& ctx) {
  std::vector<std::string> out;
  const std::string allowed = "tensorboard, jsonl, csv or all, or a list of them (e.g. [tensorboard, csv])";
  for (const std::string& s : read_list(n, ctx, ", ")) {
    if (s == "all" || s == "none") {
      if (s == "all") out = kLogWith;
      continue;
    }
    if (std::find(kLogWith.begin(), kLogWith.end(), s) == kLogWith.end())
      fail(ctx, "'" + s + "'", allowed, "Accelerate's other trackers (wandb, mlflow, comet_ml...) are Python services");
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(s);
  }
  return out;
}

template <class T>
using Get = T& (*)(LaunchConfig&);

// Strings other YAML readers (PyYAML, so Accelerate) would take for a bool or null are quoted.
void emit(YAML::Emitter& out, const std::string& s) {
  static const std::set<std::string> kWords = {"y", "n", "yes", "no", "true", "false", "on", "off", "null", "~"};
  std::string lower = s;
  std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
  if (kWords.count(lower)) out << YAML::SingleQuoted;
  out << s;
}
void emit(YAML::Emitter& out, int v) { out << v; }
void emit(YAML::Emitter& out, double v) { out << v; }
void emit(YAML::Emitter& out, bool v) { out << v; }
void emit(YAML::Emitter& out, MixedPrecision v) { emit(out, std::string(to_string(v))); }

Field make(const std::string& key, std::function<void(const YAML::Node&, LaunchConfig&, const FieldCtx&)> read,
           std::function<void(YAML::Emitter&, const LaunchConfig&)> write) {
  const size_t dot = key.find('.');
  Field f;
  f.key = key;
  f.section = dot == std::string::npos ? "" : key.substr(0, dot);
  f.leaf = dot == std::string::npos ? key : key.substr(dot + 1);
  f.read = std::move(read);
  f.write = std::move(write);
  return f;
}

// Typed field builders: `get` gives the member; the writer reads it from a copy.
template <class T, class Reader>
Field typed(const std::string& key, Get<T> get, Reader reader) {
  return make(
      key, [get, reader](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) { get(c) = reader(n, ctx); },
      [get](YAML::Emitter& out, const LaunchConfig& c) {
        LaunchConfig copy = c;
        emit(out, get(copy));
      });
}

Field list_field(const std::string& key, Get<std::vector<std::string>> get, const char* seps) {
  return make(
      key, [get, seps](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) { get(c) = read_list(n, ctx, seps); },
      [get](YAML::Emitter& out, const LaunchConfig& c) {
        LaunchConfig copy = c;
        out << YAML::Flow << get(copy);
      });
}

// The reading of ANY and RANGE rows, by the field's type (ranges are validate()'s).
void read_value(const YAML::Node& n, const FieldCtx& ctx, int& v) { v = read_int(n, ctx); }
void read_value(const YAML::Node& n, const FieldCtx& ctx, bool& v) { v = read_bool(n, ctx); }
void read_value(const YAML::Node& n, const FieldCtx& ctx, double& v) { v = read_double(n, ctx); }
void read_value(const YAML::Node& n, const FieldCtx& ctx, std::string& v) { v = read_string(n, ctx); }

template <class T>
Field typed_field(const std::string& key, Get<T> get) {
  return typed<T>(key, get, [](const YAML::Node& n, const FieldCtx& ctx) {
    T v{};
    read_value(n, ctx, v);
    return v;
  });
}

// A ONE_OF row: one of `names`, kept as the spelling or as the enum it names.
void from_choice(const std::string& s, std::string& v) { v = s; }
void from_choice(const std::string& s, MixedPrecision& v) { v = parse_mixed_precision(s); }

template <class T, class Names>
Field choice_field(const std::string& key, Get<T> get, const Names& names, const std::string& hint) {
  const std::vector<std::string> choices(std::begin(names), std::end(names));
  return typed<T>(key, get, [choices, hint](const YAML::Node& n, const FieldCtx& ctx) {
    T v{};
    from_choice(read_choice(n, ctx, choices, hint), v);
    return v;
  });
}

const std::vector<std::string> kMapBy = {"slot", "hwthread", "core", "l2cache", "l3cache", "socket",
                                         "numa", "board",   "node", "ppr",      "seq",    "dist"};

// The BY_HAND rows: spellings no type says alone.
std::map<std::string, Field> hand_fields() {
  std::map<std::string, Field> f;
  auto add = [&](Field field) { f.emplace(field.key, std::move(field)); };
  add(make(
      "distributed_type",
      [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) {
        // DEEPSPEED and FSDP are an Accelerate file's: they run as MULTI_GPU (MULTI_CPU with use_cpu) at
        // the ZeRO stage their deepspeed_config or fsdp_config asks for, which accelerate_deepspeed.h and
        // accelerate_fsdp.h read once the whole file is.
        const std::string s = read_choice(n, ctx, {"NO", "MULTI_CPU", "MULTI_GPU", "DEEPSPEED", "FSDP"},
                                          "XLA, MEGATRON_LM and the other Accelerate types are not supported");
        c.distributed_type = s == "NO" ? DistributedType::No
                             : s == "MULTI_CPU" ? DistributedType::MultiCpu
                                                : DistributedType::MultiGpu;
      },
      [](YAML::Emitter& out, const LaunchConfig& c) { emit(out, std::string(to_string(c.distributed_type))); }));
  add(make(
      "num_machines",
      [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) {
        if (!n.IsScalar() || !parse_machines(n.Scalar(), &c.min_machines, &c.num_machines))
          fail(ctx, describe(n), "an integer >= 1, or MIN:MAX for an elastic job (e.g. 2:4, MIN <= MAX)");
      },
      [](YAML::Emitter& out, const LaunchConfig& c) {
        if (c.min_machines > 0) out << machines_string(c);
        else out << c.num_machines;
      }));
  add(make(
      "gpu_ids", [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) { c.gpu_ids = read_gpu_ids(n, ctx); },
      [](YAML::Emitter& out, const LaunchConfig& c) { out << gpu_ids_string(c.gpu_ids); }));
  add(list_field("mpi.hosts", [](LaunchConfig& c) -> std::vector<std::string>& { return c.mpi.hosts; }, ", "));
  add(typed<std::string>(
      "mpi.map_by", [](LaunchConfig& c) -> std::string& { return c.mpi.map_by; },
      [](const YAML::Node& n, const FieldCtx& ctx) {
        const std::string s = read_string(n, ctx);
        const std::string head = s.substr(0, s.find(':'));
        if (!s.empty() && std::find(kMapBy.begin(), kMapBy.end(), head) == kMapBy.end())
          fail(ctx, describe(n), "empty, or an Open MPI --map-by value starting with one of " + join(kMapBy, ", "));
        return s;
      }));
  add(list_field("mpi.extra_args", [](LaunchConfig& c) -> std::vector<std::string>& { return c.mpi.extra_args; }, " "));
  add(make(
      "loader.num_workers",
      [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) {
        if (n.IsScalar() && n.Scalar() == "auto") {
          c.loader.num_workers = LoaderSection::kAutoWorkers;
        } else {
          long v = 0;
          if (!n.IsScalar() || !parse_long(n.Scalar(), &v) || v < 0 || v > 1024)
            fail(ctx, describe(n), "'auto' or an integer from 0 to 1024");
          c.loader.num_workers = static_cast<int>(v);
        }
      },
      [](YAML::Emitter& out, const LaunchConfig& c) {
        if (c.loader.num_workers == LoaderSection::kAutoWorkers) out << "auto";
        else out << c.loader.num_workers;
      }));
  add(make(
      "log_with",
      [](const YAML::Node& n, LaunchConfig& c, const FieldCtx& ctx) { c.log_with = read_log_with(n, ctx); },
      [](YAML::Emitter& out, const LaunchConfig& c) { out << YAML::Flow << c.log_with; }));
  return f;
}

// One Field per row of the settings table, in its order.
#define XLAUNCH_SCHEMA_GET(S, name, type) [](LaunchConfig& c) -> type& { return c.S name; }
#define XLAUNCH_SCHEMA_RANGE(condition, allowed, hint, S, name, type) \
  f.push_back(typed_field<type>(#S #name, XLAUNCH_SCHEMA_GET(S, name, type)));
#define XLAUNCH_SCHEMA_ANY XLAUNCH_SCHEMA_RANGE
#define XLAUNCH_SCHEMA_ONE_OF(names, allowed, hint, S, name, type) \
  f.push_back(choice_field<type>(#S #name, XLAUNCH_SCHEMA_GET(S, name, type), names, hint));
#define XLAUNCH_SCHEMA_BY_HAND(unused, allowed, hint, S, name, type) f.push_back(hand.at(#S #name));
#define XLAUNCH_SCHEMA_ROW(S, name, type, env, dflt, cli, check, runtime, meaning) \
  XLAUNCH_BY_CHECK(check, XLAUNCH_SCHEMA_, S, name, type)

std::vector<Field> build_fields() {
  const std::map<std::string, Field> hand = hand_fields();
  std::vector<Field> f;
  XLAUNCH_SETTINGS(XLAUNCH_SCHEMA_ROW)
  return f;
}

#undef XLAUNCH_SCHEMA_ROW
#undef XLAUNCH_SCHEMA_BY_HAND
#undef XLAUNCH_SCHEMA_ONE_OF
#undef XLAUNCH_SCHEMA_ANY
#undef XLAUNCH_SCHEMA_RANGE
#undef XLAUNCH_SCHEMA_GET

}  // namespace

const std::vector<Field>& fields() {
  static const std::vector<Field> f = build_fields();
  return f;
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> s = [] {
    std::vector<std::string> out;
    for (const Field& f : fields())
      if (!f.section.empty() && std::find(out.begin(), out.end(), f.section) == out.end()) out.push_back(f.section);
    return out;
  }();
  return s;
}

}  // namespace xlaunch::config::detail
