// ddp.zero_stage in the file, and Accelerate's DeepSpeed settings read as it: every accepted case
// with the note `xlaunch run` prints, every refused case with the key and the fix in its message.
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>

#include "config_test_util.h"
#include "scratch_dir.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"

using namespace xlaunch::config;

using xlaunch::test::contains;
using xlaunch::test::error_of;

namespace {

std::string all_notes(const LoadedConfig& l) {
  std::string s;
  for (const auto& n : l.notes) s += n + "\n";
  return s;
}

// An Accelerate DEEPSPEED file, as `accelerate config` writes one, with `ds` as its deepspeed_config.
std::string deepspeed_file(const std::string& ds) {
  return "compute_environment: LOCAL_MACHINE\n"
         "debug: false\n"
         "deepspeed_config:\n" +
         ds +
         "distributed_type: DEEPSPEED\n"
         "downcast_bf16: 'no'\n"
         "machine_rank: 0\n"
         "main_training_function: main\n"
         "mixed_precision: bf16\n"
         "num_machines: 1\n"
         "num_processes: 2\n"
         "rdzv_backend: static\n"
         "same_network: true\n"
         "use_cpu: false\n";
}

}  // namespace

TEST(ZeroStage, DefaultsToZeroAndTakesOneAndTwo) {
  EXPECT_EQ(parse_config("{}", "t.yaml").config.ddp.zero_stage, 0);
  for (int stage : {0, 1, 2}) {
    const LoadedConfig l = parse_config("ddp:\n  zero_stage: " + std::to_string(stage) + "\n", "t.yaml");
    EXPECT_EQ(l.config.ddp.zero_stage, stage);
    EXPECT_TRUE(std::find(l.defaulted.begin(), l.defaulted.end(), "ddp.zero_stage") == l.defaulted.end());
  }
  LaunchConfig c;
  c.ddp.zero_stage = 2;
  EXPECT_TRUE(contains(to_yaml(c), "  zero_stage: 2\n")) << to_yaml(c);
  EXPECT_EQ(parse_config(to_yaml(c), "t.yaml").config.ddp.zero_stage, 2);
}

TEST(ZeroStage, StageThreeAndTheFsdpSectionAreRead) {
  const LoadedConfig l = parse_config("ddp:\n  zero_stage: 3\nfsdp:\n  prefetch: 2\n  reshard_after_forward: false\n", "t");
  EXPECT_EQ(l.config.ddp.zero_stage, 3);
  EXPECT_EQ(l.config.fsdp.prefetch, 2);
  EXPECT_FALSE(l.config.fsdp.reshard_after_forward);
  EXPECT_EQ(parse_config(to_yaml(l.config), "t").config.fsdp.prefetch, 2);
  const ConfigErrorInfo e = error_of("ddp:\n  zero_stage: 4\n");
  EXPECT_EQ(e.key, "ddp.zero_stage");
  EXPECT_EQ(e.allowed, "0, 1, 2 or 3");
  const ConfigErrorInfo p = error_of("fsdp:\n  prefetch: -1\n");
  EXPECT_EQ(p.key, "fsdp.prefetch");
  EXPECT_EQ(p.line, 2);
}

TEST(ZeroStage, PowerSgdWithStageThreeIsRefusedNamingTheStage) {
  const ConfigErrorInfo e = error_of("ddp:\n  zero_stage: 3\n  comm_hook: powersgd\n");
  EXPECT_EQ(e.key, "ddp.comm_hook");
  EXPECT_EQ(e.found, "'powersgd' with ddp.zero_stage 3");
  EXPECT_TRUE(contains(e.hint, "no matrix to approximate")) << e.hint;
}

