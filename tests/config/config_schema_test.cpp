// The config schema: defaults, round trip, the keys of each part, saving. Every kind of bad input:
// config_errors_test.cpp; Accelerate's files: config_accelerate_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"
#include "config_test_util.h"
#include "scratch_dir.h"

using namespace xlaunch::config;

using xlaunch::test::contains;
using xlaunch::test::error_of;

TEST(ConfigDefaults, EmptyMappingGivesDefaultsAndListsEveryKeyAsDefaulted) {
  const LoadedConfig l = parse_config("{}", "t.yaml");
  const LaunchConfig d;
  EXPECT_EQ(l.config.distributed_type, DistributedType::No);
  EXPECT_EQ(l.config.num_processes, 1);
  EXPECT_EQ(l.config.mixed_precision, MixedPrecision::No);
  EXPECT_EQ(l.config.mpi.bind_to, "none");
  EXPECT_EQ(l.config.ddp.bucket_cap_mb, 25.0);
  EXPECT_EQ(l.config.timeout_s, 600);
  EXPECT_EQ(l.defaulted, schema_keys());
}

TEST(ConfigRoundTrip, EveryNonDefaultValueSurvivesSaveAndLoad) {
  LaunchConfig c;
  c.distributed_type = DistributedType::MultiGpu;
  c.num_processes = 4;
  c.num_machines = 2;
  c.machine_rank = 1;
  c.main_process_ip = "10.1.2.3";
  c.main_process_port = 29500;
  c.gpu_ids = {0, 1};
  c.mixed_precision = MixedPrecision::Bf16;
  c.gradient_accumulation_steps = 8;
  c.debug = true;
  c.num_cpu_threads_per_process = 6;
  c.mpi.hosts = {"node1", "node2"};
  c.mpi.bind_to = "core";
  c.mpi.map_by = "ppr:2:node";
  c.mpi.extra_args = {"--mca", "btl_tcp_if_include", "eth0"};
  c.ddp.bucket_cap_mb = 12.5;
  c.ddp.find_unused_parameters = true;
  c.ddp.broadcast_buffers = false;
  c.ddp.comm_hook = "powersgd";
  c.ddp.powersgd_rank = 4;
  c.ddp.powersgd_start_step = 0;
  c.ddp.zero_stage = 1;
  c.loader.num_workers = LoaderSection::kAutoWorkers;
  c.loader.pin_memory = false;
  c.loader.prefetch_factor = 4;
  c.log_dir = "/tmp/logs dir";
  c.max_restarts = 3;
  c.max_machine_failures = 5;
  c.timeout_s = 60;
  c.report = false;
  c.trace_dir = "/tmp/trace";
  c.trace_steps = 7;
  c.profile_ops = 5;
  c.record_shapes = true;
  c.deterministic = true;
  c.project_dir = "/runs/mnist";
  c.checkpoint.total_limit = 3;
  c.checkpoint.every_n_steps = 500;
  c.checkpoint.every_epoch = true;
  c.preempt_signal = "SIGUSR1";
  c.preempt_timeout_s = 300;
  c.log_with = {"tensorboard", "csv"};
  c.report_interval = 20;
  c.log_histograms_every_n_steps = 100;

  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path;
  const std::string path = dir + "/sub/dir/cfg.yaml";
  save_config(c, path);
  const LoadedConfig l = load_config(path, 2);
  EXPECT_TRUE(l.defaulted.empty());
  EXPECT_TRUE(l.unsupported.empty());
  EXPECT_EQ(to_yaml(l.config), to_yaml(c));
  EXPECT_EQ(l.config.gpu_ids, (std::vector<int>{0, 1}));
  EXPECT_EQ(l.config.mpi.extra_args, c.mpi.extra_args);
  EXPECT_EQ(l.config.loader.num_workers, LoaderSection::kAutoWorkers);
  EXPECT_EQ(l.config.log_dir, "/tmp/logs dir");
  EXPECT_EQ(l.config.ddp.bucket_cap_mb, 12.5);
  EXPECT_FALSE(l.config.ddp.broadcast_buffers);
  EXPECT_EQ(l.config.ddp.comm_hook, "powersgd");
  EXPECT_EQ(l.config.ddp.powersgd_rank, 4);
  EXPECT_EQ(l.config.ddp.powersgd_start_step, 0);
  EXPECT_EQ(l.config.ddp.zero_stage, 1);
  EXPECT_FALSE(l.config.report);
  EXPECT_EQ(l.config.trace_dir, "/tmp/trace");
  EXPECT_EQ(l.config.trace_steps, 7);
  EXPECT_EQ(l.config.profile_ops, 5);
  EXPECT_TRUE(l.config.record_shapes);
  EXPECT_TRUE(l.config.deterministic);
  EXPECT_FALSE(l.config.cudnn_benchmark);
  EXPECT_EQ(l.config.project_dir, "/runs/mnist");
  EXPECT_EQ(l.config.checkpoint.total_limit, 3);
  EXPECT_EQ(l.config.checkpoint.every_n_steps, 500);
  EXPECT_TRUE(l.config.checkpoint.every_epoch);
  EXPECT_EQ(l.config.preempt_signal, "SIGUSR1");
  EXPECT_EQ(l.config.preempt_timeout_s, 300);
  EXPECT_EQ(l.config.log_with, (std::vector<std::string>{"tensorboard", "csv"}));
  EXPECT_EQ(l.config.report_interval, 20);
  EXPECT_EQ(l.config.log_histograms_every_n_steps, 100);
}

