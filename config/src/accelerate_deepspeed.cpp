#include "accelerate_deepspeed.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "accelerate_entry.h"
#include "schema.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/setting.h"

namespace xlaunch::config::detail {
namespace {

constexpr const char* kOffload =
    "offloading to the CPU or NVMe is not built; set it to none (stage 2 already divides the optimizer state "
    "and gradients by the number of ranks: docs/memory.md)";

// ---- The `deepspeed_config:` section of an Accelerate file. -------------------------------------

void offload_device(const Entry& e) {
  if (!e.node.IsNull() && !(e.node.IsScalar() && is_none(e.text()))) e.fail("none", kOffload);
}

// DeepSpeed spells its accumulation key as xlaunch's settings table does.
const std::string& accumulation_key() { return setting_of(env::kGradAccumSteps).key; }

// The keys of the section that, beside deepspeed_config_file, Accelerate refuses too: they belong in
// the JSON file.
bool in_json_file(const std::string& leaf) {
  for (const char* k : {"zero_stage", "offload_optimizer_device", "offload_param_device", "gradient_clipping",
                        "zero3_save_16bit_model"})
    if (leaf == k) return true;
  return leaf == accumulation_key();
}

}  // namespace

DeepSpeedSettings read_deepspeed_section(const YAML::Node& section, const std::string& file) {
  DeepSpeedSettings s;
  s.stage_source = "deepspeed_config without zero_stage (Accelerate's default, 2)";
  if (section.IsNull()) return s;
  if (!section.IsMap())
    refuse(file, "deepspeed_config", line_of(section), describe(section), "a mapping of DeepSpeed settings", "");
  const YAML::Node json_file = section["deepspeed_config_file"];
  const bool from_json = json_file && json_file.IsScalar() && !is_none(json_file.Scalar());
  if (from_json) {
    std::ifstream in(json_file.Scalar(), std::ios::binary);
    if (!in.is_open())
      refuse(file, "deepspeed_config.deepspeed_config_file", line_of(json_file),
             "'" + json_file.Scalar() + "', which cannot be read (" + std::strerror(errno) + ")",
             "a readable DeepSpeed JSON file",
             "a relative path is read from the directory xlaunch runs in, as Accelerate's launcher reads it");
    std::ostringstream text;
    text << in.rdbuf();
    s = read_deepspeed_json(text.str(), json_file.Scalar());
  }
  std::vector<std::string> unknown;
  for (auto it = section.begin(); it != section.end(); ++it) {
    if (!it->first.IsScalar())
      refuse(file, "deepspeed_config", line_of(it->first), "a key that is " + describe(it->first), "plain key names", "");
    const std::string leaf = it->first.Scalar();
    const Entry e{"deepspeed_config." + leaf, line_of(it->first), it->second, file};
    if (from_json && in_json_file(leaf))
      e.fail("nothing beside deepspeed_config_file",
             "with a DeepSpeed JSON file its settings come from the file, as Accelerate requires: set it there "
             "(zero_optimization, " + accumulation_key() + ", gradient_clipping) and remove it here");
    if (leaf == "deepspeed_config_file") {
      if (!e.node.IsNull() && !e.node.IsScalar()) e.fail("a path to a DeepSpeed JSON file");
    } else if (leaf == "zero_stage") {
      s.zero_stage = static_cast<int>(e.integer(0, 3));
      s.stage_source = "deepspeed_config zero_stage " + std::to_string(s.zero_stage);
      s.stage_line = e.line;
    } else if (leaf == "offload_optimizer_device" || leaf == "offload_param_device") {
      offload_device(e);
    } else if (leaf == "offload_optimizer_nvme_path" || leaf == "offload_param_nvme_path") {
      // Read only with an NVMe offload device, which is refused above.
    } else if (leaf == "zero3_init_flag") {
      if (e.boolean())
        e.fail("false", "zero3_init_flag builds the model already sharded, inside DeepSpeed's Python context, which "
                        "a C++ program has no equivalent of; set it to false (every rank builds the whole model, then "
                        "prepare broadcasts rank 0's and, at ZeRO stage 3, keeps only its shard)");
    } else if (leaf == "zero3_save_16bit_model") {
      if (e.boolean())
        s.notes.push_back("deepspeed_config.zero3_save_16bit_model ignored: xlaunch's checkpoints hold the full "
                          "model at every stage, and `xlaunch merge-weights CHECKPOINT OUT` writes it as safetensors");
    } else if (leaf == accumulation_key()) {
      s.accumulation_steps = static_cast<int>(e.integer(1, 1 << 20));
    } else if (leaf == "gradient_clipping") {
      if (!e.node.IsNull())
        s.notes.push_back("deepspeed_config.gradient_clipping " + e.text() +
                          " ignored: xlaunch has no clipping setting (DeepSpeed clips inside its engine's step); "
                          "call acc.clip_grad_norm_(params, " + e.text() + ") before the optimizer step");
    } else if (leaf == "deepspeed_hostfile") {
      if (e.node.IsScalar() && !is_none(e.text())) s.hostfile = e.text();
    } else if (leaf == "deepspeed_inclusion_filter" || leaf == "deepspeed_exclusion_filter") {
      if (!e.node.IsNull() && !(e.node.IsScalar() && is_none(e.text())))
        e.fail("none", "xlaunch does not filter the hostfile's machines or GPUs: list the machines to use in "
                       "mpi.hostfile or mpi.hosts, and the GPUs in gpu_ids");
    } else if (leaf == "deepspeed_multinode_launcher") {
      if (!e.node.IsNull())
        s.notes.push_back("deepspeed_config.deepspeed_multinode_launcher ignored: mpirun starts the ranks of every "
                          "machine");
    } else if (leaf == "deepspeed_moe_layer_cls_names") {
      if (!e.node.IsNull())
        s.notes.push_back("deepspeed_config.deepspeed_moe_layer_cls_names ignored: it names Python classes for ZeRO "
                          "stage 3");
    } else {
      unknown.push_back(leaf);
    }
  }
  if (!unknown.empty()) {
    std::string names;
    for (const auto& u : unknown) names += (names.empty() ? "" : ", ") + u;
    s.notes.push_back("deepspeed_config keys Accelerate does not read either, ignored: " + names);
  }
  return s;
}

// ---- A DeepSpeed JSON file. --------------------------------------------------------------------

namespace {

using nlohmann::json;

struct JsonCtx {
  const std::string& file;
  [[noreturn]] void fail(const std::string& key, const json& v, const std::string& allowed,
                         const std::string& hint = "") const {
    refuse(file, key, 0, v.is_string() ? "'" + v.get<std::string>() + "'" : "'" + v.dump() + "'", allowed, hint);
  }
};

bool is_auto(const json& v) { return v.is_string() && v.get<std::string>() == "auto"; }

// An offload section: {"device": "none" | "cpu" | "nvme", ...}.
void json_offload(const JsonCtx& ctx, const json& zero, const char* name) {
  if (!zero.contains(name) || zero[name].is_null()) return;
  const json& o = zero[name];
  const std::string key = std::string("zero_optimization.") + name + ".device";
  if (!o.is_object()) ctx.fail(std::string("zero_optimization.") + name, o, "an object with \"device\": \"none\"");
  if (o.contains("device") &&
      !(o["device"].is_null() || (o["device"].is_string() && is_none(o["device"].get<std::string>()))))
    ctx.fail(key, o["device"], "\"none\"", kOffload);
}

int json_stage(const JsonCtx& ctx, const json& zero) {
  if (!zero.contains("stage")) return 0;
  const json& v = zero["stage"];
  if (!v.is_number_integer() || v.get<long>() < 0 || v.get<long>() > 3)
    ctx.fail("zero_optimization.stage", v, "0, 1, 2 or 3");
  return v.get<int>();
}

}  // namespace

DeepSpeedSettings read_deepspeed_json(const std::string& text, const std::string& file) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    refuse(file, "", 0, std::string("malformed JSON: ") + e.what(), "a DeepSpeed JSON config", "");
  }
  if (!j.is_object()) refuse(file, "", 0, "JSON that is not an object", "a DeepSpeed JSON config", "");
  const JsonCtx ctx{file};
  DeepSpeedSettings s;
  s.zero_stage = 0;  // DeepSpeed's default without a zero_optimization section
  std::vector<std::string> ignored;
  for (const auto& [key, v] : j.items()) {
    if (key == "zero_optimization") {
      if (!v.is_object()) ctx.fail(key, v, "an object");
      s.zero_stage = json_stage(ctx, v);
      for (const char* legacy : {"cpu_offload", "cpu_offload_params"})
        if (v.contains(legacy) && v[legacy] == true)
          ctx.fail(std::string("zero_optimization.") + legacy, v[legacy], "false", kOffload);
      json_offload(ctx, v, "offload_optimizer");
      json_offload(ctx, v, "offload_param");
    } else if (key == accumulation_key()) {
      if (is_auto(v)) continue;
      if (!v.is_number_integer() || v.get<long>() < 1 || v.get<long>() > (1 << 20))
        ctx.fail(key, v, "\"auto\" or an integer from 1 to 1048576");
      s.accumulation_steps = v.get<int>();
    } else if (key == "gradient_clipping") {
      if (is_auto(v) || v.is_null()) continue;
      const std::string value = v.is_number() ? show(v.get<double>()) : v.dump();
      s.notes.push_back(file + ": gradient_clipping " + value +
                        " ignored: xlaunch has no clipping setting (DeepSpeed clips inside its engine's step); call "
                        "acc.clip_grad_norm_(params, " + value + ") before the optimizer step");
    } else if (key == "fp16" || key == "bf16") {
      const json enabled = v.is_object() && v.contains("enabled") ? v["enabled"] : json(false);
      if (enabled == true) s.mixed_precision = key;
      else if (!is_auto(enabled) && enabled != false) ctx.fail(key + ".enabled", enabled, "true, false or \"auto\"");
    } else if (key == "optimizer" || key == "scheduler") {
      ctx.fail(key, v, "no " + key + " section",
               "xlaunch steps the training program's own torch::optim " + key +
                   " (as Accelerate's DummyOptim / DummyScheduler stand for DeepSpeed's); build it in the program "
                   "with these settings and remove the section");
    } else {
      ignored.push_back(key);
    }
  }
  s.stage_source = "deepspeed_config_file " + file + " zero_optimization.stage " + std::to_string(s.zero_stage);
  if (!ignored.empty()) {
    std::string names;
    for (const auto& k : ignored) names += (names.empty() ? "" : ", ") + k;
    s.notes.push_back(file + ": DeepSpeed engine settings that mean nothing to xlaunch, ignored: " + names);
  }
  return s;
}

