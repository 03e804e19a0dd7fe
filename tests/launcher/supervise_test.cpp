// Supervising mpirun (launch/supervise.h, launch/job.h): the teardown's timing as a pure decision,
// where ranks run, which machines did not report and how they are named; run_plan ending a
// stand-in for mpirun that would never end by itself once the job has failed; and the rank
// wrapper's lifeline to the launching machine (launch/lifeline.h).
#include "launch/supervise.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <string>

#include "launch/job.h"
#include "launch/lifeline.h"
#include "scratch_dir.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/rank_status.h"
#include "xlaunch/status/verdict_file.h"

using namespace xlaunch::launcher;
using xlaunch::config::LaunchConfig;
using Action = Teardown::Action;

namespace {

constexpr int64_t kS = 1000000000;

bool alive(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string pid_field, comm, state;
  return (stat >> pid_field >> comm >> state) && state != "Z" && state != "X";
}

LaunchConfig two_by_two() {
  LaunchConfig c;
  c.num_processes = 4;
  c.num_machines = 2;
  c.use_cpu = true;
  c.distributed_type = xlaunch::config::DistributedType::MultiCpu;
  c.mpi.hostfile = "hosts.txt";
  return c;
}

}  // namespace

TEST(Teardown, WaitsTheGraceThenTerminatesThenKillsOnce) {
  Teardown t;
  EXPECT_EQ(t.step(100 * kS, false), Action::kWait);
  EXPECT_EQ(t.failed_since_ns(), 0);
  EXPECT_EQ(t.step(101 * kS, true), Action::kWait);
  EXPECT_EQ(t.failed_since_ns(), 101 * kS);
  EXPECT_EQ(t.step((101 + kMpirunGraceS) * kS - 1, true), Action::kWait);
  EXPECT_EQ(t.step((101 + kMpirunGraceS) * kS, true), Action::kTerminate);
  EXPECT_EQ(t.step((101 + kMpirunGraceS) * kS + 1, true), Action::kWait);
  EXPECT_EQ(t.step((101 + kMpirunGraceS + kMpirunTermS) * kS, true), Action::kKill);
  EXPECT_EQ(t.step(1000 * kS, true), Action::kWait);
  EXPECT_EQ(t.failed_since_ns(), 101 * kS);  // the first sighting stays
}

TEST(RankHosts, MachinesInHostfileOrderWithTheSameNumberOfRanksEach) {
  EXPECT_EQ(rank_hosts(two_by_two(), "# the cluster\nsim1 slots=2\n\nsim0 slots=2 # second\nsim1\n"),
            (std::vector<std::string>{"sim1", "sim1", "sim0", "sim0"}));
  LaunchConfig c = two_by_two();
  c.mpi.hostfile.clear();
  c.mpi.hosts = {"a", "b"};
  EXPECT_EQ(rank_hosts(c, ""), (std::vector<std::string>{"a", "a", "b", "b"}));
  // Unknown placement: an explicit mapping, one machine, too few hosts listed.
  c.mpi.map_by = "slot";
  EXPECT_TRUE(rank_hosts(c, "").empty());
  EXPECT_TRUE(rank_hosts(LaunchConfig{}, "").empty());
  EXPECT_TRUE(rank_hosts(two_by_two(), "sim0 slots=4\n").empty());
}

TEST(HostsNamed, TheMachinesOfMpirunsRemainingAgents) {
  const std::vector<std::vector<std::string>> children = {
      {"/usr/bin/ssh", "-x", "sim1", "orted", "-mca", "ess", "env"}, {"/bin/bash", "rsh_agent.sh", "sim3", "orted"},
      {"orted", "--hnp-uri", "sim10"}};
  EXPECT_EQ(hosts_named(children, {"sim0", "sim1", "sim1", "sim2", "sim3"}),
            (std::vector<std::string>{"sim1", "sim3"}));
  EXPECT_TRUE(hosts_named({}, {"sim0"}).empty());
}

