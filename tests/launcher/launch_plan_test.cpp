// The launch plan against literal argv vectors: every decision make_launch_plan takes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>

#include "cli/overrides.h"
#include "launch/launch_plan.h"
#include "xlaunch/config/config_error.h"
#include "xlaunch/config/setting.h"
#include "xlaunch/env_vars.h"

using namespace xlaunch::launcher;
using xlaunch::config::DistributedType;
using xlaunch::config::LaunchConfig;
using Argv = std::vector<std::string>;

namespace {

Environment machine(bool root, int cores) {
  Environment e;
  e.is_root = root;
  e.cpu_cores = cores;
  e.mpirun = "/usr/bin/mpirun";
  e.self_exe = "/opt/xlaunch";
  e.status_dir = "/tmp/st";
  e.run_id = "RUN";
  return e;
}

// The -x exports every plan ends its mpirun options with.
Argv exports() {
  Argv a;
  for (const auto* v : xlaunch::env::kAll) a.insert(a.end(), {"-x", v->name});
  return a;
}

Argv concat(Argv head, const Argv& exports_part, const Argv& tail) {
  head.insert(head.end(), exports_part.begin(), exports_part.end());
  head.insert(head.end(), tail.begin(), tail.end());
  return head;
}

// Several machines: the out-of-band channel's keepalive (launch_plan.h), after --bind-to.
const Argv kKeepalive = {"--mca", "oob_tcp_keepalive_time", "5", "--mca", "oob_tcp_keepalive_intvl", "2",
                         "--mca", "oob_tcp_keepalive_probes", "3"};

Argv with_keepalive(Argv a) {
  a.insert(a.end(), kKeepalive.begin(), kKeepalive.end());
  return a;
}

const Argv kTail = {"/opt/xlaunch", "__rank", "--status_dir", "/tmp/st", "--", "/bin/train", "--epochs", "3"};

LaunchConfig cpu(int n) {
  LaunchConfig c;
  c.distributed_type = n > 1 ? DistributedType::MultiCpu : DistributedType::No;
  c.num_processes = n;
  c.use_cpu = n > 1;
  return c;
}

}  // namespace

TEST(LaunchPlan, OneProcessNonRoot) {
  const auto p = make_launch_plan(LaunchConfig{}, machine(false, 2), "/bin/train", {"--epochs", "3"});
  EXPECT_EQ(p.argv, concat({"/usr/bin/mpirun", "-np", "1", "--map-by", "slot", "--bind-to", "none"}, exports(), kTail));
}

TEST(LaunchPlan, TwoLocalProcessesAsRoot) {
  const auto p = make_launch_plan(cpu(2), machine(true, 2), "/bin/train", {"--epochs", "3"});
  EXPECT_EQ(p.argv, concat({"/usr/bin/mpirun", "--allow-run-as-root", "-np", "2", "--map-by", "slot", "--bind-to", "none"},
                           exports(), kTail));
}

TEST(LaunchPlan, OversubscribesOnlyACpuRunWithMoreProcessesThanCores) {
  auto p = make_launch_plan(cpu(4), machine(false, 2), "/bin/train", {"--epochs", "3"});
  EXPECT_EQ(p.argv, concat({"/usr/bin/mpirun", "-np", "4", "--oversubscribe", "--map-by", "slot", "--bind-to", "none"},
                           exports(), kTail));
  p = make_launch_plan(cpu(2), machine(false, 2), "/bin/train", {});
  EXPECT_EQ(std::count(p.argv.begin(), p.argv.end(), "--oversubscribe"), 0);
  LaunchConfig gpu;
  gpu.distributed_type = DistributedType::MultiGpu;
  gpu.num_processes = 4;
  p = make_launch_plan(gpu, machine(false, 2), "/bin/train", {});
  EXPECT_EQ(std::count(p.argv.begin(), p.argv.end(), "--oversubscribe"), 0);
}

