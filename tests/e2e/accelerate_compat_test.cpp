// An Accelerate user at home: `xlaunch launch`, Accelerate's options, Accelerate's default config,
// through the real xlaunch binary. The option table of docs/config-reference.md is checked row by
// row here. Plans are checked with --dry_run; one test runs real ranks through mpirun.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "cpuinfo_samples.h"
#include "process.h"
#include "scratch_dir.h"

using xlaunch::test::count;
using xlaunch::test::has;
using xlaunch::test::run;

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

std::string read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Each test has its own HOME and config homes, so neither the user's xlaunch config nor their
// Accelerate config leaks in.
class AccelerateCompat : public xlaunch::test::ScratchDirTest<> {
 protected:
  void SetUp() override {
    ScratchDirTest::SetUp();
    // On a CPU with bf16 and fp16 instructions (a literal cpuinfo text), whatever this machine's:
    // without them a CPU job would not be offered bf16, and `--mixed_precision bf16` would warn.
    env_ = {"HOME=" + dir_ + "/home", "XDG_CONFIG_HOME=" + dir_ + "/config", "TMPDIR=" + dir_, "XLAUNCH_CONFIG_FILE",
            "HF_HOME", "XDG_CACHE_HOME",
            "XLAUNCH_CPUINFO_FILE=" + xlaunch::test::write_cpuinfo(dir_ + "/cpuinfo", xlaunch::test::kCpuinfoAmx)};
    hostfile_ = dir_ + "/hosts";
    std::ofstream(hostfile_) << "localhost slots=8\n";
  }

  std::vector<std::string> with(std::vector<std::string> extra) const {
    extra.insert(extra.begin(), env_.begin(), env_.end());
    return extra;
  }

  // Writes Accelerate's default config under `hf_home` (its $HF_HOME); returns the path.
  std::string write_accelerate_config(const std::string& hf_home, const std::string& text) {
    const std::string dir = hf_home + "/accelerate";
    std::system(("mkdir -p '" + dir + "'").c_str());
    std::ofstream(dir + "/default_config.yaml") << text;
    return dir + "/default_config.yaml";
  }

  xlaunch::test::Result launch(std::vector<std::string> options, const std::vector<std::string>& extra_env = {}) {
    options.insert(options.begin(), {XLAUNCH_BIN, "launch"});
    options.push_back("/bin/true");
    return run(options, with(extra_env));
  }

  std::string hostfile_;
  std::vector<std::string> env_;
};

}  // namespace

TEST_F(AccelerateCompat, LaunchIsRunUnderAccelerateName) {
  const auto r = launch({"--cpu", "-n", "2", "--dry_run"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, " -np 2 ")) << r.output;
  EXPECT_TRUE(has(r.output, " -- /bin/true")) << r.output;
}

TEST_F(AccelerateCompat, HelpShowsLaunchOnceAsAnAliasOfRun) {
  const auto r = run({XLAUNCH_BIN, "--help"}, env_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "run, launch"), 1) << r.output;
  EXPECT_EQ(count(r.output, "\n  launch"), 0) << r.output;
  const auto sub = run({XLAUNCH_BIN, "launch", "--help"}, env_);
  EXPECT_EQ(sub.exit_code, 0) << sub.output;
  EXPECT_TRUE(has(sub.output, "--num_cpu_threads_per_process")) << sub.output;
}

