// xlaunch as a person uses it at a terminal: `xlaunch config`'s real prompt on a pseudo-terminal,
// one wrong answer among right ones, then the file it wrote (and end of input writes nothing); and
// `xlaunch run`, whose rank 0 reads what is typed there.
#include <gtest/gtest.h>
#include <pty.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <poll.h>
#include <csignal>
#include <string>
#include <vector>

#include "xlaunch/config/config_io.h"
#include "cpuinfo_samples.h"
#include "pty_session.h"
#include "scratch_dir.h"

namespace {
// The CPU `xlaunch config` is told it runs on (XLAUNCH_CPUINFO_FILE), never this machine's.
std::vector<std::string> on_cpu(const std::string& dir, const char* cpuinfo) {
  return {"XLAUNCH_CPUINFO_FILE=" + xlaunch::test::write_cpuinfo(dir + "/cpuinfo", cpuinfo)};
}

// Answers the questions before the mixed precision for a 2-process CPU job on one machine; false at
// the first prompt that does not come.
bool answer_a_cpu_job_of_two(PtySession& s) {
  if (!s.expect("(NO/MULTI_CPU/MULTI_GPU) [")) return false;
  s.type("MULTI_CPU\n");
  if (!s.expect("How many machines will the job use? [1]: ")) return false;
  s.type("\n");
  if (!s.expect("How many processes in total, over all machines? [")) return false;
  s.type("2\n");
  if (!s.expect("; 3 is FSDP's FULL_SHARD) (0/1/2/3) [0]: ")) return false;
  s.type("\n");
  return true;
}

// Takes the defaults of the questions after the mixed precision; false at the first prompt that
// does not come, or when `file` is not written.
bool answer_the_rest_with_defaults(PtySession& s, const std::string& file) {
  if (!s.expect("How many gradient accumulation steps? [1]: ")) return false;
  s.type("\n");
  if (!s.expect("Turn on debug checks (slower)? (yes/no) [no]: ")) return false;
  s.type("\n");
  return s.expect("Wrote " + file) && s.wait() == 0;
}
}  // namespace

TEST(ConfigPty, QuestionsWithOneWrongAnswerWriteTheFile) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path, file = dir + "/sub/cfg.yaml";
  PtySession s(file, dir, on_cpu(dir, xlaunch::test::kCpuinfoAmx));
  ASSERT_TRUE(s.expect("Which kind of training?")) << s.transcript();
  ASSERT_TRUE(s.expect("(NO/MULTI_CPU/MULTI_GPU) [")) << s.transcript();
  s.type("multi_cpu\n");
  ASSERT_TRUE(s.expect("How many machines will the job use? [1]: ")) << s.transcript();
  s.type("\n");
  ASSERT_TRUE(s.expect("How many processes in total, over all machines? [")) << s.transcript();
  s.type("three\n");  // the wrong answer
  ASSERT_TRUE(s.expect("'three' is not a whole number from 1 to 65535; try again.")) << s.transcript();
  ASSERT_TRUE(s.expect("How many processes in total, over all machines? [")) << s.transcript();
  s.type("3\n");
  // Sharding, as accelerate config asks: stage 3, then its units and when they are freed.
  ASSERT_TRUE(s.expect("Shard the training state over the processes? ZeRO stage (0: no sharding; 1: optimizer "
                       "state sharded;")) << s.transcript();
  ASSERT_TRUE(s.expect("(0/1/2/3) [0]: ")) << s.transcript();
  s.type("4\n");
  ASSERT_TRUE(s.expect("'4' is not one of 0/1/2/3")) << s.transcript();
  s.type("3\n");
  ASSERT_TRUE(s.expect("Which modules are units, each gathered whole only while it computes?")) << s.transcript();
  ASSERT_TRUE(s.expect("[auto]: ")) << s.transcript();
  s.type("type:\n");
  ASSERT_TRUE(s.expect("is not a wrap policy")) << s.transcript();
  s.type("type:Block\n");
  ASSERT_TRUE(s.expect("Free each unit's parameters after its forward")) << s.transcript();
  ASSERT_TRUE(s.expect("(yes/no) [yes]: ")) << s.transcript();
  s.type("no\n");
  ASSERT_TRUE(s.expect("Mixed precision? (no/fp16/bf16) [no]: ")) << s.transcript();
  s.type("bf16\n");
  ASSERT_TRUE(s.expect("How many gradient accumulation steps? [1]: ")) << s.transcript();
  s.type("4\n");
  ASSERT_TRUE(s.expect("Turn on debug checks (slower)? (yes/no) [no]: ")) << s.transcript();
  s.type("\n");
  ASSERT_TRUE(s.expect("Wrote " + file)) << s.transcript();
  EXPECT_EQ(s.wait(), 0) << s.transcript();

  const auto l = xlaunch::config::load_config(file);
  EXPECT_EQ(l.config.distributed_type, xlaunch::config::DistributedType::MultiCpu);
  EXPECT_EQ(l.config.num_machines, 1);
  EXPECT_EQ(l.config.num_processes, 3);
  EXPECT_TRUE(l.config.use_cpu);
  EXPECT_EQ(l.config.mixed_precision, xlaunch::config::MixedPrecision::Bf16);
  EXPECT_EQ(l.config.gradient_accumulation_steps, 4);
  EXPECT_FALSE(l.config.debug);
  EXPECT_EQ(l.config.ddp.zero_stage, 3);
  EXPECT_EQ(l.config.fsdp.wrap, "type:Block");
  EXPECT_FALSE(l.config.fsdp.reshard_after_forward);
}