TEST(ZeroStage, OtherValuesAreRefusedWithWhatEachStageShards) {
  for (const char* v : {"-1", "4", "two"}) {
    const ConfigErrorInfo e = error_of(std::string("ddp:\n  zero_stage: ") + v + "\n");
    EXPECT_EQ(e.key, "ddp.zero_stage") << v;
    if (std::string(v) != "two")
      EXPECT_TRUE(contains(e.hint, "0 (no sharding), 1 (optimizer state sharded), 2 (optimizer state and gradients "
                                   "sharded) or 3 (optimizer state, gradients and parameters sharded)")) << e.hint;
  }
}

TEST(ZeroStage, PowerSgdWithStageTwoIsRefusedWithTheReason) {
  const ConfigErrorInfo e = error_of("ddp:\n  comm_hook: powersgd\n  zero_stage: 2\n");
  EXPECT_EQ(e.key, "ddp.comm_hook");
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.found, "'powersgd' with ddp.zero_stage 2");
  EXPECT_TRUE(contains(e.hint, "PowerSGD approximates whole weight matrices")) << e.hint;
  EXPECT_TRUE(contains(e.hint, "only a shard of each")) << e.hint;
  EXPECT_TRUE(contains(e.hint, "ddp.zero_stage 1 with powersgd, or comm_hook none, fp16 or bf16")) << e.hint;
  // Stage 1 still allreduces whole buckets, and the other hooks work on shards.
  EXPECT_EQ(parse_config("ddp:\n  comm_hook: powersgd\n  zero_stage: 1\n", "t").config.ddp.zero_stage, 1);
  for (const char* hook : {"none", "fp16", "bf16"})
    EXPECT_EQ(parse_config(std::string("ddp:\n  comm_hook: ") + hook + "\n  zero_stage: 2\n", "t").config.ddp.zero_stage, 2);
}

// ---- Accelerate's DeepSpeed settings ----------------------------------------------------------

TEST(AccelerateDeepSpeed, StageTwoWithoutOffloadRunsAsZeroStageTwoWithANote) {
  const std::string text = deepspeed_file(
      "  gradient_accumulation_steps: 4\n"
      "  gradient_clipping: 1.0\n"
      "  offload_optimizer_device: none\n"
      "  offload_param_device: none\n"
      "  zero3_init_flag: false\n"
      "  zero_stage: 2\n");
  const LoadedConfig l = parse_config(text, "ds.yaml");
  EXPECT_EQ(l.config.distributed_type, DistributedType::MultiGpu);
  EXPECT_EQ(l.config.num_processes, 2);
  EXPECT_EQ(l.config.ddp.zero_stage, 2);
  EXPECT_EQ(l.config.gradient_accumulation_steps, 4);
  EXPECT_EQ(l.config.mixed_precision, MixedPrecision::Bf16);
  EXPECT_EQ(l.lines.at("ddp.zero_stage"), 9);  // deepspeed_config's zero_stage line
  // Mapped, so not among the ignored Accelerate settings, and not defaulted.
  EXPECT_TRUE(std::find(l.unsupported.begin(), l.unsupported.end(), "deepspeed_config") == l.unsupported.end());
  EXPECT_TRUE(std::find(l.defaulted.begin(), l.defaulted.end(), "ddp.zero_stage") == l.defaulted.end());
  const std::string notes = all_notes(l);
  EXPECT_TRUE(contains(notes, "accelerate config: deepspeed_config zero_stage 2 (no offload) runs as xlaunch "
                              "ddp.zero_stage 2 (docs/memory.md)\n"))
      << notes;
  EXPECT_TRUE(contains(notes, "gradient_accumulation_steps 4 taken as gradient_accumulation_steps")) << notes;
  EXPECT_TRUE(contains(notes, "deepspeed_config.gradient_clipping 1.0 ignored: xlaunch has no clipping setting")) << notes;
  EXPECT_TRUE(contains(notes, "acc.clip_grad_norm_(params, 1.0)")) << notes;
  // The config xlaunch writes from it is a plain MULTI_GPU one at stage 2.
  const std::string yaml = to_yaml(l.config);
  EXPECT_TRUE(contains(yaml, "distributed_type: MULTI_GPU")) << yaml;
  EXPECT_TRUE(contains(yaml, "zero_stage: 2")) << yaml;
}

