// Accelerate's own files: what `accelerate config` and `accelerate config default` write, in every
// version's format (YAML, JSON, with nulls), and the compatibility table of
// docs/config-reference.md checked against the loader.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include "config_test_util.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"
#include "xlaunch/wrap_policy.h"

using namespace xlaunch::config;

using xlaunch::test::contains;
using xlaunch::test::error_of;

namespace {

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// The ConfigError loading `path` throws; fails the test when none is thrown.
ConfigErrorInfo load_error(const std::string& path) {
  try {
    load_config(path);
  } catch (const ConfigError& e) {
    return e.info();
  }
  ADD_FAILURE() << "no ConfigError for " << path;
  return {};
}

}  // namespace

TEST(ConfigNull, EveryKeyGivenAsNullTakesItsDefaultAndIsListedAsDefaulted) {
  const std::string defaults = to_yaml(LaunchConfig{});
  for (const std::string& key : schema_keys()) {
    const size_t dot = key.find('.');
    for (const char* null : {"null", "~", ""}) {
      const std::string text = dot == std::string::npos
                                   ? key + ": " + null + "\n"
                                   : key.substr(0, dot) + ":\n  " + key.substr(dot + 1) + ": " + null + "\n";
      const LoadedConfig l = parse_config(text, "t.yaml");
      EXPECT_EQ(to_yaml(l.config), defaults) << text;
      EXPECT_EQ(l.defaulted, schema_keys()) << text;
    }
  }
}

TEST(ConfigNull, ANullSectionLeavesAllItsKeysAtTheirDefaults) {
  const LoadedConfig l = parse_config("mpi: null\nddp: ~\nloader:\n", "t.yaml");
  EXPECT_EQ(to_yaml(l.config), to_yaml(LaunchConfig{}));
  EXPECT_EQ(l.defaulted, schema_keys());
}

TEST(ConfigNull, NullNextToValuesKeepsTheValues) {
  const LoadedConfig l = parse_config(
      "distributed_type: MULTI_CPU\nnum_processes: 4\nmain_process_ip: null\nmain_process_port: null\n", "t.yaml");
  EXPECT_EQ(l.config.num_processes, 4);
  EXPECT_EQ(l.config.main_process_ip, "");
  EXPECT_EQ(l.config.main_process_port, 0);
  EXPECT_TRUE(has(l.defaulted, "main_process_ip"));
  EXPECT_TRUE(has(l.defaulted, "main_process_port"));
  EXPECT_FALSE(has(l.defaulted, "num_processes"));
}

