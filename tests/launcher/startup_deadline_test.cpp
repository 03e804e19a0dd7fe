// The start-up deadline (launch/startup.h) and the daemons' agent wrapper (launch/agent.h): the
// deadline's bound and clock, the hello a rank's wrapper sends and the launcher's listener taking it
// over a real socket, the started-<R> and agent-<host> files, the outcome's message naming the
// machine whose agent failed, and run_plan ending an mpirun stand-in whose ranks never start. The
// same on simulated machines with a real Open MPI: tests/cluster/startup_test.sh.
#include "launch/startup.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <string>
#include <thread>

#include "launch/agent.h"
#include "launch/job.h"
#include "launch/launch_plan.h"
#include "launch/supervise.h"
#include "scratch_dir.h"
#include "xlaunch/status/private_files.h"
#include "xlaunch/status/rank_status.h"

using namespace xlaunch::launcher;

namespace {

constexpr int64_t kS = 1000000000;

// A private status directory in a scratch folder, removed with it.
struct StatusDir {
  xlaunch::test::ScratchDir scratch;
  std::string path;
  StatusDir() {
    std::string why;
    path = xlaunch::files::make_private_dir(scratch.path, "xlaunch-status-RUN-0-", &why);
    EXPECT_FALSE(path.empty()) << why;
  }
  ~StatusDir() { xlaunch::files::remove_private_dir(path); }
};

}  // namespace

TEST(StartupDeadline, TheSettingAtMostSixTimeoutsAndZeroForNone) {
  EXPECT_EQ(startup_deadline_s(120, 600), 120);
  EXPECT_EQ(startup_deadline_s(120, 10), 60);
  EXPECT_EQ(startup_deadline_s(120, 0), 120);  // no watchdog: the setting alone
  EXPECT_EQ(startup_deadline_s(0, 10), 0);
}

TEST(StartupDeadline, ExpiresOnceAtTheDeadlineWhileNoRankIsSeen) {
  StartupDeadline d(15, 3, 100 * kS);
  d.seen(7);  // not a rank of the job
  EXPECT_FALSE(d.expired(114 * kS));
  EXPECT_TRUE(d.expired(115 * kS));
  EXPECT_FALSE(d.expired(116 * kS));  // said once
  EXPECT_EQ(d.missing(), (std::vector<int>{0, 1, 2}));
  // One rank seen: every daemon has called back (Open MPI starts no rank before), so a rank whose
  // sign of life was lost on its way does not end the job.
  StartupDeadline one(15, 3, 100 * kS);
  one.seen(2);
  EXPECT_FALSE(one.all_seen());
  EXPECT_FALSE(one.expired(200 * kS));
  EXPECT_EQ(one.missing(), (std::vector<int>{0, 1}));
  StartupDeadline none(0, 2, 100 * kS);
  EXPECT_FALSE(none.expired(100000 * kS));
}

TEST(StartupDeadline, NeverStartedByMachineWhenThePlacementIsKnown) {
  const std::vector<std::string> hosts{"sim0", "sim0", "sim1", "sim1"};
  EXPECT_EQ(never_started_text({2, 3}, hosts), "machine sim1 (ranks 2, 3)");
  EXPECT_EQ(never_started_text({0, 2, 3}, hosts), "machine sim0 (rank 0), machine sim1 (ranks 2, 3)");
  EXPECT_EQ(never_started_text({1, 2}, {}), "ranks 1, 2");
}

TEST(Hello, TheLineOfOneAttemptAndNothingElse) {
  EXPECT_EQ(hello_tag("/tmp/logs/xlaunch-status-R-0-abc123/"), "xlaunch-status-R-0-abc123");
  const std::string tag = "xlaunch-status-R-0-abc123";
  EXPECT_EQ(hello_line(tag, 3, "sim1"), "xlaunch-hello xlaunch-status-R-0-abc123 3 sim1\n");
  EXPECT_EQ(parse_hello("xlaunch-hello xlaunch-status-R-0-abc123 3 sim1", tag), 3);
  EXPECT_EQ(parse_hello("xlaunch-hello xlaunch-status-R-1-zzz 3 sim1", tag), std::nullopt);  // another attempt
  EXPECT_EQ(parse_hello("xlaunch-hello xlaunch-status-R-0-abc123 -3 sim1", tag), std::nullopt);
  EXPECT_EQ(parse_hello("GET / HTTP/1.1", tag), std::nullopt);
  EXPECT_EQ(parse_hello("xlaunch-hello  1 h", ""), std::nullopt);
}