TEST(AccelerateDeepSpeed, StageOneAndStageZeroAndTheDefault) {
  LoadedConfig l = parse_config(deepspeed_file("  zero_stage: 1\n  offload_optimizer_device: none\n"), "t");
  EXPECT_EQ(l.config.ddp.zero_stage, 1);
  EXPECT_TRUE(contains(all_notes(l), "deepspeed_config zero_stage 1 (no offload) runs as xlaunch ddp.zero_stage 1"));
  l = parse_config(deepspeed_file("  zero_stage: 0\n"), "t");
  EXPECT_EQ(l.config.ddp.zero_stage, 0);
  // Accelerate's DeepSpeedPlugin takes stage 2 when the file names none.
  l = parse_config(deepspeed_file("  gradient_accumulation_steps: 1\n"), "t");
  EXPECT_EQ(l.config.ddp.zero_stage, 2);
  EXPECT_TRUE(contains(all_notes(l), "deepspeed_config without zero_stage (Accelerate's default, 2) (no offload) runs as "
                                     "xlaunch ddp.zero_stage 2"))
      << all_notes(l);
  l = parse_config("distributed_type: DEEPSPEED\nnum_processes: 2\nuse_cpu: true\n", "t");
  EXPECT_EQ(l.config.distributed_type, DistributedType::MultiCpu);
  EXPECT_EQ(l.config.ddp.zero_stage, 2);
}

TEST(AccelerateDeepSpeed, TheDataFileOfAnAccelerateUserLoads) {
  const LoadedConfig l = load_config(XLAUNCH_TEST_DATA "/accelerate_deepspeed.yaml", 2);
  EXPECT_EQ(l.config.ddp.zero_stage, 2);
  EXPECT_EQ(l.config.mixed_precision, MixedPrecision::Fp16);
  EXPECT_EQ(l.lines.at("ddp.zero_stage"), 6);
}

TEST(AccelerateDeepSpeed, StageThreeIsTakenAsZeroStageThree) {
  const LoadedConfig l = parse_config(deepspeed_file("  zero3_init_flag: false\n  zero_stage: 3\n"), "t");
  EXPECT_EQ(l.config.ddp.zero_stage, 3);
  const ConfigErrorInfo e = error_of(deepspeed_file("  zero_stage: 4\n"));
  EXPECT_EQ(e.key, "deepspeed_config.zero_stage");
}

TEST(AccelerateDeepSpeed, OffloadIsRefusedByNameWithTheFix) {
  for (const char* key : {"offload_optimizer_device", "offload_param_device"})
    for (const char* device : {"cpu", "nvme"}) {
      const ConfigErrorInfo e = error_of(deepspeed_file(std::string("  ") + key + ": " + device + "\n  zero_stage: 2\n"));
      EXPECT_EQ(e.key, std::string("deepspeed_config.") + key);
      EXPECT_EQ(e.line, 4);
      EXPECT_EQ(e.found, std::string("'") + device + "'");
      EXPECT_EQ(e.allowed, "none");
      EXPECT_TRUE(contains(e.hint, "offloading to the CPU or NVMe is not built; set it to none")) << e.hint;
    }
}

TEST(AccelerateDeepSpeed, Zero3InitFlagIsRefusedByName) {
  const ConfigErrorInfo e = error_of(deepspeed_file("  zero3_init_flag: true\n  zero_stage: 2\n"));
  EXPECT_EQ(e.key, "deepspeed_config.zero3_init_flag");
  EXPECT_EQ(e.allowed, "false");
  EXPECT_TRUE(contains(e.hint, "at ZeRO stage 3, keeps only its shard")) << e.hint;
  EXPECT_TRUE(contains(e.hint, "set it to false")) << e.hint;
}

