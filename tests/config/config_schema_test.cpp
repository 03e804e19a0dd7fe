// The config schema: defaults, round trip, and every kind of bad input, each checked for the file,
// key, line and the found/allowed text the user sees. Accelerate's files: config_accelerate_test.cpp.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"
#include "scratch_dir.h"

using namespace xlaunch::config;

namespace {

// The ConfigError that parsing `text` throws; fails the test when none is thrown.
ConfigErrorInfo error_of(const std::string& text, std::optional<int> gpus = std::nullopt) {
  try {
    parse_config(text, "test.yaml", gpus);
  } catch (const ConfigError& e) {
    return e.info();
  }
  ADD_FAILURE() << "no ConfigError for:\n" << text;
  return {};
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace

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

TEST(ConfigErrors, UnknownKeySuggestsTheClosest) {
  const auto e = error_of("num_processes: 2\nnum_proceses: 2\n");
  EXPECT_EQ(e.key, "num_proceses");
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.file, "test.yaml");
  EXPECT_EQ(e.hint, "did you mean 'num_processes'?");
}

TEST(ConfigErrors, UnknownKeyInSectionSuggestsWithinTheSection) {
  const auto e = error_of("ddp:\n  bucket_cap: 10\n");
  EXPECT_EQ(e.key, "ddp.bucket_cap");
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.hint, "did you mean 'bucket_cap_mb'?");
}

TEST(ConfigErrors, SectionKeyAtTheTopLevelPointsToItsSection) {
  const auto e = error_of("hostfile: /etc/hosts\n");
  EXPECT_EQ(e.hint, "did you mean 'mpi.hostfile (under mpi:)'?");
}

TEST(ConfigErrors, FarOffUnknownKeyHasNoSuggestion) {
  const auto e = error_of("zzzzzzzzzz: 1\n");
  EXPECT_EQ(e.key, "zzzzzzzzzz");
  EXPECT_EQ(e.hint, "");
  EXPECT_TRUE(contains(e.allowed, "num_processes"));
}

TEST(ConfigErrors, WrongTypes) {
  auto e = error_of("num_processes: two\n");
  EXPECT_EQ(e.key, "num_processes");
  EXPECT_EQ(e.found, "'two'");
  EXPECT_EQ(e.allowed, "an integer");
  e = error_of("use_cpu: maybe\n");
  EXPECT_EQ(e.key, "use_cpu");
  EXPECT_EQ(e.allowed, "true or false");
  e = error_of("num_processes: [1, 2]\n");
  EXPECT_EQ(e.found, "a list");
  e = error_of("mpi: 3\n");
  EXPECT_EQ(e.key, "mpi");
  EXPECT_EQ(e.found, "'3'");
  e = error_of("ddp:\n  bucket_cap_mb: big\n");
  EXPECT_EQ(e.key, "ddp.bucket_cap_mb");
  EXPECT_EQ(e.line, 2);
  e = error_of("mixed_precision: fp8\n");
  EXPECT_EQ(e.allowed, "one of no, fp16, bf16");
  e = error_of("mpi:\n  bind_to: everything\n");
  EXPECT_EQ(e.key, "mpi.bind_to");
  e = error_of("mpi:\n  map_by: diagonal\n");
  EXPECT_EQ(e.key, "mpi.map_by");
  e = error_of("loader:\n  num_workers: many\n");
  EXPECT_EQ(e.key, "loader.num_workers");
  e = error_of("gpu_ids: 0,x\n");
  EXPECT_EQ(e.key, "gpu_ids");
  e = error_of("compute_environment: AMAZON_SAGEMAKER\n");
  EXPECT_EQ(e.key, "compute_environment");
}

