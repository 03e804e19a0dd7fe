// Every kind of bad input to the config, each checked for the file, key, line and the found/allowed
// text the user sees: unknown keys, wrong types, ranges, relations, broken files; and num_machines
// MIN:MAX.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "config_test_util.h"
#include "scratch_dir.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/config_io.h"

using namespace xlaunch::config;
using xlaunch::test::contains;
using xlaunch::test::error_of;

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

// Hybrid sharding (ddp.shard_group machine) needs a stage that shards, several machines of several
// processes each, and CPUs; each refusal names the cause and the fix.
TEST(ConfigErrors, HybridShardingNeedsSeveralMachinesOfSeveralProcesses) {
  const std::string two_by_two = "num_processes: 4\nnum_machines: 2\nmpi:\n  hosts: [a, b]\n";
  EXPECT_EQ(parse_config("distributed_type: MULTI_CPU\n" + two_by_two + "ddp:\n  zero_stage: 3\n  shard_group: machine\n",
                         "t").config.ddp.shard_group,
            "machine");
  auto e = error_of("distributed_type: MULTI_CPU\n" + two_by_two + "ddp:\n  shard_group: machine\n");
  EXPECT_EQ(e.key, "ddp.shard_group");
  EXPECT_TRUE(contains(e.hint, "set ddp.zero_stage 3")) << e.hint;
  e = error_of("distributed_type: MULTI_CPU\nnum_processes: 4\nddp:\n  zero_stage: 2\n  shard_group: machine\n");
  EXPECT_EQ(e.key, "ddp.shard_group");
  EXPECT_EQ(e.line, 5);
  EXPECT_TRUE(contains(e.hint, "on one machine the machine is the whole job")) << e.hint;
  e = error_of("distributed_type: MULTI_CPU\nnum_processes: 2\nnum_machines: 2\nmpi:\n  hosts: [a, b]\n"
               "ddp:\n  zero_stage: 3\n  shard_group: machine\n");
  EXPECT_TRUE(contains(e.hint, "one process per machine")) << e.hint;
  e = error_of("distributed_type: MULTI_GPU\n" + two_by_two + "ddp:\n  zero_stage: 3\n  shard_group: machine\n");
  EXPECT_TRUE(contains(e.hint, "NCCL")) << e.hint;
  e = error_of("distributed_type: MULTI_CPU\n" + two_by_two + "ddp:\n  zero_stage: 3\n  shard_group: node\n");
  EXPECT_EQ(e.key, "ddp.shard_group");
  EXPECT_TRUE(contains(e.allowed, "world, machine")) << e.allowed;
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