TEST(LaunchPlan, TwoMachinesWithAHostfile) {
  LaunchConfig c;
  c.distributed_type = DistributedType::MultiGpu;
  c.num_processes = 8;
  c.num_machines = 2;
  c.mpi.hostfile = "/etc/xlaunch/hosts";
  const auto p = make_launch_plan(c, machine(false, 64), "/bin/train", {"--epochs", "3"});
  EXPECT_EQ(p.argv, concat(with_keepalive({"/usr/bin/mpirun", "-np", "8", "--hostfile", "/etc/xlaunch/hosts",
                                           "--map-by", "ppr:4:node", "--bind-to", "none"}),
                           exports(), kTail));
}

TEST(LaunchPlan, TheDaemonsAgentRunsUnderXlaunchAndEachRankSaysHello) {
  LaunchConfig c = cpu(4);
  c.num_machines = 2;
  c.mpi.hosts = {"node1", "node2"};
  Environment e = machine(false, 2);
  e.rsh_agent = "ssh -x";
  e.hello_port = 4711;
  const Argv tail = {"/opt/xlaunch", "__rank", "--status_dir", "/tmp/st", "--hello", "4711", "--", "/bin/train"};
  const Argv head = with_keepalive({"/usr/bin/mpirun", "-np", "4", "-H", "node1:2,node2:2", "--map-by", "ppr:2:node",
                                    "--bind-to", "none"});
  Argv wrapped = head;
  wrapped.insert(wrapped.end(), {"--mca", "plm_rsh_agent", "/opt/xlaunch __agent 2 ssh -x"});
  EXPECT_EQ(make_launch_plan(c, e, "/bin/train", {}).argv, concat(wrapped, exports(), tail));
  // An agent the config chooses is Open MPI's to use as it is.
  c.mpi.extra_args = {"--mca", "plm_rsh_agent", "/usr/bin/myssh"};
  Argv chosen = head;
  chosen.insert(chosen.end(), c.mpi.extra_args.begin(), c.mpi.extra_args.end());
  EXPECT_EQ(make_launch_plan(c, e, "/bin/train", {}).argv, concat(chosen, exports(), tail));
  // One machine: no daemons to start.
  EXPECT_EQ(make_launch_plan(cpu(2), e, "/bin/train", {}).argv,
            concat({"/usr/bin/mpirun", "-np", "2", "--map-by", "slot", "--bind-to", "none"}, exports(), tail));
}

TEST(LaunchPlan, TwoMachinesByNameUseDashH) {
  LaunchConfig c = cpu(4);
  c.num_machines = 2;
  c.mpi.hosts = {"node1", "node2"};
  const auto p = make_launch_plan(c, machine(true, 2), "/bin/train", {"--epochs", "3"});
  EXPECT_EQ(p.argv, concat(with_keepalive({"/usr/bin/mpirun", "--allow-run-as-root", "-np", "4", "-H",
                                           "node1:2,node2:2", "--map-by", "ppr:2:node", "--bind-to", "none"}),
                           exports(), kTail));
}

TEST(LaunchPlan, BindingMappingAndExtraArgsFromTheConfig) {
  LaunchConfig c = cpu(2);
  c.mpi.bind_to = "core";
  c.mpi.map_by = "socket";
  c.mpi.extra_args = {"--mca", "btl", "self,tcp"};
  const auto p = make_launch_plan(c, machine(false, 8), "/bin/train", {"--epochs", "3"});
  EXPECT_EQ(p.argv, concat({"/usr/bin/mpirun", "-np", "2", "--map-by", "socket", "--bind-to", "core", "--mca", "btl",
                            "self,tcp"},
                           exports(), kTail));
}