TEST(ConfigErrors, OutOfRange) {
  auto e = error_of("num_processes: 0\n");
  EXPECT_EQ(e.key, "num_processes");
  EXPECT_EQ(e.line, 1);
  EXPECT_EQ(e.found, "'0'");
  EXPECT_EQ(e.allowed, "an integer >= 1");
  e = error_of("main_process_port: 70000\n");
  EXPECT_EQ(e.key, "main_process_port");
  EXPECT_EQ(e.allowed, "1 to 65535, or 0 to pick a free port");
  e = error_of("main_process_port: -1\n");
  EXPECT_EQ(e.key, "main_process_port");
  e = error_of("distributed_type: MULTI_CPU\nnum_machines: 2\nmachine_rank: 2\nmpi:\n  hostfile: h\n"
               "num_processes: 2\n");
  EXPECT_EQ(e.key, "machine_rank");
  EXPECT_EQ(e.line, 3);
  EXPECT_EQ(e.allowed, "0 to num_machines - 1 = 1");
  e = error_of("gradient_accumulation_steps: 0\n");
  EXPECT_EQ(e.key, "gradient_accumulation_steps");
  e = error_of("ddp:\n  bucket_cap_mb: 0\n");
  EXPECT_EQ(e.key, "ddp.bucket_cap_mb");
  EXPECT_EQ(e.line, 2);
  e = error_of("ddp:\n  comm_hook: int8\n");
  EXPECT_EQ(e.key, "ddp.comm_hook");
  EXPECT_NE(e.allowed.find("powersgd"), std::string::npos) << e.allowed;
  e = error_of("ddp:\n  powersgd_rank: 0\n");
  EXPECT_EQ(e.key, "ddp.powersgd_rank");
  e = error_of("ddp:\n  powersgd_start_step: -5\n");
  EXPECT_EQ(e.key, "ddp.powersgd_start_step");
  e = error_of("num_cpu_threads_per_process: -1\n");
  EXPECT_EQ(e.key, "num_cpu_threads_per_process");
  EXPECT_EQ(e.allowed, "an integer >= 1, or 0 to let the runtime decide");
  e = error_of("timeout_s: -1\n");
  EXPECT_EQ(e.key, "timeout_s");
  EXPECT_EQ(e.allowed, "an integer >= 0 (seconds; 0 turns the watchdog off)");
  e = error_of("config_version: 99\n");
  EXPECT_EQ(e.key, "config_version");
  EXPECT_TRUE(contains(e.hint, "newer xlaunch"));
}

TEST(ConfigErrors, PortZeroAndBoundsAreAccepted) {
  EXPECT_EQ(parse_config("main_process_port: 0\n", "t").config.main_process_port, 0);
  // 0 means "no watchdog" here as in the runtime (XLAUNCH_TIMEOUT_S=0), not an error.
  EXPECT_EQ(parse_config("timeout_s: 0\n", "t").config.timeout_s, 0);
  EXPECT_EQ(parse_config("main_process_port: 65535\n", "t").config.main_process_port, 65535);
}

TEST(ConfigErrors, RelationsBetweenKeys) {
  auto e = error_of("num_processes: 2\n");  // NO means one process
  EXPECT_EQ(e.key, "num_processes");
  EXPECT_TRUE(contains(e.hint, "MULTI_CPU"));
  e = error_of("distributed_type: MULTI_CPU\nnum_processes: 3\nnum_machines: 2\nmpi:\n  hosts: [a, b]\n");
  EXPECT_EQ(e.key, "num_processes");
  EXPECT_TRUE(contains(e.allowed, "multiple of num_machines"));
  e = error_of("distributed_type: MULTI_CPU\nnum_processes: 2\nnum_machines: 2\n");
  EXPECT_EQ(e.key, "num_machines");
  EXPECT_TRUE(contains(e.allowed, "mpi.hostfile"));
  e = error_of("distributed_type: MULTI_GPU\nuse_cpu: true\n", 1);
  EXPECT_EQ(e.key, "use_cpu");
  e = error_of("gpu_ids: [1, 1]\n");
  EXPECT_EQ(e.key, "gpu_ids");
}

