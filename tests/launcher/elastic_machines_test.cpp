// Elastic jobs (num_machines MIN:MAX): which machines each attempt runs on (cli/elastic.h), the
// launch plan of an attempt, and the bounded probe of the machines through a fake rsh agent.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <csignal>

#include <chrono>
#include <fstream>

#include "launch/elastic.h"
#include "cli/overrides.h"
#include "launch/launch_plan.h"
#include "scratch_dir.h"
#include "xlaunch/config/config_error.h"

using namespace xlaunch::launcher;
using xlaunch::config::DistributedType;
using xlaunch::config::LaunchConfig;
using Hosts = std::vector<std::string>;

namespace {

LaunchConfig elastic(int min, int max, int per_machine) {
  LaunchConfig c;
  c.distributed_type = DistributedType::MultiCpu;
  c.use_cpu = true;
  c.min_machines = min;
  c.num_machines = max;
  c.num_processes = max * per_machine;
  c.max_restarts = 3;
  c.mpi.hostfile = "/etc/hosts.txt";
  return c;
}

HostAnswer yes(const std::string& h) { return {h, true, ""}; }
HostAnswer no(const std::string& h) { return {h, false, "did not answer `ssh HOST true` within 10 s"}; }

}  // namespace

TEST(ElasticHosts, HostfileGivesHostNamesInOrderOnce) {
  EXPECT_EQ(parse_hostfile("# machines\nsim0 slots=2\n\n  sim1 slots=2 max_slots=4 # the second\nsim0 slots=1\nsim2\n"),
            (Hosts{"sim0", "sim1", "sim2"}));
  EXPECT_TRUE(parse_hostfile("# nothing\n\n").empty());
}

TEST(ElasticHosts, AgentIsOpenMpisFromExtraArgsThenEnvironmentThenSsh) {
  EXPECT_EQ(rsh_agent_argv({}, ""), (Hosts{"ssh", "-o", "BatchMode=yes"}));
  EXPECT_EQ(rsh_agent_argv({}, "ssh : rsh"), (Hosts{"ssh", "-o", "BatchMode=yes"}));
  EXPECT_EQ(rsh_agent_argv({}, "/usr/bin/ssh -p 2222"), (Hosts{"/usr/bin/ssh", "-o", "BatchMode=yes", "-p", "2222"}));
  EXPECT_EQ(rsh_agent_argv({}, "/opt/sim/rsh_agent.sh"), (Hosts{"/opt/sim/rsh_agent.sh"}));
  EXPECT_EQ(rsh_agent_argv({"--mca", "plm_rsh_agent", "rsh", "--mca", "btl", "tcp"}, "/opt/agent"), (Hosts{"rsh"}));
}

TEST(ElasticChoice, FirstMaxThatAnswerInListedOrder) {
  const Hosts listed = {"a", "b", "c", "d"};
  AttemptMachines m = choose_machines(listed, {yes("a"), yes("b"), yes("c"), yes("d")}, {}, 2, 3);
  EXPECT_EQ(m.hosts, (Hosts{"a", "b", "c"}));
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_EQ(m.notes[0], "machine d stands by: the job already has num_machines' MAX (3)");

  m = choose_machines(listed, {yes("a"), no("b"), yes("c"), yes("d")}, {}, 2, 3);
  EXPECT_EQ(m.hosts, (Hosts{"a", "c", "d"}));  // the spare takes b's place
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_EQ(m.notes[0], "machine b left out: did not answer `ssh HOST true` within 10 s");
}

TEST(ElasticChoice, MachineAtFaultTooOftenIsKeptOutEvenWhenItAnswers) {
  const Hosts listed = {"a", "b", "c"};
  // b was at fault twice (the threshold) and was not asked; c once: still in.
  AttemptMachines m = choose_machines(listed, {yes("a"), yes("c")}, {{"b", 2}, {"c", 1}}, 2, 3);
  EXPECT_EQ(m.hosts, (Hosts{"a", "c"}));
  ASSERT_EQ(m.notes.size(), 1u);
  EXPECT_EQ(m.notes[0], "machine b kept out: its ranks were at fault in 2 failed attempts (max_machine_failures 2)");
  // Below the threshold a machine that answers is back.
  m = choose_machines(listed, {yes("a"), yes("b"), yes("c")}, {{"b", 1}}, 2, 3);
  EXPECT_EQ(m.hosts, listed);
  EXPECT_TRUE(m.notes.empty());
}