TEST(ConfigTracking, DefaultsAndTheSpellingsOfLogWith) {
  const LaunchConfig d;
  EXPECT_TRUE(d.log_with.empty());
  EXPECT_EQ(d.report_interval, 50);
  EXPECT_EQ(d.log_histograms_every_n_steps, 0);
  using V = std::vector<std::string>;
  EXPECT_EQ(parse_config("project_dir: p\nlog_with: tensorboard\n", "t").config.log_with, V{"tensorboard"});
  EXPECT_EQ(parse_config("project_dir: p\nlog_with: all\n", "t").config.log_with, (V{"tensorboard", "jsonl", "csv"}));
  EXPECT_EQ(parse_config("project_dir: p\nlog_with: [csv, jsonl, csv]\n", "t").config.log_with, (V{"csv", "jsonl"}));
  EXPECT_EQ(parse_config("project_dir: p\nlog_with: jsonl,tensorboard\n", "t").config.log_with, (V{"jsonl", "tensorboard"}));
  EXPECT_TRUE(parse_config("log_with: none\n", "t").config.log_with.empty());
}

TEST(ConfigTracking, BadValuesAndMissingProjectDirAreNamed) {
  auto e = error_of("project_dir: p\nlog_with: wandb\n");
  EXPECT_EQ(e.key, "log_with");
  EXPECT_EQ(e.found, "'wandb'");
  EXPECT_TRUE(contains(e.allowed, "tensorboard, jsonl, csv or all")) << e.allowed;
  e = error_of("log_with: tensorboard\n");
  EXPECT_EQ(e.key, "log_with");
  EXPECT_TRUE(contains(e.hint, "set project_dir")) << e.hint;
  e = error_of("project_dir: p\nlog_with: tensorboard\nreport_interval: 0\n");
  EXPECT_EQ(e.key, "report_interval");
  e = error_of("project_dir: p\nlog_with: csv\nlog_histograms_every_n_steps: 10\n");
  EXPECT_EQ(e.key, "log_histograms_every_n_steps");
  EXPECT_TRUE(contains(e.hint, "TensorBoard")) << e.hint;
}

TEST(ConfigToolbox, ProfileAndCudnnKeys) {
  const LaunchConfig d;
  EXPECT_EQ(d.profile_ops, 0);
  EXPECT_FALSE(d.record_shapes || d.cudnn_benchmark || d.deterministic);
  EXPECT_TRUE(parse_config("cudnn_benchmark: true\n", "t").config.cudnn_benchmark);
  auto e = error_of("profile_ops: -1\n");
  EXPECT_EQ(e.key, "profile_ops");
  EXPECT_EQ(e.found, "'-1'");
  EXPECT_TRUE(parse_config("profile_ops: 1000\n", "t").config.profile_ops == 1000);
  e = error_of("profile_ops: 1001\n");
  EXPECT_EQ(e.key, "profile_ops");
  EXPECT_EQ(e.allowed, "an integer from 0 to 1000 (optimizer steps profiled after the warm-up; 0: none)");
  EXPECT_TRUE(contains(e.hint, "every event")) << "why there is a cap: " << e.hint;
  e = error_of("deterministic: true\ncudnn_benchmark: true\n");
  EXPECT_EQ(e.key, "cudnn_benchmark");
  EXPECT_TRUE(contains(e.hint, "drop one of the two")) << e.hint;
}