TEST(ConfigPty, SeveralMachinesAskForTheMainMachineAndTheHostfile) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path, file = dir + "/cfg.yaml", hosts = dir + "/hosts";
  { std::ofstream(hosts) << "node1 slots=2\nnode2 slots=2\n"; }
  PtySession s(file, dir, on_cpu(dir, xlaunch::test::kCpuinfoAmx));
  ASSERT_TRUE(s.expect("Which kind of training?")) << s.transcript();
  s.type("MULTI_CPU\n");
  ASSERT_TRUE(s.expect("How many machines will the job use? [1]: ")) << s.transcript();
  s.type("2\n");
  ASSERT_TRUE(s.expect("What is the rank of this machine? [0]: ")) << s.transcript();
  s.type("\n");
  ASSERT_TRUE(s.expect("machine of rank 0? []: ")) << s.transcript();
  s.type("\n");
  ASSERT_TRUE(s.expect("'' is empty: an address is needed; try again.")) << s.transcript();
  s.type("10.0.0.1\n");
  ASSERT_TRUE(s.expect("Which port should the main process use? (0: pick a free one) [0]: ")) << s.transcript();
  s.type("29500\n");
  ASSERT_TRUE(s.expect("Which Open MPI hostfile lists the machines")) << s.transcript();
  s.type(dir + "/missing\n");
  ASSERT_TRUE(s.expect("does not exist; try again.")) << s.transcript();
  s.type(hosts + "\n");
  ASSERT_TRUE(s.expect("How many processes in total, over all machines? [")) << s.transcript();
  s.type("3\n");
  ASSERT_TRUE(s.expect("'3' is not a multiple of the number of machines (2); try again.")) << s.transcript();
  s.type("4\n");
  ASSERT_TRUE(s.expect("(0/1/2/3) [0]: ")) << s.transcript();
  s.type("2\n");
  // Several machines of several processes each: hybrid sharding is offered.
  ASSERT_TRUE(s.expect("Shard within each machine and keep a replica on every machine?")) << s.transcript();
  ASSERT_TRUE(s.expect("(yes/no) [no]: ")) << s.transcript();
  s.type("yes\n");
  ASSERT_TRUE(s.expect("Mixed precision? (no/fp16/bf16) [no]: ")) << s.transcript();
  s.type("fp16\n");
  ASSERT_TRUE(s.expect("How many gradient accumulation steps? [1]: ")) << s.transcript();
  s.type("\n");
  ASSERT_TRUE(s.expect("Turn on debug checks (slower)? (yes/no) [no]: ")) << s.transcript();
  s.type("yes\n");
  ASSERT_TRUE(s.expect("Wrote " + file)) << s.transcript();
  EXPECT_EQ(s.wait(), 0) << s.transcript();

  const auto c = xlaunch::config::load_config(file).config;
  EXPECT_EQ(c.num_machines, 2);
  EXPECT_EQ(c.machine_rank, 0);
  EXPECT_EQ(c.main_process_ip, "10.0.0.1");
  EXPECT_EQ(c.main_process_port, 29500);
  EXPECT_EQ(c.mpi.hostfile, hosts);
  EXPECT_EQ(c.num_processes, 4);
  EXPECT_EQ(c.mixed_precision, xlaunch::config::MixedPrecision::Fp16);
  EXPECT_EQ(c.gradient_accumulation_steps, 1);
  EXPECT_TRUE(c.debug);
  EXPECT_EQ(c.ddp.zero_stage, 2);
  EXPECT_EQ(c.ddp.shard_group, "machine");
}