TEST(ElasticAttempt, FewerMachinesGiveASmallerWorldWithTheSameRanksPerMachine) {
  const LaunchConfig c = elastic(2, 3, 2);
  const LaunchConfig a = attempt_config(c, {"sim0", "sim1"});
  EXPECT_EQ(a.num_machines, 2);
  EXPECT_EQ(a.num_processes, 4);
  EXPECT_EQ(a.min_machines, 0);
  EXPECT_TRUE(a.mpi.hostfile.empty());
  EXPECT_EQ(a.mpi.hosts, (Hosts{"sim0", "sim1"}));

  Environment e;
  e.cpu_cores = 8;
  e.mpirun = "/usr/bin/mpirun";
  e.self_exe = "/opt/xlaunch";
  e.status_dir = "/tmp/st";
  const auto p = make_launch_plan(a, e, "/bin/train", {});
  const std::vector<std::string> head(p.argv.begin(), p.argv.begin() + 9);
  EXPECT_EQ(head, (Hosts{"/usr/bin/mpirun", "-np", "4", "-H", "sim0:2,sim1:2", "--map-by", "ppr:2:node", "--bind-to",
                         "none"}));
  // One machine left: its ranks fill its slots.
  const auto one = make_launch_plan(attempt_config(c, {"sim1"}), e, "/bin/train", {});
  EXPECT_EQ(std::vector<std::string>(one.argv.begin(), one.argv.begin() + 7),
            (Hosts{"/usr/bin/mpirun", "-np", "2", "-H", "sim1:2", "--map-by", "slot"}));
}

TEST(ElasticAttempt, RanksMapToMachinesInOrder) {
  const Hosts hosts = {"sim0", "sim2"};
  EXPECT_EQ(machine_of_rank(hosts, 2, 0), "sim0");
  EXPECT_EQ(machine_of_rank(hosts, 2, 1), "sim0");
  EXPECT_EQ(machine_of_rank(hosts, 2, 2), "sim2");
  EXPECT_EQ(machine_of_rank(hosts, 2, 3), "sim2");
  EXPECT_EQ(machine_of_rank(hosts, 2, 4), "");
  EXPECT_EQ(machine_of_rank(hosts, 2, -1), "");
}

TEST(ElasticOverrides, NumMachinesTakesMinMaxAndRefusesOtherText) {
  LaunchConfig c;
  Overrides o;
  o.texts["num_machines"] = "2:4";
  o.ints["max_machine_failures"] = 3;
  const auto set = apply_overrides(c, o, 0);
  EXPECT_EQ(c.min_machines, 2);
  EXPECT_EQ(c.num_machines, 4);
  EXPECT_EQ(c.max_machine_failures, 3);
  EXPECT_EQ(set, (Hosts{"num_machines", "max_machine_failures", "distributed_type"}));
  o.texts["num_machines"] = "4:2";
  LaunchConfig d;
  try {
    apply_overrides(d, o, 0);
    ADD_FAILURE() << "4:2 accepted";
  } catch (const xlaunch::config::ConfigError& e) {
    EXPECT_EQ(e.info().key, "num_machines");
    EXPECT_EQ(e.info().file, "command line");
    EXPECT_NE(e.info().allowed.find("MIN:MAX"), std::string::npos);
  }
}

// The probe through a fake agent: "up" answers, "refuses" fails saying why, "hangs" never ends.
TEST(ElasticProbe, AnswersRefusalsAndHangsAreToldApartWithinTheBound) {
  const xlaunch::test::ScratchDir scratch;
  const std::string agent = scratch.path + "/agent.sh";
  std::ofstream(agent) << "#!/bin/sh\n"
                          "case \"$1\" in\n"
                          "  up) exec \"$2\" ;;\n"
                          "  refuses) echo \"connect to host refuses: No route to host\" >&2; exit 255 ;;\n"
                          "  hangs) echo $$ > " << scratch.path << "/hang.pid; exec sleep 300 ;;\n"
                          "esac\n";
  chmod(agent.c_str(), 0755);
  const auto t0 = std::chrono::steady_clock::now();
  const auto answers = probe_hosts({agent}, {"up", "refuses", "hangs", "localhost"}, 2);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(took, 2 + 20);  // bounded: the hanging probe is killed at the deadline (generous for a loaded machine)
  ASSERT_EQ(answers.size(), 4u);
  EXPECT_TRUE(answers[0].answered) << answers[0].why;
  EXPECT_FALSE(answers[1].answered);
  EXPECT_EQ(answers[1].why, "`" + agent + " HOST true` exited with code 255: connect to host refuses: No route to host");
  EXPECT_FALSE(answers[2].answered);
  EXPECT_EQ(answers[2].why, "did not answer `" + agent + " HOST true` within 2 s");
  EXPECT_TRUE(answers[3].answered);  // this machine: mpirun starts its ranks itself
  // The hanging probe's process is gone.
  std::ifstream pid_file(scratch.path + "/hang.pid");
  int pid = 0;
  ASSERT_TRUE(pid_file >> pid);
  EXPECT_NE(kill(pid, 0), 0);
}
