// The launcher's other decisions: how a job ended, the rank a rank's status names, CLI overrides,
// finding programs, Open MPI's version text, and the prompts.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include <fstream>
#include <map>
#include <sstream>

#include "cli/overrides.h"
#include "cli/prompt.h"
#include "launch/job_outcome.h"
#include "launch/launch_error.h"
#include "launch/machine.h"
#include "launch/programs.h"
#include "launch/rank_wrapper.h"
#include "xlaunch/place.h"
#include "scratch_dir.h"

using namespace xlaunch::launcher;
using xlaunch::config::DistributedType;
using xlaunch::config::LaunchConfig;

namespace {
int exited(int code) { return code << 8; }  // a waitpid status for a normal exit

xlaunch::GetEnv env_of(const std::map<std::string, std::string>& env) {
  return [&env](const char* name) -> const char* {
    const auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
}
}  // namespace

TEST(SummarizeJob, AllRanksSucceeded) {
  const auto o = summarize_job(exited(0), {{0, false, 0, 5}, {1, false, 0, 6}}, 2);
  EXPECT_EQ(o.exit_code, 0);
  EXPECT_EQ(o.message, "");
}

TEST(SummarizeJob, TheFirstFailureDecidesAndIsNamed) {
  const auto o = summarize_job(exited(1), {{0, true, SIGTERM, 20}, {1, false, 3, 10}}, 2);
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_EQ(o.message, "rank 1 exited with code 3; after that, rank 0 was killed by signal 15 (SIGTERM)");
}

TEST(SummarizeJob, ASignalBecomes128PlusIt) {
  const auto o = summarize_job(exited(1), {{0, false, 0, 1}, {1, true, SIGSEGV, 2}}, 2);
  EXPECT_EQ(o.exit_code, 128 + SIGSEGV);
  EXPECT_EQ(o.message, "rank 1 was killed by signal 11 (SIGSEGV)");
}

TEST(SummarizeJob, MpirunFailedBeforeTheRanksReported) {
  const auto o = summarize_job(exited(213), {}, 2);
  EXPECT_EQ(o.exit_code, 213);
  EXPECT_NE(o.message.find("0 of 2 ranks reported"), std::string::npos) << o.message;
  // mpirun said success but a rank never reported: still a failure.
  EXPECT_EQ(summarize_job(exited(0), {{0, false, 0, 1}}, 2).exit_code, 1);
}

// The wrapper names a rank's status file with the rank the runtime (xlaunch/place.h) sees.
TEST(RankFromEnv, AgreesWithTheRuntimesPlace) {
  const std::vector<std::pair<std::map<std::string, std::string>, int>> cases = {
      {{}, 0},
      {{{"OMPI_COMM_WORLD_RANK", "3"}, {"OMPI_COMM_WORLD_SIZE", "4"}, {"PMIX_RANK", "3"}}, 3},
      {{{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"PMI_RANK", "0"}, {"PMI_SIZE", "2"}}, 1},
      {{{"PMI_RANK", "2"}, {"PMI_SIZE", "3"}}, 2},
      {{{"PMI_RANK", "2"}}, 0},   // no size: not a place the runtime accepts either
      {{{"PMIX_RANK", "5"}}, 0},  // PMIx alone gives no world size
      {{{"PMIX_RANK", "5"}, {"SLURM_PROCID", "4"}, {"SLURM_NTASKS", "6"}}, 4},
  };
  for (const auto& [env, rank] : cases) {
    EXPECT_EQ(rank_from_env(env_of(env)), xlaunch::place_from_env(env_of(env)).rank);
    EXPECT_EQ(rank_from_env(env_of(env)), rank);
  }
}

TEST(RankFromEnv, VariablesTheRuntimeRefusesGiveRankZero) {
  const std::map<std::string, std::string> env = {{"OMPI_COMM_WORLD_RANK", "4"}, {"OMPI_COMM_WORLD_SIZE", "4"}};
  EXPECT_THROW(xlaunch::place_from_env(env_of(env)), xlaunch::UsageError);
  EXPECT_EQ(rank_from_env(env_of(env)), 0);
}

TEST(Overrides, CommandLineBeatsTheFileAndSettlesTheType) {
  LaunchConfig c;  // as if from a file: NO, 1 process
  c.mixed_precision = xlaunch::config::MixedPrecision::Fp16;
  Overrides o;
  o.ints["num_processes"] = 2;
  o.texts["mixed_precision"] = "bf16";
  auto set = apply_overrides(c, o, /*gpu_count=*/0);
  EXPECT_EQ(c.num_processes, 2);
  EXPECT_EQ(c.mixed_precision, xlaunch::config::MixedPrecision::Bf16);
  EXPECT_EQ(c.distributed_type, DistributedType::MultiCpu);
  EXPECT_EQ(set, (std::vector<std::string>{"num_processes", "mixed_precision", "distributed_type"}));

  LaunchConfig g;
  apply_overrides(g, o, /*gpu_count=*/2);
  EXPECT_EQ(g.distributed_type, DistributedType::MultiGpu);

  LaunchConfig f;
  f.distributed_type = DistributedType::MultiGpu;
  f.num_processes = 2;
  Overrides cpu;
  cpu.flags["use_cpu"] = true;
  EXPECT_EQ(apply_overrides(f, cpu, 2), (std::vector<std::string>{"use_cpu", "distributed_type"}));
  EXPECT_EQ(f.distributed_type, DistributedType::MultiCpu);
  EXPECT_TRUE(f.use_cpu);

  LaunchConfig untouched;
  EXPECT_TRUE(apply_overrides(untouched, Overrides{}, 0).empty());

  // --deterministic over a file's cudnn_benchmark: true: the command line's choice wins.
  LaunchConfig tuned;
  tuned.cudnn_benchmark = true;
  Overrides det;
  det.flags["deterministic"] = true;
  det.ints["profile_ops"] = 3;
  EXPECT_EQ(apply_overrides(tuned, det, 0), (std::vector<std::string>{"profile_ops", "deterministic"}));
  EXPECT_TRUE(tuned.deterministic);
  EXPECT_FALSE(tuned.cudnn_benchmark);
  EXPECT_EQ(tuned.profile_ops, 3);
}

TEST(MachineDefaults, GpusElseOneProcessPerCore) {
  EXPECT_EQ(machine_defaults(4, 16).distributed_type, DistributedType::MultiGpu);
  EXPECT_EQ(machine_defaults(4, 16).num_processes, 4);
  EXPECT_EQ(machine_defaults(1, 16).distributed_type, DistributedType::No);
  EXPECT_EQ(machine_defaults(0, 8).distributed_type, DistributedType::MultiCpu);
  EXPECT_EQ(machine_defaults(0, 8).num_processes, 8);
  EXPECT_EQ(machine_defaults(0, 1).distributed_type, DistributedType::No);
}

TEST(Programs, FindsLikeExecvp) {
  const xlaunch::test::ScratchDir scratch;
  const std::string dir = scratch.path;
  const std::string exe = dir + "/tool", plain = dir + "/data";
  std::ofstream(exe) << "#!/bin/sh\n";
  std::ofstream(plain) << "x";
  chmod(exe.c_str(), 0755);
  chmod(plain.c_str(), 0644);
  EXPECT_EQ(find_program("tool", "/nonexistent:" + dir), exe);
  EXPECT_EQ(find_program(exe, ""), exe);
  EXPECT_EQ(find_program("tool", "/nonexistent"), std::nullopt);
  EXPECT_EQ(resolve_train_binary("tool", dir), exe);
  try {
    resolve_train_binary(plain, "");
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("chmod +x"), std::string::npos) << e.what();
  }
  try {
    resolve_train_binary(dir + "/absent", "");
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("not found"), std::string::npos) << e.what();
  }
  try {
    resolve_train_binary(dir, "");
    FAIL();
  } catch (const LaunchError& e) {
    EXPECT_NE(std::string(e.what()).find("is not a file"), std::string::npos) << e.what();
  }
}