TEST(ConfigErrors, GpuIdsAreCheckedAgainstTheGpusFound) {
  const std::string text = "distributed_type: MULTI_GPU\nnum_processes: 2\ngpu_ids: 0,3\n";
  auto e = error_of(text, 2);
  EXPECT_EQ(e.key, "gpu_ids");
  EXPECT_EQ(e.line, 3);
  EXPECT_EQ(e.found, "GPU 3");
  EXPECT_EQ(e.allowed, "this machine has 2 GPU(s), ids 0 to 1");
  e = error_of(text, 0);
  EXPECT_EQ(e.allowed, "this machine has no GPU");
  EXPECT_NO_THROW(parse_config(text, "t", 4));
  EXPECT_NO_THROW(parse_config(text, "t", std::nullopt));  // unknown count: not checked
  // Explicit ids only matter for MULTI_GPU.
  EXPECT_NO_THROW(parse_config("distributed_type: MULTI_CPU\nnum_processes: 2\ngpu_ids: 0,3\n", "t", 0));
  e = error_of("distributed_type: MULTI_GPU\nnum_processes: 4\n", 2);
  EXPECT_EQ(e.key, "num_processes");
}

TEST(ConfigErrors, MalformedYamlNamesTheLine) {
  const auto e = error_of("num_processes: 1\nmpi: [unclosed\n");
  EXPECT_EQ(e.key, "");
  EXPECT_GE(e.line, 2);
  EXPECT_TRUE(contains(e.found, "malformed YAML")) << e.found;
}

TEST(ConfigErrors, DuplicateKey) {
  const auto e = error_of("num_processes: 1\nnum_processes: 1\n");
  EXPECT_EQ(e.key, "num_processes");
  EXPECT_EQ(e.line, 2);
  EXPECT_TRUE(contains(e.found, "first on line 1"));
}

TEST(ConfigErrors, NonScalarKey) {
  const auto e = error_of("num_processes: 1\n[a, b]: 1\n");
  EXPECT_EQ(e.line, 2);
  EXPECT_EQ(e.found, "a key that is a list");
}

TEST(ConfigErrors, EmptyAndNonMappingFiles) {
  auto e = error_of("");
  EXPECT_EQ(e.found, "an empty file");
  e = error_of("# only a comment\n");
  EXPECT_EQ(e.found, "an empty file");
  e = error_of("- a\n- b\n");
  EXPECT_EQ(e.found, "a list");
}

TEST(ConfigErrors, MissingAndUnreadableFiles) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path;
  try {
    load_config(dir + "/absent.yaml");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.info().file, dir + "/absent.yaml");
    EXPECT_TRUE(contains(e.info().found, "No such file")) << e.what();
  }
  try {
    load_config(dir);  // a directory
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.info().found, "not a regular file");
  }
}

TEST(ConfigErrors, MessageCarriesEverything) {
  const ConfigError e({"f.yaml", "num_processes", 3, "'0'", "an integer >= 1", "hint here"});
  EXPECT_STREQ(e.what(), "f.yaml:3: key 'num_processes': found '0'; allowed: an integer >= 1 (hint here)");
}

TEST(EditDistance, Basics) {
  EXPECT_EQ(edit_distance("", "abc"), 3);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3);
  EXPECT_EQ(edit_distance("same", "same"), 0);
}