TEST(LaunchPlan, ExportsEveryContractVariableOnceWithItsValue) {
  LaunchConfig c = cpu(2);
  c.mixed_precision = xlaunch::config::MixedPrecision::Bf16;
  c.gradient_accumulation_steps = 4;
  c.ddp.bucket_cap_mb = 12.5;
  c.ddp.comm_hook = "bf16";
  c.ddp.powersgd_rank = 3;
  c.ddp.powersgd_start_step = 50;
  c.loader.num_workers = xlaunch::config::LoaderSection::kAutoWorkers;
  c.debug = true;
  c.log_dir = "/logs";
  Environment e = machine(false, 2);
  e.config_file = "/cfg.yaml";
  e.restart_count = 2;
  const auto p = make_launch_plan(c, e, "/bin/train", {});
  ASSERT_EQ(p.env.size(), std::size(xlaunch::env::kAll));
  std::map<std::string, std::string> env(p.env.begin(), p.env.end());
  EXPECT_EQ(env.size(), p.env.size());  // no name twice
  for (const auto* v : xlaunch::env::kAll) EXPECT_EQ(env.count(v->name), 1u) << v->name;
  EXPECT_EQ(env["XLAUNCH_USE_CPU"], "1");
  EXPECT_EQ(env["XLAUNCH_MIXED_PRECISION"], "bf16");
  EXPECT_EQ(env["XLAUNCH_GRADIENT_ACCUMULATION_STEPS"], "4");
  EXPECT_EQ(env["XLAUNCH_BUCKET_CAP_MB"], "12.5");
  EXPECT_EQ(env["XLAUNCH_COMM_HOOK"], "bf16");
  EXPECT_EQ(env["XLAUNCH_POWERSGD_RANK"], "3");
  EXPECT_EQ(env["XLAUNCH_POWERSGD_START_STEP"], "50");
  EXPECT_EQ(env["XLAUNCH_NUM_WORKERS"], "auto");
  EXPECT_EQ(env["XLAUNCH_DEBUG"], "1");
  EXPECT_EQ(env["XLAUNCH_LOG_DIR"], "/logs");
  EXPECT_EQ(env["XLAUNCH_RUN_ID"], "RUN");
  EXPECT_EQ(env["XLAUNCH_RESTART_COUNT"], "2");
  EXPECT_EQ(env["XLAUNCH_CONFIG_FILE"], "/cfg.yaml");
  EXPECT_EQ(env["XLAUNCH_STATUS_DIR"], "/tmp/st");
  EXPECT_EQ(env["XLAUNCH_GPU_IDS"], "all");
  // Defaults of the config agree with the defaults the contract declares for the runtime.
  const auto d = exported_env(LaunchConfig{}, machine(false, 2));
  for (const auto& [name, value] : d) {
    for (const auto* v : xlaunch::env::kAll) {
      if (name == v->name && name != "XLAUNCH_RUN_ID" && name != "XLAUNCH_CONFIG_FILE" && name != "XLAUNCH_STATUS_DIR") {
        EXPECT_EQ(value, v->default_value) << name;
      }
    }
  }
}

TEST(LaunchPlan, ExportsTheProjectAndCheckpointSettingsAndWhatToResumeFrom) {
  LaunchConfig c = cpu(2);
  c.project_dir = "/runs/mnist";
  c.checkpoint.total_limit = 3;
  c.checkpoint.every_n_steps = 500;
  c.checkpoint.every_epoch = true;
  Environment e = machine(false, 2);
  e.resume = "latest";
  const auto p = make_launch_plan(c, e, "/bin/train", {});
  std::map<std::string, std::string> env(p.env.begin(), p.env.end());
  EXPECT_EQ(env["XLAUNCH_PROJECT_DIR"], "/runs/mnist");
  EXPECT_EQ(env["XLAUNCH_CHECKPOINT_TOTAL_LIMIT"], "3");
  EXPECT_EQ(env["XLAUNCH_CHECKPOINT_EVERY_N_STEPS"], "500");
  EXPECT_EQ(env["XLAUNCH_CHECKPOINT_EVERY_EPOCH"], "1");
  EXPECT_EQ(env["XLAUNCH_RESUME"], "latest");
  // Exported like every other: the argv is the same as without them.
  EXPECT_EQ(p.argv, make_launch_plan(cpu(2), machine(false, 2), "/bin/train", {}).argv);
  // Not resuming: empty, the runtime starts afresh.
  EXPECT_EQ(exported_env(c, machine(false, 2))[std::distance(
                std::begin(xlaunch::env::kAll),
                std::find(std::begin(xlaunch::env::kAll), std::end(xlaunch::env::kAll), &xlaunch::env::kResume))],
            (std::pair<std::string, std::string>{"XLAUNCH_RESUME", ""}));
}