TEST(AccelerateDeepSpeed, HostFiltersAreRefusedAndTheHostfileIsTaken) {
  ConfigErrorInfo e = error_of(deepspeed_file("  deepspeed_inclusion_filter: host1@host2\n"));
  EXPECT_EQ(e.key, "deepspeed_config.deepspeed_inclusion_filter");
  EXPECT_TRUE(contains(e.hint, "mpi.hostfile or mpi.hosts")) << e.hint;
  const LoadedConfig l = parse_config(deepspeed_file("  deepspeed_hostfile: /job/hostfile\n"
                                                     "  deepspeed_multinode_launcher: standard\n"
                                                     "  deepspeed_exclusion_filter: none\n"),
                                      "t");
  EXPECT_EQ(l.config.mpi.hostfile, "/job/hostfile");
  EXPECT_TRUE(contains(all_notes(l), "deepspeed_hostfile taken as mpi.hostfile")) << all_notes(l);
  EXPECT_TRUE(contains(all_notes(l), "deepspeed_multinode_launcher ignored: mpirun starts")) << all_notes(l);
}

TEST(AccelerateDeepSpeed, AValueTheFileAlsoSetsItselfMustAgree) {
  const ConfigErrorInfo e =
      error_of(deepspeed_file("  zero_stage: 2\n") + "ddp:\n  zero_stage: 1\n");
  EXPECT_EQ(e.key, "ddp.zero_stage");
  EXPECT_EQ(e.found, "'1' here, and deepspeed_config zero_stage 2");
  EXPECT_TRUE(contains(e.hint, "remove one of the two")) << e.hint;
  EXPECT_EQ(parse_config(deepspeed_file("  zero_stage: 1\n") + "ddp:\n  zero_stage: 1\n", "t").config.ddp.zero_stage, 1);
  const ConfigErrorInfo g = error_of(deepspeed_file("  gradient_accumulation_steps: 4\n") +
                                     "gradient_accumulation_steps: 2\n");
  EXPECT_EQ(g.key, "gradient_accumulation_steps");
}

TEST(AccelerateDeepSpeed, PowerSgdWithTheMappedStageTwoIsRefused) {
  const ConfigErrorInfo e = error_of(deepspeed_file("  zero_stage: 2\n") + "ddp:\n  comm_hook: powersgd\n");
  EXPECT_EQ(e.key, "ddp.comm_hook");
  EXPECT_TRUE(contains(e.hint, "no matrix to approximate")) << e.hint;
}

TEST(AccelerateDeepSpeed, ALeftoverSectionWithoutDeepSpeedIsStillIgnored) {
  const LoadedConfig l = parse_config("distributed_type: MULTI_CPU\nnum_processes: 2\ndeepspeed_config:\n  zero_stage: 3\n", "t");
  EXPECT_EQ(l.config.ddp.zero_stage, 0);
  EXPECT_EQ(l.unsupported, std::vector<std::string>{"deepspeed_config"});
}

// ---- deepspeed_config_file: a DeepSpeed JSON file ----------------------------------------------

class DeepSpeedJson : public ::testing::Test {
 protected:
  xlaunch::test::ScratchDir scratch;
  std::string json_path() const { return scratch.path + "/ds_config.json"; }
  std::string with_json(const std::string& json, const std::string& extra = "") {
    std::ofstream(json_path()) << json;
    return deepspeed_file("  deepspeed_config_file: " + json_path() + "\n  zero3_init_flag: false\n" + extra);
  }
};

TEST_F(DeepSpeedJson, StageAndAccumulationAreTakenAndEngineKnobsNamedAsIgnored) {
  const LoadedConfig l = parse_config(with_json(R"({
    "bf16": {"enabled": "auto"},
    "zero_optimization": {"stage": 1, "offload_optimizer": {"device": "none"}, "overlap_comm": true},
    "gradient_accumulation_steps": 8,
    "gradient_clipping": "auto",
    "train_micro_batch_size_per_gpu": "auto",
    "steps_per_print": 100
  })"),
                                      "ds.yaml");
  EXPECT_EQ(l.config.ddp.zero_stage, 1);
  EXPECT_EQ(l.config.gradient_accumulation_steps, 8);
  const std::string notes = all_notes(l);
  EXPECT_TRUE(contains(notes, "accelerate config: deepspeed_config_file " + json_path() +
                                  " zero_optimization.stage 1 (no offload) runs as xlaunch ddp.zero_stage 1"))
      << notes;
  EXPECT_TRUE(contains(notes, "ignored: steps_per_print, train_micro_batch_size_per_gpu")) << notes;
}