TEST(UnreachableMachines, DaemonsThatDidNotReportAndMachinesWhoseRanksAllStayedSilent) {
  // (shared: the statuses come from every machine, through a shared log_dir)
  const std::vector<std::string> hosts = {"sim0", "sim0", "sim1", "sim1"};
  // Every rank reported (a shared log_dir), but sim1's daemon never did.
  std::vector<RankStatus> all = {{0, false, 124, 1, "sim0"}, {1, false, 124, 1, "sim0"}, {2, false, 124, 1, "sim1"},
                                 {3, false, 124, 1, "sim1"}};
  auto u = unreachable_machines(hosts, all, {"sim1"}, true);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].host, "sim1");
  EXPECT_EQ(u[0].ranks, (std::vector<int>{2, 3}));
  // sim0's ranks reported, sim1's none: sim1 went away (also the first machine, the other way round).
  u = unreachable_machines(hosts, {all[0], all[1]}, {}, true);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].host, "sim1");
  u = unreachable_machines(hosts, {all[2]}, {}, true);
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].host, "sim0");
  // Statuses not shared (no shared log_dir: only the launcher's machine reports), or a job that
  // succeeded: a silent machine says nothing; a daemon that did not report still does.
  EXPECT_TRUE(unreachable_machines(hosts, {all[0], all[1]}, {}, false).empty());
  EXPECT_EQ(unreachable_machines(hosts, {all[0], all[1]}, {"sim1"}, false).size(), 1u);
}

TEST(UnreachableText, NamesTheMachineItsRanksAndSince) {
  setenv("TZ", "UTC", 1);
  tzset();
  const int64_t t = (16 * 3600 + 19 * 60 + 41) * kS;  // 1970-01-01 16:19:41 UTC
  EXPECT_EQ(unreachable_text({{"sim1", {1}, t}}, 0),
            "machine sim1 (rank 1) unreachable since 16:19:41: its link or the machine is down; its processes may "
            "still run there");
  EXPECT_EQ(unreachable_text({{"sim0", {0, 1}, 0}, {"sim2", {4, 5}, t}}, t + 5 * kS),
            "machine sim0 (ranks 0, 1) unreachable since 16:19:46: its link or the machine is down; its processes may "
            "still run there; machine sim2 (ranks 4, 5) unreachable since 16:19:41: its link or the machine is down; "
            "its processes may still run there");
}

// A stand-in for mpirun that waits for ever (as mpirun does for a daemon it cannot reach), with a
// child in its process group (its agent) that ignores SIGTERM: once a verdict exists, run_plan ends
// both within the grace, the SIGTERM step and a generous bound for a loaded machine.
TEST(RunPlan, EndsAnMpirunThatDoesNotFinishAfterAVerdictWithItsProcessGroup) {
  const xlaunch::test::ScratchDir scratch;
  std::string why;
  const std::string status = xlaunch::files::make_private_dir(scratch.path, "status-", &why);
  ASSERT_FALSE(status.empty()) << why;
  const std::string agent_pid = scratch.path + "/agent.pid";
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c",
               "sh -c 'trap \"\" TERM; echo $$ > " + agent_pid + "; while :; do sleep 1; done' & exec sleep 600"};
  JobWatch watch{status, 2, {"sim0", "sim1"}};
  ASSERT_TRUE(xlaunch::status::write_verdict(status, {124, 0, "job stuck: allreduce #259 ..."}));
  ASSERT_TRUE(xlaunch::status::write_rank_status(status, {0, false, 124, 1, "sim0"}, &why)) << why;
  const auto start = std::chrono::steady_clock::now();
  const JobRun run = run_plan(plan, watch);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(run.ended_by_launcher);
  EXPECT_GT(run.failed_ns, 0);
  ASSERT_TRUE(WIFSIGNALED(run.wait_status));
  EXPECT_LT(took, kMpirunGraceS + kMpirunTermS + 30) << "run_plan waited " << took << " s";
  pid_t agent = 0;
  std::ifstream(agent_pid) >> agent;
  ASSERT_GT(agent, 0);
  for (int i = 0; i < 500 && alive(agent); ++i) usleep(10000);
  EXPECT_FALSE(alive(agent)) << "mpirun's child (which ignores SIGTERM) outlived the teardown";
  if (alive(agent)) kill(agent, SIGKILL);
  // The outcome: the verdict decides; sim1 (no status, while sim0's rank left one) is named.
  const JobOutcome o = job_outcome(run, watch);
  EXPECT_EQ(o.exit_code, 124);
  EXPECT_NE(o.message.find("job stuck: allreduce #259 ...; machine sim1 (rank 1) unreachable since "),
            std::string::npos)
      << o.message;
  xlaunch::files::remove_private_dir(status);
}

