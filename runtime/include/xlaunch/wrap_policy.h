// Stage 3's wrap policy (fsdp.wrap, docs/memory.md): which of the modules whose calls xlaunch can
// see become units. Those modules, the candidates, are the entries of a torch::nn::Sequential and
// the modules declared xlaunch::FullyShard<Block>, wherever they sit, when they hold trainable
// parameters. Walking the tree from the model, the first candidate on a path that the policy takes
// is a unit (everything below it is part of it); a candidate it does not take is looked into.
//
//   auto                 every candidate (the default)
//   none                 no unit: the whole model is the root unit (FSDP's NO_WRAP)
//   type:Block,Attn      the candidates of these module types (Accelerate's TRANSFORMER_BASED_WRAP,
//                        fsdp_transformer_layer_cls_to_wrap). "Block" names BlockImpl, ns::BlockImpl
//                        and Block; a name with "::" names that namespace only.
//   name:blocks.*,head   the candidates at these paths in the model ("blocks.3"); '*' matches any
//                        run of characters, dots too
//   size:N               the candidates holding at least N trainable parameters (Accelerate's
//                        SIZE_BASED_WRAP, fsdp_min_num_params)
//
// The file and XLAUNCH_FSDP_WRAP spell it as above. Header-only, free of torch and MPI: the config's
// check (xlaunch/settings.h) and the runtime's cut (runtime/src/ddp/units.cpp) both parse it here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace xlaunch {

struct WrapPolicy {
  enum class Kind { kAuto, kNone, kType, kName, kSize };
  Kind kind = Kind::kAuto;
  std::vector<std::string> names;  // kType: type names; kName: path patterns
  int64_t min_params = 0;          // kSize

  // As the file spells it ("type:Block,Attn").
  std::string spelling() const {
    auto list = [this] {
      std::string s;
      for (const std::string& n : names) s += (s.empty() ? "" : ",") + n;
      return s;
    };
    switch (kind) {
      case Kind::kAuto: return "auto";
      case Kind::kNone: return "none";
      case Kind::kType: return "type:" + list();
      case Kind::kName: return "name:" + list();
      case Kind::kSize: return "size:" + std::to_string(min_params);
    }
    return "auto";
  }

  // "Block" for "BlockImpl", "ns::BlockImpl", "(anonymous namespace)::Block" and "Block"; with
  // keep_namespace, "ns::Block" (the anonymous namespace dropped).
  static std::string type_key(std::string t, bool keep_namespace) {
    const std::string anon = "(anonymous namespace)::";
    for (size_t at; (at = t.find(anon)) != std::string::npos;) t.erase(at, anon.size());
    if (!keep_namespace) {
      const size_t colon = t.rfind("::");
      if (colon != std::string::npos) t = t.substr(colon + 2);
    }
    const std::string impl = "Impl";
    if (t.size() > impl.size() && t.compare(t.size() - impl.size(), impl.size(), impl) == 0)
      t.resize(t.size() - impl.size());
    return t;
  }
  // A module's type (torch::nn::Module::name(): its demangled class) is one that `names` names.
  bool names_type(const std::string& type) const {
    for (const std::string& n : names) {
      const bool qualified = n.find("::") != std::string::npos;
      if (type_key(n, qualified) == type_key(type, qualified)) return true;
    }
    return false;
  }
  // `path` matches one of `names`' patterns ('*': any run of characters).
  bool names_path(const std::string& path) const {
    for (const std::string& n : names)
      if (glob(n.c_str(), path.c_str())) return true;
    return false;
  }
  static bool glob(const char* p, const char* s) {
    if (*p == '\0') return *s == '\0';
    if (*p == '*') return glob(p + 1, s) || (*s != '\0' && glob(p, s + 1));
    return *s != '\0' && *p == *s && glob(p + 1, s + 1);
  }

  // The policy `s` spells, or nullopt with *why saying what is wrong with it.
  static std::optional<WrapPolicy> parse(const std::string& s, std::string* why = nullptr) {
    auto fail = [why](const std::string& w) -> std::optional<WrapPolicy> {
      if (why) *why = w;
      return std::nullopt;
    };
    WrapPolicy p;
    if (s == "auto" || s.empty()) return p;
    if (s == "none") {
      p.kind = Kind::kNone;
      return p;
    }
    const size_t colon = s.find(':');
    const std::string head = s.substr(0, colon);
    const std::string rest = colon == std::string::npos ? "" : s.substr(colon + 1);
    if (head == "size") {
      if (rest.empty() || rest.size() > 18 || rest.find_first_not_of("0123456789") != std::string::npos ||
          std::stoll(rest) < 1)
        return fail("size: takes a number of parameters >= 1 (size:1000000), not '" + rest + "'");
      p.kind = Kind::kSize;
      p.min_params = std::stoll(rest);
      return p;
    }
    if (head != "type" && head != "name")
      return fail("'" + s + "' is none of auto, none, type:..., name:... and size:...");
    p.kind = head == "type" ? Kind::kType : Kind::kName;
    size_t from = 0;
    while (from <= rest.size()) {
      size_t comma = rest.find(',', from);
      if (comma == std::string::npos) comma = rest.size();
      std::string item = rest.substr(from, comma - from);
      while (!item.empty() && item.front() == ' ') item.erase(item.begin());
      while (!item.empty() && item.back() == ' ') item.pop_back();
      if (item.empty()) return fail(head + ": takes a comma-separated list of " +
                                    (head == "type" ? "module types (type:Block)" : "module paths (name:blocks.*)") +
                                    " without empty entries, not '" + rest + "'");
      p.names.push_back(item);
      from = comma + 1;
    }
    return p;
  }
  static bool valid(const std::string& s) { return parse(s).has_value(); }
};

// The allowed spellings, for messages.
inline constexpr const char* kWrapPolicySpellings =
    "auto, none, type:NAME[,NAME...], name:PATTERN[,PATTERN...] or size:N";

}  // namespace xlaunch