TEST(ConfigAccelerate, MultiGpuFileLoadsAndReportsAccelerateOnlyKeys) {
  const LoadedConfig l = load_config(XLAUNCH_TEST_DATA "/accelerate_multi_gpu.yaml", 2);
  EXPECT_EQ(l.config.distributed_type, DistributedType::MultiGpu);
  EXPECT_EQ(l.config.num_processes, 2);
  EXPECT_EQ(l.config.gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(l.config.mixed_precision, MixedPrecision::Bf16);
  const std::vector<std::string> expected = {"downcast_bf16", "dynamo_config", "enable_cpu_affinity",
                                             "main_training_function", "rdzv_backend", "same_network",
                                             "tpu_env", "tpu_use_cluster", "tpu_use_sudo"};
  EXPECT_EQ(l.unsupported, expected);
  // xlaunch's own keys were absent, so they fell back to defaults.
  EXPECT_NE(std::find(l.defaulted.begin(), l.defaulted.end(), "ddp.bucket_cap_mb"), l.defaulted.end());
  EXPECT_EQ(std::find(l.defaulted.begin(), l.defaulted.end(), "num_processes"), l.defaulted.end());
}

TEST(ConfigAccelerate, MultiCpuFileTakesTheMpirunHostfile) {
  const LoadedConfig l = load_config(XLAUNCH_TEST_DATA "/accelerate_multi_cpu.yaml", 0);
  EXPECT_EQ(l.config.distributed_type, DistributedType::MultiCpu);
  EXPECT_EQ(l.config.num_processes, 4);
  EXPECT_EQ(l.config.num_machines, 2);
  EXPECT_EQ(l.config.main_process_ip, "10.0.0.1");
  EXPECT_EQ(l.config.main_process_port, 29500);
  EXPECT_TRUE(l.config.use_cpu);
  EXPECT_EQ(l.config.mpi.hostfile, "/etc/hosts.mpi");
  EXPECT_NE(std::find(l.unsupported.begin(), l.unsupported.end(), "mpirun_config"), l.unsupported.end());
  EXPECT_NE(std::find(l.unsupported.begin(), l.unsupported.end(), "ipex_config"), l.unsupported.end());
  ASSERT_EQ(l.notes.size(), 1u);
}

TEST(ConfigAccelerate, NoFileLoads) {
  const LoadedConfig l = load_config(XLAUNCH_TEST_DATA "/accelerate_no.yaml", 0);
  EXPECT_EQ(l.config.distributed_type, DistributedType::No);
  EXPECT_EQ(l.config.mixed_precision, MixedPrecision::Fp16);
  EXPECT_TRUE(l.config.gpu_ids.empty());
}

TEST(ConfigAccelerate, DeepSpeedTypeRunsAsItsZeroStage) {
  // Stage 2 without offload: xlaunch's own ZeRO stage 2 (config_zero_test.cpp has every case).
  const LoadedConfig l = load_config(XLAUNCH_TEST_DATA "/accelerate_deepspeed.yaml", 2);
  EXPECT_EQ(l.config.distributed_type, DistributedType::MultiGpu);
  EXPECT_EQ(l.config.ddp.zero_stage, 2);
  EXPECT_TRUE(l.unsupported.empty());
}

TEST(ConfigAccelerate, OtherTypesAreRefusedWithTheAllowedList) {
  const ConfigErrorInfo e = error_of("distributed_type: XLA\n");
  EXPECT_EQ(e.key, "distributed_type");
  EXPECT_EQ(e.line, 1);
  EXPECT_EQ(e.found, "'XLA'");
  EXPECT_TRUE(contains(e.allowed, "NO, MULTI_CPU, MULTI_GPU, DEEPSPEED")) << e.allowed;
}

// Every key of the schema has its row in docs/config-reference.md's key table.
TEST(ConfigReference, EverySchemaKeyIsDocumented) {
  std::ifstream in(XLAUNCH_CONFIG_DOC);
  ASSERT_TRUE(in) << XLAUNCH_CONFIG_DOC;
  std::stringstream doc;
  doc << in.rdbuf();
  for (const std::string& key : schema_keys())
    EXPECT_TRUE(contains(doc.str(), "\n| `" + key + "` | ")) << key << " has no row in " << XLAUNCH_CONFIG_DOC;
}

TEST(ConfigAccelerate, OlderYamlWithNullsLoads) {
  const LoadedConfig l = load_config(XLAUNCH_TEST_DATA "/accelerate_multi_gpu_nulls.yaml", 2);
  EXPECT_EQ(l.config.distributed_type, DistributedType::MultiGpu);
  EXPECT_EQ(l.config.num_processes, 2);
  EXPECT_EQ(l.config.mixed_precision, MixedPrecision::Bf16);
  EXPECT_EQ(l.config.main_process_ip, "");
  EXPECT_EQ(l.config.main_process_port, 0);
  EXPECT_TRUE(has(l.defaulted, "main_process_ip"));
  EXPECT_TRUE(has(l.defaulted, "main_process_port"));
  for (const char* k : {"deepspeed_config", "fsdp_config", "megatron_lm_config", "tpu_name", "tpu_zone"})
    EXPECT_TRUE(has(l.unsupported, k)) << k;
}

TEST(ConfigAccelerate, ConfigDefaultJsonLoads) {
  const LoadedConfig l = load_config(XLAUNCH_TEST_DATA "/accelerate_default_cpu.json", 0);
  EXPECT_EQ(l.config.distributed_type, DistributedType::No);
  EXPECT_EQ(l.config.num_processes, 1);
  EXPECT_TRUE(l.config.use_cpu);
  EXPECT_EQ(l.config.mixed_precision, MixedPrecision::No);
  const std::vector<std::string> expected = {"downcast_bf16",  "enable_cpu_affinity", "main_training_function",
                                             "rdzv_backend",   "same_network",        "tpu_use_cluster",
                                             "tpu_use_sudo"};
  EXPECT_EQ(l.unsupported, expected);
}

TEST(ConfigAccelerate, OlderConfigDefaultJsonWithNullsLoads) {
  const LoadedConfig l = load_config(XLAUNCH_TEST_DATA "/accelerate_default_gpu_nulls.json", 2);
  EXPECT_EQ(l.config.distributed_type, DistributedType::MultiGpu);
  EXPECT_EQ(l.config.num_processes, 2);
  EXPECT_EQ(l.config.mixed_precision, MixedPrecision::Fp16);
  EXPECT_TRUE(l.config.gpu_ids.empty());
  for (const char* k : {"gpu_ids", "main_process_ip", "main_process_port"}) EXPECT_TRUE(has(l.defaulted, k)) << k;
  EXPECT_TRUE(has(l.unsupported, "dynamo_backend"));
}

// Accelerate's FSDP2 file (what `accelerate config` writes) runs as ZeRO stage 3, saying so and
// naming what it ignores.
TEST(ConfigAccelerate, FsdpFileRunsAsZeroStageThree) {
  const LoadedConfig l = load_config(XLAUNCH_TEST_DATA "/accelerate_fsdp.yaml");
  EXPECT_EQ(l.config.distributed_type, DistributedType::MultiGpu);
  EXPECT_EQ(l.config.ddp.zero_stage, 3);
  EXPECT_TRUE(l.config.fsdp.reshard_after_forward);
  EXPECT_EQ(l.config.fsdp.prefetch, 1);
  EXPECT_FALSE(has(l.unsupported, "fsdp_config"));
  std::string notes;
  for (const auto& n : l.notes) notes += n + "\n";
  EXPECT_TRUE(contains(notes, "fsdp_config.fsdp_reshard_after_forward true runs as xlaunch ddp.zero_stage 3 with "
                              "fsdp.reshard_after_forward true")) << notes;
  // TRANSFORMER_BASED_WRAP naming no class: xlaunch's own units, said.
  EXPECT_EQ(l.config.fsdp.wrap, "auto");
  EXPECT_TRUE(contains(notes, "fsdp_config.fsdp_auto_wrap_policy TRANSFORMER_BASED_WRAP without "
                              "fsdp_transformer_layer_cls_to_wrap")) << notes;
  EXPECT_TRUE(contains(notes, "fsdp_config.fsdp_state_dict_type ignored")) << notes;
}

namespace {
std::string fsdp_file(const std::string& section) {
  return "distributed_type: FSDP\nnum_processes: 2\nuse_cpu: true\nfsdp_config:\n" + section;
}
}  // namespace

TEST(ConfigAccelerate, FsdpStrategiesMapToStagesAndPrefetch) {
  LoadedConfig l = parse_config(fsdp_file("  fsdp_sharding_strategy: SHARD_GRAD_OP\n  fsdp_backward_prefetch: NO_PREFETCH\n"), "t");
  EXPECT_EQ(l.config.distributed_type, DistributedType::MultiCpu);
  EXPECT_EQ(l.config.ddp.zero_stage, 3);
  EXPECT_FALSE(l.config.fsdp.reshard_after_forward);
  EXPECT_EQ(l.config.fsdp.prefetch, 0);
  EXPECT_EQ(parse_config(fsdp_file("  fsdp_sharding_strategy: 1\n"), "t").config.ddp.zero_stage, 3);
  EXPECT_EQ(parse_config(fsdp_file("  fsdp_sharding_strategy: NO_SHARD\n"), "t").config.ddp.zero_stage, 0);
  EXPECT_EQ(parse_config(fsdp_file("  fsdp_sharding_strategy: FULL_SHARD\n"), "t").config.ddp.shard_group, "world");
  // Hybrid sharding: sharded within each machine, replicated across machines (2 machines of 2).
  const auto two_machines = [](const std::string& section) {
    return "distributed_type: FSDP\nnum_processes: 4\nnum_machines: 2\nmpi:\n  hosts: [a, b]\nuse_cpu: true\n"
           "fsdp_config:\n" + section;
  };
  l = parse_config(two_machines("  fsdp_sharding_strategy: HYBRID_SHARD\n"), "t");
  EXPECT_EQ(l.config.ddp.zero_stage, 3);
  EXPECT_EQ(l.config.ddp.shard_group, "machine");
  EXPECT_TRUE(l.config.fsdp.reshard_after_forward);
  l = parse_config(two_machines("  fsdp_sharding_strategy: 5\n"), "t");  // HYBRID_SHARD_ZERO2
  EXPECT_EQ(l.config.ddp.zero_stage, 2);
  EXPECT_EQ(l.config.ddp.shard_group, "machine");
  EXPECT_EQ(parse_config("distributed_type: FSDP\nuse_cpu: true\nnum_processes: 2\n", "t").config.ddp.zero_stage, 3);
  l = parse_config(fsdp_file("  fsdp_version: 2\n  fsdp_reshard_after_forward: false\n"), "t");
  EXPECT_FALSE(l.config.fsdp.reshard_after_forward);
  EXPECT_FALSE(l.config.fsdp.activation_checkpointing);
  l = parse_config(fsdp_file("  fsdp_activation_checkpointing: true\n"), "t");
  EXPECT_TRUE(l.config.fsdp.activation_checkpointing);
  EXPECT_EQ(l.config.ddp.zero_stage, 3);
}

// Accelerate's wrap policies are fsdp.wrap's (xlaunch/wrap_policy.h).
TEST(ConfigAccelerate, FsdpWrapPoliciesMapToFsdpWrap) {
  const auto wrap_of = [](const std::string& section) { return parse_config(fsdp_file(section), "t").config.fsdp.wrap; };
  EXPECT_EQ(wrap_of("  fsdp_auto_wrap_policy: NO_WRAP\n"), "none");
  EXPECT_EQ(wrap_of("  fsdp_auto_wrap_policy: TRANSFORMER_BASED_WRAP\n  fsdp_transformer_layer_cls_to_wrap: "
                    "GPT2Block, LlamaDecoderLayer\n"),
            "type:GPT2Block,LlamaDecoderLayer");
  EXPECT_EQ(wrap_of("  fsdp_transformer_layer_cls_to_wrap: [Block, Attn]\n"), "type:Block,Attn");
  EXPECT_EQ(wrap_of("  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 2000000\n"), "size:2000000");
  EXPECT_EQ(wrap_of("  fsdp_auto_wrap_policy: size_based_wrap\n"), "size:100000000");
  EXPECT_EQ(wrap_of("  fsdp_min_num_params: 2000000\n"), "auto");
  EXPECT_EQ(wrap_of("  fsdp_sharding_strategy: FULL_SHARD\n"), "auto");
  // NO_SHARD has no units: the policy is not taken over.
  EXPECT_EQ(wrap_of("  fsdp_sharding_strategy: NO_SHARD\n  fsdp_auto_wrap_policy: NO_WRAP\n"), "auto");
  std::string notes;
  for (const auto& n : parse_config(fsdp_file("  fsdp_min_num_params: 5\n"), "t").notes) notes += n + "\n";
  EXPECT_TRUE(contains(notes, "fsdp_config without fsdp_config.fsdp_auto_wrap_policy: Accelerate wraps nothing"))
      << notes;
  EXPECT_TRUE(contains(notes, "fsdp_min_num_params ignored")) << notes;

  ConfigErrorInfo e = error_of(fsdp_file("  fsdp_auto_wrap_policy: LAMBDA\n"));
  EXPECT_EQ(e.key, "fsdp_config.fsdp_auto_wrap_policy");
  EXPECT_EQ(e.line, 5);
  EXPECT_TRUE(contains(e.allowed, "SIZE_BASED_WRAP")) << e.allowed;
  e = error_of(fsdp_file("  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: lots\n"));
  EXPECT_EQ(e.key, "fsdp_config.fsdp_min_num_params");
  // The file's own fsdp.wrap must agree with the policy.
  e = error_of(fsdp_file("  fsdp_auto_wrap_policy: NO_WRAP\n") + "fsdp:\n  wrap: auto\n");
  EXPECT_EQ(e.key, "fsdp.wrap");
  EXPECT_TRUE(contains(e.hint, "remove one of the two")) << e.hint;
}

// fsdp.wrap's spellings: what the file, XLAUNCH_FSDP_WRAP and the runtime read.
TEST(ConfigFsdpWrap, SpellingsParseAndBadOnesAreRefusedNamingTheKey) {
  using xlaunch::WrapPolicy;
  EXPECT_EQ(WrapPolicy::parse("auto")->kind, WrapPolicy::Kind::kAuto);
  EXPECT_EQ(WrapPolicy::parse("none")->kind, WrapPolicy::Kind::kNone);
  const auto type = WrapPolicy::parse("type:Block, gpt::Attn");
  ASSERT_TRUE(type);
  EXPECT_EQ(type->names, (std::vector<std::string>{"Block", "gpt::Attn"}));
  EXPECT_EQ(type->spelling(), "type:Block,gpt::Attn");
  EXPECT_TRUE(type->names_type("BlockImpl"));
  EXPECT_TRUE(type->names_type("(anonymous namespace)::BlockImpl"));
  EXPECT_TRUE(type->names_type("other::Block"));  // unqualified: any namespace
  EXPECT_TRUE(type->names_type("gpt::AttnImpl"));
  EXPECT_FALSE(type->names_type("other::AttnImpl"));  // qualified: that namespace only
  EXPECT_FALSE(type->names_type("BlockStack"));
  const auto name = WrapPolicy::parse("name:blocks.*,head");
  ASSERT_TRUE(name);
  EXPECT_TRUE(name->names_path("blocks.3"));
  EXPECT_TRUE(name->names_path("blocks.3.mlp"));
  EXPECT_TRUE(name->names_path("head"));
  EXPECT_FALSE(name->names_path("head.0"));
  EXPECT_FALSE(name->names_path("blocks"));
  EXPECT_EQ(WrapPolicy::parse("size:1000")->min_params, 1000);
  for (const char* bad : {"size:0", "size:", "size:1e6", "size:-3", "type:", "type:A,,B", "name:", "all", "Type:A",
                          "size:99999999999999999999"}) {
    std::string why;
    EXPECT_FALSE(WrapPolicy::parse(bad, &why)) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
  const ConfigErrorInfo e = error_of("fsdp:\n  wrap: size:big\n");
  EXPECT_EQ(e.key, "fsdp.wrap");
  EXPECT_EQ(e.line, 2);
  EXPECT_TRUE(contains(e.allowed, "type:NAME")) << e.allowed;
  EXPECT_EQ(parse_config("fsdp:\n  wrap: type:Block\n", "t").config.fsdp.wrap, "type:Block");
}

TEST(ConfigAccelerate, FsdpWhatCannotBeHonouredIsRefusedByKeyAndLine) {
  ConfigErrorInfo e = error_of(fsdp_file("  fsdp_sharding_strategy: HALF_SHARD\n"));
  EXPECT_EQ(e.key, "fsdp_config.fsdp_sharding_strategy");
  EXPECT_EQ(e.line, 5);
  EXPECT_TRUE(contains(e.allowed, "HYBRID_SHARD_ZERO2")) << e.allowed;
  // Hybrid sharding on one machine (Accelerate's default machine count): refused, saying why.
  e = error_of(fsdp_file("  fsdp_sharding_strategy: HYBRID_SHARD\n"));
  EXPECT_EQ(e.key, "ddp.shard_group");
  EXPECT_TRUE(contains(e.hint, "on one machine the machine is the whole job")) << e.hint;
  e = error_of(fsdp_file("  fsdp_offload_params: true\n"));
  EXPECT_EQ(e.key, "fsdp_config.fsdp_offload_params");
  EXPECT_EQ(e.allowed, "false");
  e = error_of(fsdp_file("  fsdp_sharding_strategy: NO_SHARD\n  fsdp_activation_checkpointing: true\n"));
  EXPECT_EQ(e.key, "fsdp_config.fsdp_activation_checkpointing");
  EXPECT_EQ(e.line, 6);
  EXPECT_TRUE(contains(e.hint, "FULL_SHARD or SHARD_GRAD_OP")) << e.hint;
  e = error_of(fsdp_file("  fsdp_version: 3\n"));
  EXPECT_EQ(e.key, "fsdp_config.fsdp_version");
  // A value the file also sets under xlaunch's own key must agree.
  e = error_of(fsdp_file("  fsdp_sharding_strategy: FULL_SHARD\n") + "ddp:\n  zero_stage: 2\n");
  EXPECT_EQ(e.key, "ddp.zero_stage");
  EXPECT_TRUE(contains(e.hint, "remove one of the two")) << e.hint;
}

TEST(ConfigAccelerate, TwoMachinesWithoutAHostfileAreRefusedSayingWhatMpirunNeeds) {
  const ConfigErrorInfo e = load_error(XLAUNCH_TEST_DATA "/accelerate_multi_gpu_2_machines.yaml");
  EXPECT_EQ(e.key, "num_machines");
  EXPECT_EQ(e.line, 12);
  EXPECT_TRUE(contains(e.allowed, "mpi.hostfile")) << e.allowed;
}

// Every row of the key table in docs/config-reference.md does what it says.
TEST(ConfigAccelerate, CompatibilityTableMatchesTheLoader) {
  std::ifstream in(XLAUNCH_CONFIG_DOC);
  ASSERT_TRUE(in) << XLAUNCH_CONFIG_DOC;
  std::stringstream doc;
  doc << in.rdbuf();
  const std::string text = doc.str();
  const std::regex row(R"(\n\| `([a-z][a-z0-9_]*)` \| (same|mapped|ignored|refused) \|)");
  int rows = 0;
  for (auto it = std::sregex_iterator(text.begin(), text.end(), row); it != std::sregex_iterator(); ++it, ++rows) {
    const std::string key = (*it)[1], status = (*it)[2];
    SCOPED_TRACE(key + ": " + status);
    if (status == "same") {
      EXPECT_TRUE(has(schema_keys(), key));
    } else if (status == "refused") {
      EXPECT_THROW(parse_config(key + ": true\n", "t.yaml"), ConfigError);
    } else {  // mapped or ignored: loads, and the key is named in the warning
      const LoadedConfig l = parse_config(key + ": " + (status == "mapped" ? "{}" : "x") + "\n", "t.yaml");
      EXPECT_EQ(l.unsupported, std::vector<std::string>{key});
    }
  }
  EXPECT_GT(rows, 50);
  const LoadedConfig mapped = parse_config("mpirun_config:\n  mpirun_hostfile: /h\n", "t.yaml");
  EXPECT_EQ(mapped.config.mpi.hostfile, "/h");
}