// A CPU job on a CPU without bf16 instructions is not offered bf16 (nor fp16 without fp16 ones); the
// note names the flags looked for. With neither, the question is not asked.
TEST(ConfigPty, ACpuJobIsOfferedOnlyTheMixedPrecisionItsCpuHas) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path, file = dir + "/cfg.yaml";
  {
    PtySession s(file, dir, on_cpu(dir, xlaunch::test::kCpuinfoAvx2));
    ASSERT_TRUE(answer_a_cpu_job_of_two(s)) << s.transcript();
    ASSERT_TRUE(s.expect("This CPU has no 16-bit instructions for fp16 (avx512_fp16, amx_fp16), nor bf16 (avx512_bf16, "
                         "amx_bf16) among its flags: autocast would run in software, slower than float32 (measured: bf16 "
                         "0.05x, fp16 0.06x on such CPUs), so a CPU job is not offered it; mixed precision: no. Set "
                         "mixed_precision in the file to use it anyway."))
        << s.transcript();
    ASSERT_TRUE(answer_the_rest_with_defaults(s, file)) << s.transcript();
    EXPECT_EQ(s.transcript().find("Mixed precision?"), std::string::npos) << s.transcript();
    EXPECT_EQ(xlaunch::config::load_config(file).config.mixed_precision, xlaunch::config::MixedPrecision::No);
  }
  {
    // AVX512-BF16 without AVX512-FP16: bf16 is offered, fp16 is not.
    PtySession s(file, dir, on_cpu(dir, xlaunch::test::kCpuinfoAvx512Bf16));
    ASSERT_TRUE(s.expect("Replace it? (yes/no) [no]: ")) << s.transcript();
    s.type("yes\n");
    ASSERT_TRUE(answer_a_cpu_job_of_two(s)) << s.transcript();
    ASSERT_TRUE(s.expect("This CPU has no 16-bit instructions for fp16 (avx512_fp16, amx_fp16) among its flags"))
        << s.transcript();
    ASSERT_TRUE(s.expect("Mixed precision? (no/bf16) [no]: ")) << s.transcript();
    s.type("fp16\n");
    ASSERT_TRUE(s.expect("'fp16' is not one of no/bf16; try again.")) << s.transcript();
    s.type("bf16\n");
    ASSERT_TRUE(answer_the_rest_with_defaults(s, file)) << s.transcript();
    EXPECT_EQ(xlaunch::config::load_config(file).config.mixed_precision, xlaunch::config::MixedPrecision::Bf16);
  }
}