// ---- Applying it to the loaded file. ------------------------------------------------------------

void apply_deepspeed(const YAML::Node& root, LoadedConfig& out) {
  const YAML::Node section = root["deepspeed_config"];
  const auto at = out.lines.find("deepspeed_config");
  const int section_line = at == out.lines.end() ? out.lines["distributed_type"] : at->second;
  const DeepSpeedSettings s = read_deepspeed_section(section ? section : YAML::Node(), out.file);
  out.unsupported.erase(std::remove(out.unsupported.begin(), out.unsupported.end(), "deepspeed_config"),
                        out.unsupported.end());
  LaunchConfig& c = out.config;
  if (c.use_cpu) c.distributed_type = DistributedType::MultiCpu;

  take(out, setting_of(env::kZeroStage), std::to_string(s.zero_stage), s.stage_source,
       s.stage_line ? s.stage_line : section_line);
  const std::string accumulation = accumulation_key();
  if (s.accumulation_steps)
    take(out, setting_of(env::kGradAccumSteps), std::to_string(*s.accumulation_steps),
         "DeepSpeed's " + accumulation + " " + std::to_string(*s.accumulation_steps), section_line);
  if (!s.hostfile.empty())
    take(out, *find_setting("mpi.hostfile"), s.hostfile, "deepspeed_hostfile " + s.hostfile, section_line);
  if (s.mixed_precision)
    take(out, setting_of(env::kMixedPrecision), *s.mixed_precision, "DeepSpeed's " + *s.mixed_precision + " enabled",
         section_line);

  out.notes.push_back("accelerate config: " + s.stage_source + " (no offload) runs as xlaunch ddp.zero_stage " +
                      std::to_string(s.zero_stage) + " (docs/memory.md)");
  if (s.accumulation_steps)
    out.notes.push_back("accelerate config: DeepSpeed's " + accumulation + " " + std::to_string(*s.accumulation_steps) +
                        " taken as " + accumulation);
  if (!s.hostfile.empty())
    out.notes.push_back("accelerate config: deepspeed_hostfile taken as mpi.hostfile (the same 'host slots=N' lines)");
  out.notes.insert(out.notes.end(), s.notes.begin(), s.notes.end());
}

}  // namespace xlaunch::config::detail