// Elastic jobs: num_machines MIN:MAX (torchrun's --nnodes MIN:MAX).
TEST(ConfigElastic, MinMaxLoadsSavesAndRoundTrips) {
  const LoadedConfig l = parse_config("distributed_type: MULTI_CPU\nnum_processes: 6\nnum_machines: 2:3\n"
                                      "max_restarts: 2\nmpi:\n  hostfile: h\n", "t.yaml");
  EXPECT_EQ(l.config.min_machines, 2);
  EXPECT_EQ(l.config.num_machines, 3);
  EXPECT_TRUE(is_elastic(l.config));
  EXPECT_EQ(processes_per_machine(l.config), 2);
  EXPECT_EQ(machines_string(l.config), "2:3");
  const std::string yaml = to_yaml(l.config);
  EXPECT_TRUE(contains(yaml, "num_machines: 2:3")) << yaml;
  EXPECT_EQ(to_yaml(parse_config(yaml, "t.yaml").config), yaml);

  // A plain N stays plain; MIN == MAX is a fixed job spelled as asked.
  EXPECT_EQ(parse_config("num_machines: 1\n", "t.yaml").config.min_machines, 0);
  EXPECT_TRUE(contains(to_yaml(parse_config("num_machines: 1\n", "t.yaml").config), "num_machines: 1\n"));
  const LaunchConfig fixed = parse_config("distributed_type: MULTI_CPU\nnum_processes: 2\nnum_machines: 2:2\n"
                                          "mpi:\n  hosts: [a, b]\n", "t.yaml").config;
  EXPECT_FALSE(is_elastic(fixed));
  EXPECT_EQ(machines_string(fixed), "2:2");
}

TEST(ConfigElastic, MalformedRangesNameTheKeyAndTheForm) {
  for (const char* bad : {"3:2", "0:2", "2:", ":3", "2:x", "a", "2:3:4", "-1"}) {
    const ConfigErrorInfo e = error_of(std::string("distributed_type: MULTI_CPU\nnum_machines: '") + bad +
                                       "'\nmpi:\n  hostfile: h\n");
    EXPECT_EQ(e.key, "num_machines") << bad;
    EXPECT_EQ(e.line, 2) << bad;
    EXPECT_TRUE(contains(e.allowed, "MIN:MAX")) << bad << ": " << e.allowed;
  }
  int lo = 7, hi = 7;
  EXPECT_FALSE(parse_machines("3:2", &lo, &hi));
  EXPECT_EQ(lo, 7);  // nothing changed
  EXPECT_TRUE(parse_machines("1:4", &lo, &hi));
  EXPECT_EQ(lo, 1);
  EXPECT_EQ(hi, 4);
}

TEST(ConfigElastic, RelationsCountAtMaxAndHostsAtLeastMin) {
  // num_processes counts MAX machines' processes: 4 is no multiple of 3.
  ConfigErrorInfo e = error_of("distributed_type: MULTI_CPU\nnum_processes: 4\nnum_machines: 2:3\nmpi:\n  hostfile: h\n");
  EXPECT_EQ(e.key, "num_processes");
  EXPECT_TRUE(contains(e.hint, "MAX machines")) << e.hint;
  // Hosts: at least MIN; spares beyond MAX stand by.
  e = error_of("distributed_type: MULTI_CPU\nnum_processes: 3\nnum_machines: 2:3\nmpi:\n  hosts: [a]\n");
  EXPECT_EQ(e.key, "mpi.hosts");
  EXPECT_TRUE(contains(e.allowed, "at least MIN")) << e.allowed;
  EXPECT_NO_THROW(parse_config("distributed_type: MULTI_CPU\nnum_processes: 3\nnum_machines: 2:3\nmpi:\n  hosts: [a, b]\n", "t"));
  EXPECT_NO_THROW(parse_config("distributed_type: MULTI_CPU\nnum_processes: 3\nnum_machines: 2:3\nmpi:\n  hosts: [a, b, c, d]\n", "t"));
  // A fixed job still needs exactly num_machines hosts.
  e = error_of("distributed_type: MULTI_CPU\nnum_processes: 3\nnum_machines: 3\nmpi:\n  hosts: [a, b, c, d]\n");
  EXPECT_EQ(e.key, "mpi.hosts");
  // Without a list of machines there is nothing to be elastic over.
  e = error_of("distributed_type: MULTI_CPU\nnum_processes: 3\nnum_machines: 2:3\n");
  EXPECT_EQ(e.key, "num_machines");
  EXPECT_EQ(e.found, "'2:3'");
  e = error_of("max_machine_failures: 0\n");
  EXPECT_EQ(e.key, "max_machine_failures");
  EXPECT_EQ(e.line, 1);
}