TEST(Hello, TheListenerTakesHellosOverTcpAndDropsStrangers) {
  HelloListener listener;
  ASSERT_GT(listener.port(), 0);
  const std::vector<std::pair<std::string, int>> here{{"127.0.0.1", 1}};  // the port is the hello's
  const std::string tag = "xlaunch-status-R-0-abc123";
  EXPECT_TRUE(send_hello(here, listener.port(), hello_line(tag, 1, "a"), kHelloTimeoutMs));
  EXPECT_TRUE(send_hello(here, listener.port(), hello_line("other", 2, "a"), kHelloTimeoutMs));
  EXPECT_TRUE(send_hello(here, listener.port(), "garbage without an end", kHelloTimeoutMs));
  EXPECT_TRUE(send_hello(here, listener.port(), hello_line(tag, 0, "b"), kHelloTimeoutMs));
  std::set<int> ranks;
  for (int i = 0; i < 200 && ranks.size() < 2; ++i) {  // bounded: 2 s for the kernel to deliver
    listener.poll(tag, &ranks);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1}));
  // Nobody listening: refused at once, and the sender says it failed.
  int closed_port = listener.port();
  { HelloListener gone; closed_port = gone.port(); }
  EXPECT_FALSE(send_hello(here, closed_port, hello_line(tag, 0, "b"), kHelloTimeoutMs));
}

TEST(AgentWrapper, TheHostAfterTheOptionsAndTheWrappedAgent) {
  EXPECT_EQ(agent_host({"-x", "-o", "BatchMode=yes", "sim1", "orted", "-mca", "x"}), "sim1");
  EXPECT_EQ(agent_host({"-l", "user", "node7", "orted"}), "node7");
  EXPECT_EQ(agent_host({"-x"}), "");
  EXPECT_EQ(wrapped_agent("/opt/xlaunch", "ssh -x"), "/opt/xlaunch __agent 2 ssh -x");
  EXPECT_EQ(wrapped_agent("/opt/xlaunch", "/usr/bin/ssh"), "/opt/xlaunch __agent 2 /usr/bin/ssh -x");  // as Open MPI does
  EXPECT_EQ(wrapped_agent("/opt/xlaunch", "/opt/sim/rsh_agent.sh"), "/opt/xlaunch __agent 1 /opt/sim/rsh_agent.sh");
  EXPECT_EQ(wrapped_agent("/opt/xlaunch", "qrsh -inherit"), "");  // a batch system's: Open MPI's to treat
  EXPECT_EQ(wrapped_agent("/opt/xlaunch", "ssh : rsh"), "");  // a list: Open MPI's to choose from
  EXPECT_EQ(wrapped_agent("/opt/my apps/xlaunch", "ssh"), "");
  EXPECT_EQ(wrapped_agent("/opt/xlaunch", ""), "");
}

TEST(AgentWrapper, RecordsTheEndOfWhatItSaidAndHowItEnded) {
  const StatusDir d;
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += "line " + std::to_string(i) + " of what ssh said\n";
  std::string why;
  ASSERT_TRUE(xlaunch::status::write_agent_report(d.path, {"sim1", 255, 5, long_text}, &why)) << why;
  ASSERT_TRUE(xlaunch::status::write_agent_report(d.path, {"user@sim0", 0, 6, ""}, &why)) << why;
  const auto reports = xlaunch::status::read_agent_reports(d.path);
  ASSERT_EQ(reports.size(), 2u);
  EXPECT_EQ(reports[0].host, "sim1");
  EXPECT_EQ(reports[0].code, 255);
  EXPECT_LE(reports[0].said.size(), xlaunch::status::kAgentSaidBytes);
  EXPECT_EQ(reports[0].said.substr(0, 5), "line ");  // whole lines
  EXPECT_NE(reports[0].said.find("line 99 of what ssh said\n"), std::string::npos);
  EXPECT_EQ(reports[1].host, "user@sim0");
}

TEST(AgentWrapper, RunsTheAgentPassesItsCodeOnAndRecordsIt) {
  const StatusDir d;
  const std::string self = XLAUNCH_EXE;
  setenv("XLAUNCH_STATUS_DIR", d.path.c_str(), 1);
  const std::string cmd = self + " __agent 3 sh -c 'echo \"cannot reach $0\" >&2; exit 7' sim5 2>/dev/null";
  const int status = std::system(cmd.c_str());
  unsetenv("XLAUNCH_STATUS_DIR");
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 7);
  const auto reports = xlaunch::status::read_agent_reports(d.path);
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].host, "sim5");
  EXPECT_EQ(reports[0].code, 7);
  EXPECT_EQ(reports[0].said, "cannot reach sim5\n");
}

