#include "launch/job_outcome.h"

#include <sys/wait.h>

#include <algorithm>
#include <csignal>
#include <cstring>

#include "xlaunch/preemption.h"
#include "xlaunch/status/flight_recorder.h"

namespace xlaunch::launcher {

using status::rank_list;

std::string describe(const RankStatus& s) {
  if (!s.signaled) return "exited with code " + std::to_string(s.code);
  const char* abbrev = sigabbrev_np(s.code);
  return "was killed by signal " + std::to_string(s.code) + (abbrev ? " (SIG" + std::string(abbrev) + ")" : "");
}

namespace {

// When the first failures (by time) are every rank of one machine, the job ran on several, and no
// rank elsewhere failed the same way:
// "machine sim1 (ranks 2, 3): every rank was killed by signal 9 (SIGKILL)", and how many of
// `failed` that covers; else {"", 0}.
std::pair<std::string, size_t> machine_lost(const std::vector<RankStatus>& failed, const std::vector<RankStatus>& ranks) {
  const std::string& host = failed.front().host;
  if (host.empty()) return {"", 0};
  std::vector<int> on_host;
  bool several_machines = false;
  for (const auto& r : ranks) {
    if (r.host == host) on_host.push_back(r.rank);
    else several_machines = true;
  }
  if (!several_machines || on_host.size() < 2 || failed.size() < on_host.size()) return {"", 0};
  for (size_t i = 0; i < on_host.size(); ++i)
    if (failed[i].host != host) return {"", 0};
  // Ranks elsewhere that ended the same way (a bug every rank hit, a test every rank failed): not
  // this machine's doing.
  for (size_t i = on_host.size(); i < failed.size(); ++i)
    for (size_t j = 0; j < on_host.size(); ++j)
      if (describe(failed[i]) == describe(failed[j])) return {"", 0};
  bool same_end = true;
  for (size_t i = 1; i < on_host.size(); ++i) same_end = same_end && describe(failed[i]) == describe(failed[0]);
  std::string how = same_end ? "every rank " + describe(failed[0]) : "";
  if (!same_end)
    for (size_t i = 0; i < on_host.size(); ++i)
      how += (i ? ", " : "") + std::string("rank ") + std::to_string(failed[i].rank) + " " + describe(failed[i]);
  return {"machine " + host + " (" + rank_list(on_host) + "): " + how, on_host.size()};
}

// Every rank reported; one at least exited kPreemptedExitCode, and the others too or were stopped
// by mpirun. (The ranks agree on the step and save together, so the first exit means every rank
// has saved: a rank mpirun stopped after that had finished its part.)
bool preempted(const std::vector<RankStatus>& ranks, int num_processes) {
  if (static_cast<int>(ranks.size()) < num_processes) return false;
  bool any = false;
  for (const auto& r : ranks) {
    const bool saved = !r.signaled && r.code == kPreemptedExitCode;
    if (!saved && !(r.signaled && r.code == SIGTERM)) return false;
    any = any || saved;
  }
  return any;
}

}  // namespace

JobOutcome summarize_job(int wait_status, const std::vector<RankStatus>& ranks, int num_processes,
                         const std::optional<status::Verdict>& verdict) {
  if (verdict) return {verdict->exit_code, verdict->rank, verdict->message};
  if (preempted(ranks, num_processes)) {
    JobOutcome o;
    o.exit_code = kPreemptedExitCode;
    o.preempted = true;
    o.message = "every rank saved its checkpoint and stopped (exit code " + std::to_string(kPreemptedExitCode) + ")";
    return o;
  }
  std::vector<RankStatus> failed;
  for (const auto& r : ranks)
    if (r.signaled || r.code != 0) failed.push_back(r);
  std::stable_sort(failed.begin(), failed.end(),
                   [](const RankStatus& a, const RankStatus& b) { return a.end_ns < b.end_ns; });
  const int mpirun_code = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
                          : WIFSIGNALED(wait_status) ? 128 + WTERMSIG(wait_status) : 1;
  JobOutcome o;
  // Ranks that left no status while every rank that did was stopped by mpirun (SIGTERM): they went
  // first, with their wrappers (a machine lost, or its Open MPI daemon).
  std::vector<int> silent;
  for (int r = 0, k = 0; r < num_processes; ++r) {
    while (k < static_cast<int>(ranks.size()) && ranks[k].rank < r) ++k;
    if (k == static_cast<int>(ranks.size()) || ranks[k].rank != r) silent.push_back(r);
  }
  const bool all_stopped = !failed.empty() && std::all_of(failed.begin(), failed.end(), [](const RankStatus& r) {
    return r.signaled && r.code == SIGTERM;
  });
  if (!silent.empty() && all_stopped && mpirun_code != 0) {
    o.exit_code = mpirun_code;
    o.rank = silent.front();
    o.message = rank_list(silent) + " ended without an exit status (their machine, or Open MPI's daemon there, "
                "is gone?; mpirun's message above says which)";
    for (size_t i = 0; i < failed.size(); ++i)
      o.message += (i == 0 ? "; after that, " : ", ") + std::string("rank ") + std::to_string(failed[i].rank) + " " +
                   describe(failed[i]);
    return o;
  }
  if (!failed.empty()) {
    const RankStatus& first = failed.front();
    o.exit_code = first.signaled ? 128 + first.code : first.code;
    o.rank = first.rank;
    const auto [machine, covered] = machine_lost(failed, ranks);
    const size_t next = machine.empty() ? 1 : covered;
    o.message = machine.empty() ? "rank " + std::to_string(first.rank) + " " + describe(first) : machine;
    for (size_t i = next; i < failed.size(); ++i)
      o.message += (i == next ? "; after that, " : ", ") + std::string("rank ") + std::to_string(failed[i].rank) +
                   " " + describe(failed[i]);
    return o;
  }
  if (mpirun_code == 0 && static_cast<int>(ranks.size()) >= num_processes) return o;
  o.exit_code = mpirun_code == 0 ? 1 : mpirun_code;
  o.message = "mpirun " + (WIFSIGNALED(wait_status) ? "was killed by signal " + std::to_string(WTERMSIG(wait_status))
                                                    : "exited with code " + std::to_string(mpirun_code)) +
              " and " + std::to_string(ranks.size()) + " of " + std::to_string(num_processes) +
              " ranks reported how they ended (the others did not start, or ran on machines whose status files are "
              "not visible here); see mpirun's message above";
  return o;
}

}  // namespace xlaunch::launcher