TEST(RunPlan, LeavesAJobThatSucceedsAlone) {
  const xlaunch::test::ScratchDir scratch;
  std::string why;
  const std::string status = xlaunch::files::make_private_dir(scratch.path, "status-", &why);
  ASSERT_FALSE(status.empty()) << why;
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c", "exit 0"};
  const JobRun run = run_plan(plan, {status, 1, {}});
  EXPECT_FALSE(run.ended_by_launcher);
  EXPECT_TRUE(WIFEXITED(run.wait_status) && WEXITSTATUS(run.wait_status) == 0);
  EXPECT_EQ(run.failed_ns, 0);
  xlaunch::files::remove_private_dir(status);
}

// The rank wrapper's lifeline (launch/lifeline.h).
TEST(Lifeline, TcpEndpointsOfAnOpenMpiUri) {
  EXPECT_EQ(tcp_endpoints("127270912.0;tcp://192.0.2.2,10.213.0.1:47929;tcp6://[fd00::2]:55737"),
            (std::vector<std::pair<std::string, int>>{{"192.0.2.2", 47929}, {"10.213.0.1", 47929}}));
  EXPECT_TRUE(tcp_endpoints("").empty());
  EXPECT_TRUE(tcp_endpoints("1.0;tcp://host-name:5;tcp://10.0.0.1:99999;tcp://10.0.0.1").empty());
}

TEST(Lifeline, LostAfterTheJobsOwnBoundAtLeastTenSeconds) {
  EXPECT_EQ(lost_after_s(10), 10);
  EXPECT_EQ(lost_after_s(3), 10);
  EXPECT_EQ(lost_after_s(600), 600);
  EXPECT_EQ(lost_after_s(0), 600);
}

TEST(Lifeline, SilenceCountsFromTheFirstUnansweredCheckAndARefusalIsLostAtOnce) {
  LauncherSilence s(10);
  EXPECT_FALSE(s.lost(100 * kS, Answer::kAccepted));
  EXPECT_FALSE(s.lost(102 * kS, Answer::kSilent));
  EXPECT_EQ(s.silent_since_ns(), 102 * kS);
  EXPECT_FALSE(s.lost(111 * kS, Answer::kSilent));
  EXPECT_TRUE(s.lost(112 * kS, Answer::kSilent));
  EXPECT_FALSE(s.lost(113 * kS, Answer::kAccepted));  // it answered again: the count restarts
  EXPECT_FALSE(s.lost(114 * kS, Answer::kSilent));
  EXPECT_TRUE(s.lost(115 * kS, Answer::kRefused));    // mpirun is gone
}

TEST(Lifeline, ChecksAListeningPortAndAClosedOne) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in sa{};
  sa.sin_family = AF_INET;
  sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  socklen_t len = sizeof sa;
  ASSERT_EQ(getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len), 0);
  const int port = ntohs(sa.sin_port);
  EXPECT_EQ(check_launcher({{"127.0.0.1", port}}, 2000), Answer::kAccepted);
  close(fd);  // nothing listens there any more: the machine refuses
  EXPECT_EQ(check_launcher({{"127.0.0.1", port}}, 2000), Answer::kRefused);
  EXPECT_EQ(check_launcher({}, 2000), Answer::kSilent);
}