TEST(ConfigProject, DefaultsAndTheFileSpelling) {
  const LaunchConfig d;
  EXPECT_EQ(d.project_dir, "");
  EXPECT_EQ(d.checkpoint.total_limit, 0);
  EXPECT_EQ(d.checkpoint.every_n_steps, 0);
  EXPECT_FALSE(d.checkpoint.every_epoch);
  EXPECT_EQ(d.preempt_signal, "SIGTERM");
  EXPECT_EQ(d.preempt_timeout_s, 120);
  const LoadedConfig l = parse_config(
      "project_dir: runs/a\ncheckpoint:\n  total_limit: 2\n  every_n_steps: 100\n  every_epoch: true\n"
      "preempt_signal: SIGUSR1\npreempt_timeout_s: 30\n",
      "t.yaml");
  EXPECT_EQ(l.config.project_dir, "runs/a");
  EXPECT_EQ(l.config.checkpoint.total_limit, 2);
  EXPECT_EQ(l.config.checkpoint.every_n_steps, 100);
  EXPECT_TRUE(l.config.checkpoint.every_epoch);
  EXPECT_EQ(l.config.preempt_signal, "SIGUSR1");
  EXPECT_EQ(l.config.preempt_timeout_s, 30);
  EXPECT_TRUE(contains(to_yaml(d), "checkpoint:\n  total_limit: 0\n  every_n_steps: 0\n  every_epoch: false\n"))
      << to_yaml(d);
}

TEST(ConfigProject, BadValuesAreNamedWithWhatIsAllowed) {
  auto e = error_of("preempt_signal: SIGKILL\n");
  EXPECT_EQ(e.key, "preempt_signal");
  EXPECT_EQ(e.found, "'SIGKILL'");
  EXPECT_EQ(e.allowed, "one of SIGTERM, SIGUSR1");
  EXPECT_TRUE(contains(e.hint, "scheduler")) << e.hint;
  e = error_of("preempt_timeout_s: 0\n");
  EXPECT_EQ(e.key, "preempt_timeout_s");
  EXPECT_EQ(e.allowed, "an integer >= 1 (seconds)");
  e = error_of("project_dir: /p\ncheckpoint:\n  total_limit: -1\n");
  EXPECT_EQ(e.key, "checkpoint.total_limit");
  EXPECT_EQ(e.line, 3);
  e = error_of("project_dir: /p\ncheckpoint:\n  every_n_steps: -2\n");
  EXPECT_EQ(e.key, "checkpoint.every_n_steps");
  e = error_of("checkpoint:\n  every_epoch: maybe\n");
  EXPECT_EQ(e.key, "checkpoint.every_epoch");
  EXPECT_EQ(e.allowed, "true or false");
  e = error_of("checkpoint:\n  every_n_step: 5\n");
  EXPECT_EQ(e.hint, "did you mean 'every_n_steps'?");
}

TEST(ConfigProject, NamedCheckpointsNeedAProjectDir) {
  for (const char* text : {"checkpoint:\n  every_n_steps: 100\n", "checkpoint:\n  every_epoch: true\n",
                           "checkpoint:\n  total_limit: 2\n"}) {
    const auto e = error_of(text);
    EXPECT_EQ(e.key.rfind("checkpoint.", 0), 0u) << text;
    EXPECT_EQ(e.line, 2) << text;
    EXPECT_TRUE(contains(e.hint, "set project_dir")) << e.hint;
  }
  EXPECT_EQ(parse_config("project_dir: p\ncheckpoint:\n  every_n_steps: 100\n", "t").config.checkpoint.every_n_steps,
            100);
}

TEST(ConfigRoundTrip, DefaultsSurviveAndStringsThatLookLikeBoolsStayStrings) {
  const std::string yaml = to_yaml(LaunchConfig{});
  EXPECT_TRUE(contains(yaml, "mixed_precision: \"no\"") || contains(yaml, "mixed_precision: 'no'")) << yaml;
  EXPECT_TRUE(contains(yaml, "distributed_type: \"NO\"") || contains(yaml, "distributed_type: 'NO'")) << yaml;
  const LoadedConfig l = parse_config(yaml, "t.yaml");
  EXPECT_EQ(to_yaml(l.config), yaml);
}

TEST(ConfigSave, IsAtomicAndLeavesNoTemporaryFile) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path;
  const std::string path = dir + "/cfg.yaml";
  {
    std::ofstream(path) << "num_processes: 1\n";
  }
  LaunchConfig c;
  c.distributed_type = DistributedType::MultiCpu;
  c.num_processes = 3;
  save_config(c, path);
  EXPECT_EQ(load_config(path).config.num_processes, 3);
  // Only the config itself is left in the directory.
  EXPECT_EQ(std::system(("test $(ls -A " + dir + " | wc -l) -eq 1").c_str()), 0);
}

TEST(ConfigSave, UnwritableLocationIsAConfigErrorAndTheOldFileStays) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path;
  const std::string blocker = dir + "/file";
  std::ofstream(blocker) << "x";
  try {
    save_config(LaunchConfig{}, blocker + "/cfg.yaml");  // parent is a regular file
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.info().file, blocker + "/cfg.yaml");
    // The cause is named: the parent that is not a directory.
    EXPECT_TRUE(contains(e.what(), "cannot create directory " + blocker + " (Not a directory)")) << e.what();
  }
  std::ifstream in(blocker);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "x");
}