TEST(AttemptResume, TheFirstAttemptTakesTheOptionRestartsTheNewestCheckpoint) {
  EXPECT_EQ(attempt_resume("", "", 0), "");
  EXPECT_EQ(attempt_resume("", "/p", 0), "");
  EXPECT_EQ(attempt_resume("latest", "/p", 0), "latest");
  EXPECT_EQ(attempt_resume("/p/checkpoints/checkpoint_7", "/p", 0), "/p/checkpoints/checkpoint_7");
  // Restarts with a project_dir: the newest complete checkpoint, whatever the first attempt took.
  EXPECT_EQ(attempt_resume("", "/p", 1), "latest");
  EXPECT_EQ(attempt_resume("/p/checkpoints/checkpoint_7", "/p", 1), "latest");
  EXPECT_EQ(attempt_resume("latest", "/p", 3), "latest");
  // Without one there is no "newest": a restart starts as the first attempt did.
  EXPECT_EQ(attempt_resume("", "", 1), "");
  EXPECT_EQ(attempt_resume("/ckpt/a", "", 2), "/ckpt/a");
}

TEST(ShellJoin, QuotesOnlyWhatNeedsIt) {
  EXPECT_EQ(shell_join({"mpirun", "-np", "2", "a b", "it's", "", "x=1,2"}), "mpirun -np 2 'a b' 'it'\\''s' '' x=1,2");
}

// Precedence (xlaunch/settings.h): command line > the user's XLAUNCH_* variables > file > default.
// The launch exports the result, so a variable the user set reaches the ranks unless the command
// line says otherwise.
TEST(Precedence, TheUsersVariableBeatsTheFileAndTheCommandLineBeatsBoth) {
  LaunchConfig file = cpu(2);
  file.gradient_accumulation_steps = 3;  // as if from the file; ddp.zero_stage left at its default
  const xlaunch::config::EnvMap user = {{"XLAUNCH_ZERO_STAGE", "2"}, {"XLAUNCH_GRADIENT_ACCUMULATION_STEPS", "8"},
                                        {"XLAUNCH_PIN_MEMORY", "0"}, {"HOME", "/root"}};
  LaunchConfig c = file;
  EXPECT_EQ(xlaunch::config::apply_environment(c, user),
            (std::vector<std::string>{"gradient_accumulation_steps", "ddp.zero_stage", "loader.pin_memory"}));
  Overrides cli;
  cli.ints["gradient_accumulation_steps"] = 4;
  EXPECT_EQ(apply_overrides(c, cli, 0), (std::vector<std::string>{"gradient_accumulation_steps"}));
  std::map<std::string, std::string> env;
  for (const auto& [name, value] : make_launch_plan(c, machine(false, 2), "/bin/train", {}).env) env[name] = value;
  EXPECT_EQ(env["XLAUNCH_ZERO_STAGE"], "2");
  EXPECT_EQ(env["XLAUNCH_GRADIENT_ACCUMULATION_STEPS"], "4");
  EXPECT_EQ(env["XLAUNCH_PIN_MEMORY"], "0");
  EXPECT_EQ(env["XLAUNCH_BUCKET_CAP_MB"], "25");  // neither set it: the default

  // A value the key refuses names the variable.
  LaunchConfig d;
  try {
    xlaunch::config::apply_environment(d, {{"XLAUNCH_ZERO_STAGE", "two"}});
    ADD_FAILURE() << "XLAUNCH_ZERO_STAGE=two accepted";
  } catch (const xlaunch::config::ConfigError& e) {
    EXPECT_EQ(e.info().file, "XLAUNCH_ZERO_STAGE");
    EXPECT_EQ(e.info().key, "ddp.zero_stage");
  }
}
