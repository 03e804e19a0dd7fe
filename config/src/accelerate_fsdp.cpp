#include "accelerate_fsdp.h"

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "accelerate_entry.h"

namespace xlaunch::config::detail {
namespace {

struct FsdpSettings {
  int zero_stage = 3;
  bool reshard_after_forward = true;
  bool hybrid = false;  // HYBRID_SHARD, HYBRID_SHARD_ZERO2: ddp.shard_group machine
  bool no_prefetch = false;
  int activation_checkpointing_line = 0;  // where `fsdp_activation_checkpointing: true` is (0: not)
  // The wrap policy's three keys, as given (empty: not given), and where.
  std::string wrap_policy, layer_types, min_params;
  int wrap_line = 0;
  std::string source = "fsdp_config (FULL_SHARD, Accelerate's default)";
  int line = 0;  // where the strategy was given (0: not given)
  std::vector<std::string> notes;
};

// FSDP's sharding strategies, by name and by the number Accelerate's prompt writes.
void read_strategy(const Entry& e, FsdpSettings& s) {
  std::string v = e.text();
  std::transform(v.begin(), v.end(), v.begin(), ::toupper);
  if (v == "FULL_SHARD" || v == "1") {
    s.zero_stage = 3;
    s.reshard_after_forward = true;
  } else if (v == "SHARD_GRAD_OP" || v == "2") {
    s.zero_stage = 3;
    s.reshard_after_forward = false;
  } else if (v == "NO_SHARD" || v == "3") {
    s.zero_stage = 0;
  } else if (v == "HYBRID_SHARD" || v == "4") {
    s.zero_stage = 3;
    s.reshard_after_forward = true;
    s.hybrid = true;
  } else if (v == "HYBRID_SHARD_ZERO2" || v == "5") {
    s.zero_stage = 2;
    s.hybrid = true;
  } else {
    e.fail("FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD, HYBRID_SHARD_ZERO2 (or 1 to 5)");
  }
  s.source = e.key + " " + e.text();
  s.line = e.line;
}

// The keys that mean nothing to xlaunch, and why.
const std::map<std::string, std::string>& ignored_keys() {
  static const std::map<std::string, std::string> k = {
      {"fsdp_forward_prefetch", "fsdp.prefetch sets how far ahead units are gathered, forward and backward"},
      {"fsdp_state_dict_type", "xlaunch's checkpoints hold each rank's shard of the model and optimizer, as "
                               "SHARDED_STATE_DICT does, and load on any world size; `xlaunch merge-weights` writes "
                               "the whole model as safetensors, FULL_STATE_DICT's file"},
      {"fsdp_cpu_ram_efficient_loading", "every rank builds the model; acc.prepare broadcasts rank 0's values and "
                                         "keeps each rank's shard"},
      {"fsdp_sync_module_states", "acc.prepare always broadcasts rank 0's values"},
      {"fsdp_use_orig_params", "a prepared model's parameters are always the module's own tensors"},
  };
  return k;
}

FsdpSettings read_fsdp_section(const YAML::Node& section, const std::string& file) {
  FsdpSettings s;
  if (!section || section.IsNull()) return s;
  if (!section.IsMap()) refuse(file, "fsdp_config", line_of(section), describe(section), "a mapping of FSDP settings", "");
  std::vector<std::string> unknown;
  int version = 1;
  const YAML::Node v = section["fsdp_version"];
  if (v) version = static_cast<int>(Entry{"fsdp_config.fsdp_version", line_of(v), v, file}.integer(1, 2));
  for (auto it = section.begin(); it != section.end(); ++it) {
    if (!it->first.IsScalar())
      refuse(file, "fsdp_config", line_of(it->first), "a key that is " + describe(it->first), "plain key names", "");
    const std::string leaf = it->first.Scalar();
    const Entry e{"fsdp_config." + leaf, line_of(it->first), it->second, file};
    if (leaf == "fsdp_version") continue;
    if (leaf == "fsdp_sharding_strategy") {
      read_strategy(e, s);
    } else if (leaf == "fsdp_reshard_after_forward") {
      // FSDP2's boolean; Accelerate's first FSDP wrote a strategy name under this key too.
      const std::string t = e.text();
      if (version == 2 || t == "true" || t == "false" || t == "True" || t == "False") {
        s.zero_stage = 3;
        s.reshard_after_forward = e.boolean();
        s.source = e.key + " " + (s.reshard_after_forward ? "true" : "false");
        s.line = e.line;
      } else {
        read_strategy(e, s);
      }
    } else if (leaf == "fsdp_offload_params") {
      if (e.boolean())
        e.fail("false", "offloading the parameters to the CPU is not built; ddp.zero_stage 3 divides them by the "
                        "number of ranks instead (docs/memory.md)");
    } else if (leaf == "fsdp_activation_checkpointing") {
      if (e.boolean()) s.activation_checkpointing_line = e.line;
    } else if (leaf == "fsdp_auto_wrap_policy") {
      std::string t = e.text();
      std::transform(t.begin(), t.end(), t.begin(), ::toupper);
      if (t != "TRANSFORMER_BASED_WRAP" && t != "SIZE_BASED_WRAP" && t != "NO_WRAP" && !e.node.IsNull())
        e.fail("TRANSFORMER_BASED_WRAP, SIZE_BASED_WRAP or NO_WRAP");
      s.wrap_policy = e.node.IsNull() ? "" : t;
      s.wrap_line = e.line;
    } else if (leaf == "fsdp_transformer_layer_cls_to_wrap") {
      // "GPT2Block" or "T5Block,T5LayerNorm" (Accelerate's prompt), or a list of names.
      std::string names;
      if (e.node.IsSequence()) {
        for (const YAML::Node& n : e.node) {
          if (!n.IsScalar()) e.fail("module class names: a comma-separated string or a list of names");
          names += (names.empty() ? "" : ",") + n.Scalar();
        }
      } else if (!e.node.IsNull()) {
        if (!e.node.IsScalar()) e.fail("module class names: a comma-separated string or a list of names");
        names = e.text();
      }
      names.erase(std::remove(names.begin(), names.end(), ' '), names.end());
      s.layer_types = names;
      if (!s.wrap_line) s.wrap_line = e.line;
    } else if (leaf == "fsdp_min_num_params") {
      if (!e.node.IsNull()) s.min_params = std::to_string(e.integer(0, 999999999999999999L));
    } else if (leaf == "fsdp_backward_prefetch") {
      std::string t = e.text();
      std::transform(t.begin(), t.end(), t.begin(), ::toupper);
      if (t == "NO_PREFETCH") s.no_prefetch = true;
      else if (t != "BACKWARD_PRE" && t != "BACKWARD_POST" && !e.node.IsNull())
        e.fail("BACKWARD_PRE, BACKWARD_POST or NO_PREFETCH");
    } else if (ignored_keys().count(leaf)) {
      if (!e.node.IsNull())
        s.notes.push_back("fsdp_config." + leaf + " ignored: " + ignored_keys().at(leaf));
    } else {
      unknown.push_back(leaf);
    }
  }
  if (!unknown.empty()) {
    std::string names;
    for (const auto& k : unknown) names += (names.empty() ? "" : ", ") + k;
    s.notes.push_back("fsdp_config keys xlaunch does not know, ignored: " + names);
  }
  return s;
}

// fsdp.wrap for the file's wrap policy (xlaunch/wrap_policy.h); notes what differs from Accelerate.
std::string wrap_setting(FsdpSettings& s) {
  const std::string key = "fsdp_config.fsdp_auto_wrap_policy";
  if (s.wrap_policy == "NO_WRAP") return "none";
  if (s.wrap_policy == "SIZE_BASED_WRAP") {
    std::string n = s.min_params;
    if (n.empty()) {
      n = "100000000";
      s.notes.push_back(key + " SIZE_BASED_WRAP without fsdp_min_num_params: Accelerate's default, 100000000, as "
                              "fsdp.wrap size:100000000");
    }
    return n == "0" ? "auto" : "size:" + n;
  }
  if (!s.layer_types.empty()) {
    if (s.wrap_policy.empty())
      s.notes.push_back("fsdp_config.fsdp_transformer_layer_cls_to_wrap without " + key +
                        ": read as TRANSFORMER_BASED_WRAP (fsdp.wrap type:" + s.layer_types + ")");
    return "type:" + s.layer_types;
  }
  if (s.wrap_policy == "TRANSFORMER_BASED_WRAP")
    s.notes.push_back(key + " TRANSFORMER_BASED_WRAP without fsdp_transformer_layer_cls_to_wrap: Accelerate takes "
                            "the model's _no_split_modules, which a C++ module has not; xlaunch's units are every "
                            "Sequential entry and FullyShard module (fsdp.wrap auto). Name the block type to narrow "
                            "them (docs/memory.md)");
  else if (s.wrap_policy.empty())
    s.notes.push_back("fsdp_config without " + key + ": Accelerate wraps nothing (NO_WRAP, the whole model one "
                      "unit); xlaunch keeps its default, every Sequential entry and FullyShard module a unit "
                      "(fsdp.wrap auto). Set fsdp_auto_wrap_policy: NO_WRAP for Accelerate's behaviour");
  if (!s.min_params.empty() && s.wrap_policy != "SIZE_BASED_WRAP")
    s.notes.push_back("fsdp_config.fsdp_min_num_params ignored: it counts with SIZE_BASED_WRAP only");
  return "auto";
}

}  // namespace

void apply_fsdp(const YAML::Node& root, LoadedConfig& out) {
  const auto at = out.lines.find("fsdp_config");
  const int section_line = at == out.lines.end() ? out.lines["distributed_type"] : at->second;
  FsdpSettings s = read_fsdp_section(root["fsdp_config"], out.file);
  out.unsupported.erase(std::remove(out.unsupported.begin(), out.unsupported.end(), "fsdp_config"),
                        out.unsupported.end());
  if (out.config.use_cpu) out.config.distributed_type = DistributedType::MultiCpu;
  const int line = s.line ? s.line : section_line;
  take(out, setting_of(env::kZeroStage), std::to_string(s.zero_stage), s.source, line);
  if (s.hybrid) take(out, setting_of(env::kShardGroup), "machine", s.source, line);
  if (s.zero_stage == 3)
    take(out, setting_of(env::kFsdpReshardAfterForward), s.reshard_after_forward ? "true" : "false", s.source, line);
  if (s.zero_stage == 3) {
    const std::string wrap = wrap_setting(s);
    if (wrap != "auto") take(out, setting_of(env::kFsdpWrap), wrap, "fsdp_config.fsdp_auto_wrap_policy",
                               s.wrap_line ? s.wrap_line : section_line);
  }
  if (s.no_prefetch) take(out, setting_of(env::kFsdpPrefetch), "0", "fsdp_config.fsdp_backward_prefetch NO_PREFETCH", line);
  if (s.activation_checkpointing_line) {
    if (s.zero_stage != 3)
      refuse(out.file, "fsdp_config.fsdp_activation_checkpointing", s.activation_checkpointing_line, "true",
             "false with NO_SHARD",
             "activation checkpointing recomputes the units of a sharded model (FULL_SHARD or SHARD_GRAD_OP, "
             "xlaunch's ddp.zero_stage 3); with NO_SHARD there are none");
    take(out, setting_of(env::kFsdpActivationCheckpointing), "true", "fsdp_config.fsdp_activation_checkpointing true",
         s.activation_checkpointing_line);
  }
  out.notes.push_back("accelerate config: " + s.source + " runs as xlaunch ddp.zero_stage " +
                      std::to_string(s.zero_stage) +
                      (s.zero_stage == 3 ? std::string(" with fsdp.reshard_after_forward ") +
                                               (s.reshard_after_forward ? "true" : "false")
                                         : std::string()) +
                      " (docs/memory.md)");
  out.notes.insert(out.notes.end(), s.notes.begin(), s.notes.end());
}

}  // namespace xlaunch::config::detail