TEST_F(AccelerateCompat, AccelerateFlagsSetTheirKeys) {
  const auto r = launch({"--use_cpu", "--debug", "--num_cpu_threads_per_process", "3", "--mpirun_hostfile", hostfile_,
                         "--num_processes", "2", "--max_restarts", "1", "--gpu_ids", "0,1", "--dry_run"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* line : {"export XLAUNCH_USE_CPU=1", "export XLAUNCH_DEBUG=1", "export XLAUNCH_NUM_CPU_THREADS=3",
                           "export XLAUNCH_GPU_IDS=0,1"})
    EXPECT_TRUE(has(r.output, line)) << line << "\n" << r.output;
  EXPECT_TRUE(has(r.output, "--hostfile " + hostfile_)) << r.output;
  EXPECT_TRUE(has(first_line(r.output), "from the command line: num_processes, gpu_ids, use_cpu, debug, "
                                        "num_cpu_threads_per_process, mpi.hostfile, max_restarts, distributed_type"))
      << r.output;
  const auto bad = launch({"--cpu", "--gpu_ids", "0,x", "--dry_run"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_TRUE(has(bad.output, "command line: key 'gpu_ids': found '0,x'")) << bad.output;
}

TEST_F(AccelerateCompat, MultiGpuAsksForGpusAndNotWithCpu) {
  const auto r = launch({"--multi_gpu", "--dry_run"});
  // Where there are GPUs it plans a MULTI_GPU job; where there are none, it says so.
  EXPECT_TRUE(has(r.output, "export XLAUNCH_USE_CPU=0") ||
              has(r.output, "command line: key 'distributed_type': found 'MULTI_GPU'; allowed: MULTI_CPU or NO"))
      << r.output;
  const auto both = launch({"--multi_gpu", "--cpu", "--dry_run"});
  EXPECT_EQ(both.exit_code, 2) << both.output;
  EXPECT_TRUE(has(both.output, "found --multi_gpu with --cpu")) << both.output;
}

TEST_F(AccelerateCompat, ModuleIsRefusedSayingThereIsNoPython) {
  for (const char* flag : {"-m", "--module"}) {
    const auto r = run({XLAUNCH_BIN, "launch", flag, "my_pkg.train", "--epochs", "3"}, env_);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(has(r.output, std::string("xlaunch: error: ") + flag +
                                  " is an Accelerate option xlaunch does not have: it runs a Python module, and "
                                  "xlaunch has no Python"))
        << r.output;
    EXPECT_FALSE(has(r.output, "not expected")) << r.output;
  }
}

TEST_F(AccelerateCompat, UnsupportedAccelerateOptionsAreRefusedByName) {
  const std::map<std::string, std::vector<std::string>> cases = {
      {"--use_fsdp", {"--use_fsdp"}},
      {"--zero_stage", {"--zero_stage", "2"}},
      {"--fsdp_version", {"--fsdp_version=2"}},
      {"--parallelism_config_sp_size", {"--parallelism_config_sp_size", "2"}},  // a family member not listed
      {"--use-deepspeed", {"--use-deepspeed"}},  // Accelerate's hyphenated spelling
  };
  for (const auto& [name, words] : cases) {
    const auto r = launch(words);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    EXPECT_TRUE(has(r.output, "xlaunch: error: " + name + " is an Accelerate option xlaunch does not have: "))
        << r.output;
  }
  const auto hyphen = launch({"--num-processes", "2"});
  EXPECT_EQ(hyphen.exit_code, 2) << hyphen.output;
  EXPECT_TRUE(has(hyphen.output, "--num-processes: xlaunch spells its options with underscores only; use "
                                 "--num_processes"))
      << hyphen.output;
  // Not Accelerate's either: CLI11's own message stands.
  const auto unknown = launch({"--no_such_option"});
  EXPECT_EQ(unknown.exit_code, 2) << unknown.output;
  EXPECT_TRUE(has(unknown.output, "not expected")) << unknown.output;
  EXPECT_FALSE(has(unknown.output, "Accelerate")) << unknown.output;
  // `config default` refuses them by name too.
  const auto config = run({XLAUNCH_BIN, "config", "default", "--use_deepspeed"}, env_);
  EXPECT_EQ(config.exit_code, 2) << config.output;
  EXPECT_TRUE(has(config.output, "--use_deepspeed is an Accelerate option xlaunch does not have")) << config.output;
}

TEST_F(AccelerateCompat, IgnoredOptionsWarnAfterTheFirstLine) {
  const auto r = launch({"--cpu", "--same_network", "--dynamo_backend", "no", "-q", "--dry_run"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(first_line(r.output), "xlaunch: no config file")) << r.output;
  for (const char* name : {"--same_network", "--dynamo_backend", "--quiet"})
    EXPECT_TRUE(has(r.output, std::string("xlaunch: warning: ") + name + " is an Accelerate option that means nothing "
                                                                         "here ("))
        << name << "\n" << r.output;
}

TEST_F(AccelerateCompat, NumCpuThreadsReachTheRanksAsOmpNumThreads) {
  const auto r = run({XLAUNCH_BIN, "launch", "--cpu", "-n", "2", "--num_cpu_threads_per_process", "3", "/bin/sh", "-c",
                      "echo \"rank $OMPI_COMM_WORLD_RANK threads=$OMP_NUM_THREADS\""},
                     env_);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "rank 0 threads=3")) << r.output;
  EXPECT_TRUE(has(r.output, "rank 1 threads=3")) << r.output;
}

TEST_F(AccelerateCompat, AccelerateDefaultConfigIsUsedWhenThereIsNoXlaunchConfig) {
  const std::string text = read(XLAUNCH_TEST_DATA "/accelerate_default_cpu.json");
  // ~/.cache/huggingface, then $HF_HOME, as Accelerate looks.
  const std::string in_home = write_accelerate_config(dir_ + "/home/.cache/huggingface", text);
  auto r = launch({"--dry_run"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(first_line(r.output).rfind("xlaunch: config " + in_home +
                                       " (from Accelerate's default config, as no xlaunch config exists)", 0),
            0u)
      << r.output;
  EXPECT_TRUE(has(r.output, "export XLAUNCH_USE_CPU=1")) << r.output;  // the file's use_cpu: true
  const std::string in_hf_home = write_accelerate_config(dir_ + "/hf", text);
  r = launch({"--dry_run"}, {"HF_HOME=" + dir_ + "/hf"});
  EXPECT_TRUE(has(first_line(r.output), "config " + in_hf_home + " (from Accelerate's")) << r.output;
  // An xlaunch config wins.
  std::system(("mkdir -p '" + dir_ + "/config/xlaunch'").c_str());
  std::ofstream(dir_ + "/config/xlaunch/default_config.yaml") << "mixed_precision: bf16\n";
  r = launch({"--dry_run"}, {"HF_HOME=" + dir_ + "/hf"});
  EXPECT_TRUE(has(first_line(r.output), "config " + dir_ + "/config/xlaunch/default_config.yaml (from default location)"))
      << r.output;
}

TEST_F(AccelerateCompat, AnUnusableAccelerateDefaultConfigSaysWhyItWasRead) {
  // Accelerate's FSDP file with a type xlaunch does not run (XLA: TPUs).
  std::string text = read(XLAUNCH_TEST_DATA "/accelerate_fsdp.yaml");
  text.replace(text.find("distributed_type: FSDP"), std::string("distributed_type: FSDP").size(), "distributed_type: XLA");
  write_accelerate_config(dir_ + "/hf", text);
  const auto r = launch({"--dry_run"}, {"HF_HOME=" + dir_ + "/hf"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(has(r.output, "default_config.yaml:3: key 'distributed_type': found 'XLA'")) << r.output;
  EXPECT_TRUE(has(r.output, "Accelerate's default config is read because no xlaunch config exists: write one with "
                            "`xlaunch config`, or pass --config_file"))
      << r.output;
}

TEST_F(AccelerateCompat, ConfigProposesTheAccelerateDefaultConfig) {
  write_accelerate_config(dir_ + "/hf", "compute_environment: LOCAL_MACHINE\ndebug: true\ndistributed_type: MULTI_CPU\n"
                                        "main_process_ip: null\nmixed_precision: bf16\nnum_machines: 1\n"
                                        "num_processes: 3\nuse_cpu: true\n");
  // Enter for every question takes every proposed answer.
  const auto r = run({"/bin/sh", "-c", std::string("yes '' | head -n 30 | ") + XLAUNCH_BIN + " config"},
                     with({"HF_HOME=" + dir_ + "/hf"}));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(has(r.output, "Starting from Accelerate's config " + dir_ + "/hf/accelerate/default_config.yaml"))
      << r.output;
  const std::string written = read(dir_ + "/config/xlaunch/default_config.yaml");
  for (const char* line : {"distributed_type: MULTI_CPU", "num_processes: 3", "mixed_precision: bf16", "debug: true"})
    EXPECT_TRUE(has(written, line)) << line << "\n" << written;
}

// Every option row of the compatibility table in docs/config-reference.md, through the real binary.
TEST_F(AccelerateCompat, CompatibilityTableMatchesTheBinary) {
  const std::string config = dir_ + "/cfg.yaml";
  std::ofstream(config) << "use_cpu: true\n";
  const std::map<std::string, std::string> sample = {
      {"N", "1"},        {"RANK", "0"},         {"PORT", "29500"}, {"ADDR", "127.0.0.1"}, {"IDS", "all"},
      {"MODE", "bf16"},  {"DIR", dir_ + "/logs"}, {"CONFIG", config}, {"HOSTFILE", hostfile_}, {"X", "x"}};
  const std::string doc = read(XLAUNCH_CONFIG_DOC);
  const std::regex row(R"(\n\| `(-[-a-z0-9_*]+)(?: ([A-Z]+))?` \| (same|mapped|ignored|refused) \|)");
  int rows = 0;
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator(); ++it, ++rows) {
    std::string name = (*it)[1];
    const std::string placeholder = (*it)[2], status = (*it)[3];
    SCOPED_TRACE(name + " " + placeholder + ": " + status);
    if (name.back() == '*') name.replace(name.size() - 1, 1, "added_later");
    std::vector<std::string> words = {name};
    if (!placeholder.empty()) words.push_back(sample.at(placeholder));
    words.push_back("--dry_run");
    const auto r = launch(words);
    if (name == "-h" || name == "--help") {
      EXPECT_EQ(r.exit_code, 0) << r.output;
    } else if (status == "refused") {
      EXPECT_EQ(r.exit_code, 2) << r.output;
      EXPECT_TRUE(has(r.output, name + " is an Accelerate option xlaunch does not have: ")) << r.output;
    } else if (status == "ignored") {
      EXPECT_EQ(r.exit_code, 0) << r.output;
      EXPECT_TRUE(has(r.output, "is an Accelerate option that means nothing here")) << r.output;
    } else if (name != "--multi_gpu") {  // same, mapped (--multi_gpu needs GPUs: tested above)
      EXPECT_EQ(r.exit_code, 0) << r.output;
      EXPECT_FALSE(has(r.output, "warning")) << r.output;
    }
  }
  EXPECT_GT(rows, 100);
}