TEST_F(DeepSpeedJson, NoZeroSectionIsStageZeroAsInDeepSpeed) {
  EXPECT_EQ(parse_config(with_json("{\"gradient_accumulation_steps\": \"auto\"}"), "t").config.ddp.zero_stage, 0);
}

TEST_F(DeepSpeedJson, StageThreeIsTakenAndOffloadAndAnOptimizerAreRefusedNamingTheJsonKey) {
  EXPECT_EQ(parse_config(with_json(R"({"zero_optimization": {"stage": 3}})"), "t").config.ddp.zero_stage, 3);
  ConfigErrorInfo e = error_of(with_json(R"({"zero_optimization": {"stage": 4}})"));
  EXPECT_EQ(e.file, json_path());
  EXPECT_EQ(e.key, "zero_optimization.stage");
  EXPECT_EQ(e.allowed, "0, 1, 2 or 3");
  e = error_of(with_json(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}})"));
  EXPECT_EQ(e.key, "zero_optimization.offload_optimizer.device");
  EXPECT_EQ(e.found, "'cpu'");
  EXPECT_TRUE(contains(e.hint, "set it to none")) << e.hint;
  e = error_of(with_json(R"({"zero_optimization": {"stage": 2, "offload_param": {"device": "nvme"}}})"));
  EXPECT_EQ(e.key, "zero_optimization.offload_param.device");
  e = error_of(with_json(R"({"zero_optimization": {"stage": 2, "cpu_offload": true}})"));
  EXPECT_EQ(e.key, "zero_optimization.cpu_offload");
  e = error_of(with_json(R"({"optimizer": {"type": "AdamW", "params": {"lr": "auto"}}})"));
  EXPECT_EQ(e.key, "optimizer");
  EXPECT_TRUE(contains(e.hint, "training program's own torch::optim optimizer")) << e.hint;
}

TEST_F(DeepSpeedJson, PrecisionMustAgreeWithTheFile) {
  const ConfigErrorInfo e = error_of(with_json(R"({"fp16": {"enabled": true}})"));  // the file says bf16
  EXPECT_EQ(e.key, "mixed_precision");
  EXPECT_EQ(e.found, "'bf16' here, and DeepSpeed's fp16 enabled");
  EXPECT_EQ(parse_config(with_json(R"({"bf16": {"enabled": true}})"), "t").config.mixed_precision, MixedPrecision::Bf16);
}

TEST_F(DeepSpeedJson, SettingsBesideTheFileAreRefusedAsAccelerateRefusesThem) {
  const ConfigErrorInfo e = error_of(with_json("{}", "  zero_stage: 2\n"));
  EXPECT_EQ(e.key, "deepspeed_config.zero_stage");
  EXPECT_TRUE(contains(e.hint, "set it there")) << e.hint;
}

TEST_F(DeepSpeedJson, MissingAndMalformedFilesAreNamed) {
  ConfigErrorInfo e = error_of(deepspeed_file("  deepspeed_config_file: " + scratch.path + "/none.json\n"));
  EXPECT_EQ(e.key, "deepspeed_config.deepspeed_config_file");
  EXPECT_TRUE(contains(e.found, "cannot be read")) << e.found;
  e = error_of(with_json("{\"zero_optimization\": "));
  EXPECT_EQ(e.file, json_path());
  EXPECT_TRUE(contains(e.found, "malformed JSON")) << e.found;
}