TEST(Programs, OpenMpiVersionText) {
  EXPECT_EQ(parse_open_mpi_version("mpirun (Open MPI) 4.1.4\n\nReport bugs to http://www.open-mpi.org/community/help/\n"),
            "4.1.4");
  EXPECT_EQ(parse_open_mpi_version("mpirun (Open MPI) 5.0.3\n"), "5.0.3");
  EXPECT_EQ(parse_open_mpi_version("mpirun (OpenRTE) 2.1.1\n"), "2.1.1");
  EXPECT_EQ(parse_open_mpi_version("HYDRA build details:\n    Version:                                 4.0.2\n"),
            std::nullopt);
  EXPECT_EQ(parse_open_mpi_version("Intel(R) MPI Library for Linux* OS, Version 2021.6\n"), std::nullopt);
  EXPECT_EQ(parse_open_mpi_version(""), std::nullopt);
}

TEST(Prompter, DefaultsChoicesAndReasking) {
  std::istringstream in("\nmulti_gpu\nzero\n0\n3\nmaybe\ny\n");
  std::ostringstream out;
  Prompter p(in, out);
  EXPECT_EQ(p.choice("Kind?", {"NO", "MULTI_CPU", "MULTI_GPU"}, "MULTI_CPU"), "MULTI_CPU");
  EXPECT_EQ(p.choice("Kind?", {"NO", "MULTI_CPU", "MULTI_GPU"}, "NO"), "MULTI_GPU");
  EXPECT_EQ(p.integer("How many?", 2, 1, 8), 3);  // "zero" and "0" are refused
  EXPECT_TRUE(p.yes_no("Sure?", false));          // "maybe" is refused
  EXPECT_NE(out.str().find("Kind? (NO/MULTI_CPU/MULTI_GPU) [MULTI_CPU]: "), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("'zero' is not a whole number from 1 to 8; try again."), std::string::npos) << out.str();
  EXPECT_NE(out.str().find("'0' is not a whole number from 1 to 8"), std::string::npos);
  EXPECT_NE(out.str().find("'maybe' is not yes or no"), std::string::npos);
  EXPECT_THROW(p.integer("More?", 1, 1, 2), Aborted);  // end of input
}

TEST(VisibleGpus, FollowsCudaVisibleDevices) {
  const std::vector<Gpu> all = {{"A", 1}, {"B", 2}, {"C", 3}};
  auto names = [](const std::vector<Gpu>& g) {
    std::string s;
    for (const auto& x : g) s += x.name;
    return s;
  };
  EXPECT_EQ(names(visible_gpus(all, "2,0")), "CA");
  EXPECT_EQ(names(visible_gpus(all, "")), "");
  EXPECT_EQ(names(visible_gpus(all, "-1")), "");
  EXPECT_EQ(names(visible_gpus(all, "1,7,0")), "B");
  EXPECT_EQ(names(visible_gpus(all, "GPU-aaaa,GPU-bbbb")), "AB");
}