TEST(StartupOutcome, TheMachineWhoseAgentSpokeIsTheCause) {
  const StatusDir d;
  std::string why;
  ASSERT_TRUE(xlaunch::status::write_agent_report(d.path, {"sim0", 0, 1, ""}, &why));
  ASSERT_TRUE(xlaunch::status::write_agent_report(d.path, {"sim1", 0, 1, "orted: dying\n"}, &why));
  JobWatch watch{d.path, 4, {"sim0", "sim0", "sim1", "sim1"}, 15};
  JobRun run;
  run.wait_status = 15;  // killed by SIGTERM
  run.startup_expired = true;
  const JobOutcome o = job_outcome(run, watch);
  EXPECT_EQ(o.exit_code, 124);
  EXPECT_EQ(o.rank, 2);
  EXPECT_EQ(o.message,
            "the job did not start within its start-up deadline of 15 s (startup_timeout_s, at most timeout_s x 6): "
            "machine sim1 (ranks 2, 3): its Open MPI daemon never called back; the agent that started it (ssh, or "
            "plm_rsh_agent) exited with code 0 and said: \"orted: dying\"; machine sim0 (ranks 0, 1) did not start "
            "either: mpirun starts no rank before every daemon has called back");
  // An agent that ended once the launcher was ending the job (its own SIGTERM: ssh exits 255) is
  // not a cause.
  run.failed_ns = 1;  // the teardown began at the same time as both agents ended
  const JobOutcome t = job_outcome(run, watch);
  EXPECT_EQ(t.rank, -1);
  EXPECT_EQ(t.message.find("called back; the agent"), std::string::npos) << t.message;
  run.failed_ns = 0;
  // No agent spoke: every machine whose ranks did not start, and what to check; no rank at fault.
  const StatusDir quiet;
  run.started = {0, 1};
  const JobOutcome q = job_outcome(run, {quiet.path, 4, {"sim0", "sim0", "sim1", "sim1"}, 15});
  EXPECT_EQ(q.exit_code, 124);
  EXPECT_EQ(q.rank, -1);
  EXPECT_NE(q.message.find("15 s (startup_timeout_s, at most timeout_s x 6): machine sim1 (ranks 2, 3) never started: "),
            std::string::npos)
      << q.message;
  // A job that failed later, its ranks' hellos lost: nothing is claimed about starting, even where
  // an agent spoke (a rank started, so every daemon called back).
  run.startup_expired = false;
  EXPECT_EQ(never_started_message(run, {quiet.path, 4, {"sim0", "sim0", "sim1", "sim1"}, 15}), "");
  EXPECT_EQ(never_started_message(run, watch), "");
}

TEST(StartupOutcome, RunPlanEndsAJobWhoseRanksNeverStartAtTheDeadline) {
  const StatusDir d;
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c", "exec sleep 600"};  // mpirun waiting for a daemon for ever
  HelloListener hello;
  JobWatch watch{d.path, 2, {"sim0", "sim1"}, 1, &hello};
  const auto start = std::chrono::steady_clock::now();
  const JobRun run = run_plan(plan, watch);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_TRUE(run.startup_expired);
  EXPECT_TRUE(run.ended_by_launcher);
  EXPECT_TRUE(run.started.empty());
  EXPECT_LT(took, 1 + kMpirunGraceS + kMpirunTermS + 30) << "run_plan waited " << took << " s";
  const JobOutcome o = job_outcome(run, watch);
  EXPECT_EQ(o.exit_code, 124);
  EXPECT_EQ(o.rank, -1);
  EXPECT_NE(o.message.find("deadline of 1 s (startup_timeout_s, at most timeout_s x 6): machine sim0 (rank 0), "
                           "machine sim1 (rank 1) never started"),
            std::string::npos)
      << o.message;
}

TEST(StartupOutcome, OneRankSeenEndsTheDeadline) {
  const StatusDir d;
  LaunchPlan plan;
  plan.argv = {"/bin/sh", "-c", "exec sleep 3"};  // a job whose rank 1's sign of life never comes
  JobWatch watch{d.path, 2, {"sim0", "sim1"}, 1};
  std::string why;
  ASSERT_TRUE(xlaunch::status::write_rank_start(d.path, {0, 1, "sim0"}, &why)) << why;
  const JobRun run = run_plan(plan, watch);
  EXPECT_FALSE(run.startup_expired);
  EXPECT_FALSE(run.ended_by_launcher);
  EXPECT_EQ(run.started, (std::vector<int>{0}));
  EXPECT_TRUE(WIFEXITED(run.wait_status) && WEXITSTATUS(run.wait_status) == 0);
}

// The wrapper's hello, end to end: `xlaunch __rank --hello P` on a machine that does not see the
// status directory tells the launcher's listener, at the address Open MPI gives its ranks.
TEST(Hello, TheRankWrapperSaysHelloAtMpirunsAddress) {
  HelloListener listener;
  ASSERT_GT(listener.port(), 0);
  const std::string tag = "xlaunch-status-R-0-abc123";
  const std::string cmd = std::string("env OMPI_MCA_orte_hnp_uri='1.0;tcp://127.0.0.1:1' OMPI_COMM_WORLD_RANK=3 "
                                      "OMPI_COMM_WORLD_SIZE=4 OMPI_COMM_WORLD_LOCAL_RANK=1 "
                                      "OMPI_COMM_WORLD_LOCAL_SIZE=2 ") +
                          XLAUNCH_EXE + " __rank --status_dir /nonexistent/" + tag + " --hello " +
                          std::to_string(listener.port()) + " -- /bin/sleep 3";  // time enough for its hello thread on a loaded machine
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::set<int> ranks;
  for (int i = 0; i < 300 && ranks.empty(); ++i) {  // bounded: 3 s
    listener.poll(tag, &ranks);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(ranks, (std::set<int>{3}));
}