// `xlaunch run` warns at the start of a CPU job whose CPU lacks the instructions, naming the flags
// it looked for (--dry_run: the same start, without mpirun).
TEST(ConfigPty, RunWarnsOfMixedPrecisionWithoutTheInstructions) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path, file = dir + "/cfg.yaml";
  { std::ofstream(file) << "distributed_type: MULTI_CPU\nnum_processes: 2\nuse_cpu: true\nmixed_precision: bf16\n"; }
  const std::string warning = "xlaunch: warning: mixed_precision bf16 on a CPU without AVX512-BF16 or AMX-BF16 (flags "
                              "looked for: avx512_bf16, amx_bf16): bf16 autocast runs in software, measured 0.05x fp32 "
                              "on such a CPU; set mixed_precision: no";
  {
    PtySession s({"run", "--config_file", file, "--dry_run", "/bin/true"}, dir, on_cpu(dir, xlaunch::test::kCpuinfoAvx2));
    ASSERT_TRUE(s.expect("mpirun")) << s.transcript();
    EXPECT_EQ(s.wait(), 0) << s.transcript();
    EXPECT_NE(s.transcript().find(warning), std::string::npos) << s.transcript();
  }
  {
    PtySession s({"run", "--config_file", file, "--dry_run", "/bin/true"}, dir, on_cpu(dir, xlaunch::test::kCpuinfoAmx));
    ASSERT_TRUE(s.expect("mpirun")) << s.transcript();
    EXPECT_EQ(s.wait(), 0) << s.transcript();
    EXPECT_EQ(s.transcript().find("xlaunch: warning: mixed_precision"), std::string::npos) << s.transcript();
  }
}

TEST(ConfigPty, EndOfInputAbortsAndWritesNothing) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path, file = dir + "/cfg.yaml";
  PtySession s(file, dir);
  ASSERT_TRUE(s.expect("Which kind of training?")) << s.transcript();
  s.type("MULTI_CPU\n");
  ASSERT_TRUE(s.expect("How many machines")) << s.transcript();
  s.type("\x04");  // Ctrl-D: end of input
  ASSERT_TRUE(s.expect("aborted; nothing written")) << s.transcript();
  EXPECT_EQ(s.wait(), 1);
  EXPECT_NE(access(file.c_str(), F_OK), 0);
}

TEST(ConfigPty, AnExistingFileIsReplacedOnlyWhenTheUserSaysSo) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path, file = dir + "/cfg.yaml";
  xlaunch::config::LaunchConfig c;
  c.gradient_accumulation_steps = 7;
  xlaunch::config::save_config(c, file);
  PtySession s(file, dir);
  ASSERT_TRUE(s.expect(file + " exists. Replace it? (yes/no) [no]: ")) << s.transcript();
  s.type("\n");
  ASSERT_TRUE(s.expect("Left " + file + " unchanged.")) << s.transcript();
  EXPECT_EQ(s.wait(), 0);
  EXPECT_EQ(xlaunch::config::load_config(file).config.gradient_accumulation_steps, 7);
}

// At a terminal, mpirun must be able to read it: rank 0's stdin is what the user types (as with
// mpirun alone), not a job stopped by SIGTTIN because mpirun was put in a background group.
TEST(RunPty, RankZeroReadsWhatIsTypedAtTheTerminal) {
  const xlaunch::test::ScratchDir scratch;
  PtySession s({"run", "--cpu", "--num_processes", "1", "/usr/bin/head", "-n", "1"}, scratch.path);
  ASSERT_TRUE(s.expect("xlaunch: ", 60)) << s.transcript();  // the config line: xlaunch is running
  s.type("typed-at-the-terminal\n");
  ASSERT_TRUE(s.expect("typed-at-the-terminal", 60)) << s.transcript();  // the terminal's echo
  EXPECT_TRUE(s.expect("typed-at-the-terminal", 60)) << "head never printed the line:\n" << s.transcript();
  EXPECT_EQ(s.wait(60), 0) << s.transcript();
}
