#include "launch/supervise.h"

#include <dirent.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <csignal>
#include <ctime>
#include <fstream>
#include <set>
#include <sstream>

#include "launch/startup.h"
#include "xlaunch/status/rank_status.h"
#include "xlaunch/status/step_stats.h"
#include "xlaunch/status/verdict_file.h"
#include "xlaunch/status/flight_recorder.h"

namespace xlaunch::launcher {

using status::rank_list;

namespace {

constexpr int64_t kNsPerS = 1000000000;


std::string clock_time(int64_t ns) {
  const std::time_t t = static_cast<std::time_t>(ns / kNsPerS);
  std::tm tm{};
  localtime_r(&t, &tm);
  char buf[16];
  std::strftime(buf, sizeof buf, "%H:%M:%S", &tm);
  return buf;
}

// The end of the last step any of these ranks published (stats-<R>, step_stats.h); 0: none.
int64_t last_step_end_ns(const std::string& status_dir, const std::vector<int>& ranks) {
  int64_t last = 0;
  for (int r : ranks) {
    const auto s = status::read_stats_file(status_dir, r);
    if (!s || s->total.steps == 0) continue;
    last = std::max(last, static_cast<int64_t>(s->ring[(s->total.steps - 1) % profile::kRingSteps].end_ns));
  }
  return last;
}

}  // namespace

Teardown::Action Teardown::step(int64_t now_ns, bool failed) {
  if (failed && failed_ns_ == 0) failed_ns_ = now_ns;
  if (failed_ns_ == 0 || killed_) return Action::kWait;
  if (term_ns_ == 0) {
    if (now_ns - failed_ns_ < kMpirunGraceS * kNsPerS) return Action::kWait;
    term_ns_ = now_ns;
    return Action::kTerminate;
  }
  if (now_ns - term_ns_ < kMpirunTermS * kNsPerS) return Action::kWait;
  killed_ = true;
  return Action::kKill;
}

std::vector<std::string> parse_hostfile(const std::string& text) {
  std::vector<std::string> hosts;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    line = line.substr(0, line.find('#'));
    std::istringstream words(line);
    std::string host;
    if (words >> host && std::find(hosts.begin(), hosts.end(), host) == hosts.end()) hosts.push_back(host);
  }
  return hosts;
}

std::vector<std::string> rank_hosts(const config::LaunchConfig& c, const std::string& hostfile_text) {
  if (c.num_machines < 2 || !c.mpi.map_by.empty()) return {};
  const std::vector<std::string> machines = !c.mpi.hostfile.empty() ? parse_hostfile(hostfile_text) : c.mpi.hosts;
  const int per = config::processes_per_machine(c);
  if (machines.size() < static_cast<size_t>(c.num_machines) || per < 1) return {};
  std::vector<std::string> out;
  for (int r = 0; r < c.num_processes; ++r) out.push_back(machines[static_cast<size_t>(r / per)]);
  return out;
}

std::vector<std::string> rank_hosts(const config::LaunchConfig& c) {
  std::string text;
  if (!c.mpi.hostfile.empty()) {
    std::ifstream in(c.mpi.hostfile);
    std::stringstream s;
    s << in.rdbuf();
    text = s.str();
  }
  return rank_hosts(c, text);
}

std::vector<std::string> hosts_named(const std::vector<std::vector<std::string>>& cmdlines,
                                     const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) {
    if (std::find(out.begin(), out.end(), h) != out.end()) continue;
    for (const auto& argv : cmdlines)
      if (std::find(argv.begin(), argv.end(), h) != argv.end()) {
        out.push_back(h);
        break;
      }
  }
  return out;
}

namespace {

// Every living process of /proc with its parent: (pid, ppid).
std::vector<std::pair<pid_t, pid_t>> living_processes() {
  std::vector<std::pair<pid_t, pid_t>> out;
  DIR* proc = opendir("/proc");
  if (!proc) return out;
  while (const dirent* e = readdir(proc)) {
    const std::string pid = e->d_name;
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream stat("/proc/" + pid + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    pid_t ppid = 0;
    if (!(rest >> state >> ppid) || state == "Z") continue;
    out.emplace_back(static_cast<pid_t>(std::stol(pid)), ppid);
  }
  closedir(proc);
  return out;
}

}  // namespace

std::vector<std::vector<std::string>> child_cmdlines(pid_t parent) {
  std::vector<std::vector<std::string>> out;
  for (const auto& [pid, ppid] : living_processes()) {
    if (ppid != parent) continue;
    std::ifstream cmd("/proc/" + std::to_string(pid) + "/cmdline");
    std::vector<std::string> argv;
    for (std::string word; std::getline(cmd, word, '\0');) argv.push_back(word);
    out.push_back(argv);
  }
  return out;
}

std::vector<pid_t> descendants(pid_t root) {
  const auto procs = living_processes();
  std::vector<pid_t> out;
  std::vector<pid_t> frontier{root};
  while (!frontier.empty()) {
    const pid_t parent = frontier.back();
    frontier.pop_back();
    for (const auto& [pid, ppid] : procs)
      if (ppid == parent && std::find(out.begin(), out.end(), pid) == out.end()) {
        out.push_back(pid);
        frontier.push_back(pid);
      }
  }
  return out;
}

std::vector<pid_t> children(pid_t parent) {
  std::vector<pid_t> out;
  for (const auto& [pid, ppid] : living_processes())
    if (ppid == parent) out.push_back(pid);
  return out;
}

std::vector<pid_t> rank_wrappers_under(pid_t root) {
  std::vector<pid_t> out;
  for (const pid_t p : descendants(root)) {
    std::ifstream cmd("/proc/" + std::to_string(p) + "/cmdline");
    std::string exe, sub;
    if (std::getline(cmd, exe, '\0') && std::getline(cmd, sub, '\0') && sub == "__rank") out.push_back(p);
  }
  return out;
}

std::vector<std::string> machines_of(const std::vector<std::string>& rank_hosts) {
  std::vector<std::string> machines;
  for (const auto& h : rank_hosts)
    if (std::find(machines.begin(), machines.end(), h) == machines.end()) machines.push_back(h);
  return machines;
}

std::vector<Unreachable> unreachable_machines(const std::vector<std::string>& rank_hosts,
                                              const std::vector<RankStatus>& statuses,
                                              const std::vector<std::string>& daemon_hosts, bool statuses_shared) {
  const std::vector<std::string> machines = machines_of(rank_hosts);
  std::set<std::string> reported;
  for (const auto& s : statuses)
    if (s.rank >= 0 && static_cast<size_t>(s.rank) < rank_hosts.size()) reported.insert(rank_hosts[s.rank]);
  std::vector<Unreachable> out;
  for (const auto& m : machines) {
    const bool daemon_silent = std::find(daemon_hosts.begin(), daemon_hosts.end(), m) != daemon_hosts.end();
    // A machine none of whose ranks reported, while others did, through a directory every machine
    // sees (a shared log_dir): this one went away.
    const bool ranks_silent = statuses_shared && reported.count(m) == 0;
    if (!daemon_silent && !ranks_silent) continue;
    Unreachable u;
    u.host = m;
    for (size_t r = 0; r < rank_hosts.size(); ++r)
      if (rank_hosts[r] == m) u.ranks.push_back(static_cast<int>(r));
    out.push_back(u);
  }
  return out;
}

std::string unreachable_text(const std::vector<Unreachable>& machines, int64_t fallback_ns) {
  std::string s;
  for (const auto& m : machines)
    s += (s.empty() ? "" : "; ") + std::string("machine ") + m.host + " (" + rank_list(m.ranks) +
         ") unreachable since " + clock_time(m.since_ns ? m.since_ns : fallback_ns) +
         ": its link or the machine is down; its processes may still run there";
  return s;
}

namespace {

// "machine sim1 (rank 1): its Open MPI daemon never called back; the agent that started it exited
// with code 0 and said: "..."" for each machine among `missing`'s whose agent (agent.h) failed or
// spoke before the launcher began to end the job (teardown_ns; 0: it did not); "" when none did.
std::string agent_suspects(const std::vector<int>& missing, const JobWatch& watch, int64_t teardown_ns,
                           std::vector<int>* blamed) {
  std::string out;
  for (const auto& a : status::read_agent_reports(watch.status_dir)) {
    std::string said = a.said;
    while (!said.empty() && std::isspace(static_cast<unsigned char>(said.back()))) said.pop_back();
    if (a.code == 0 && said.empty()) continue;
    if (teardown_ns && a.end_ns >= teardown_ns) continue;  // ended by the launcher's own teardown
    std::vector<int> ranks;
    for (int r : missing)
      if (static_cast<size_t>(r) < watch.rank_hosts.size() && watch.rank_hosts[static_cast<size_t>(r)] == a.host)
        ranks.push_back(r);
    if (ranks.empty()) continue;
    for (char& c : said)
      if (c == '\n') c = ' ';  // one line
    out += (out.empty() ? "" : "; ") + never_started_text(ranks, watch.rank_hosts) +
           ": its Open MPI daemon never called back; the agent that started it (ssh, or plm_rsh_agent) exited with "
           "code " + std::to_string(a.code) + (said.empty() ? "" : " and said: \"" + said + "\"");
    blamed->insert(blamed->end(), ranks.begin(), ranks.end());
  }
  return out;
}

}  // namespace

std::string never_started_message(const JobRun& run, const JobWatch& watch, int* first_rank) {
  std::vector<int> missing;
  for (int r = 0; r < watch.num_processes; ++r)
    if (!std::binary_search(run.started.begin(), run.started.end(), r)) missing.push_back(r);
  if (missing.empty()) return "";
  // A rank seen proves every daemon called back (Open MPI starts no rank before): no agent to blame.
  if (!run.started.empty() && !run.startup_expired) return "";
  std::vector<int> blamed;
  std::string why = agent_suspects(missing, watch, run.failed_ns, &blamed);
  if (!why.empty()) {
    std::vector<int> others;
    for (int r : missing)
      if (std::find(blamed.begin(), blamed.end(), r) == blamed.end()) others.push_back(r);
    if (!others.empty())
      why += "; " + never_started_text(others, watch.rank_hosts) +
             " did not start either: mpirun starts no rank before every daemon has called back";
  } else if (run.startup_expired) {
    why = never_started_text(missing, watch.rank_hosts) +
          " never started: Open MPI's daemon there did not call back (a wrong path or no orted on that machine, a "
          "full disk, a firewall; mpirun's and its ssh's messages above may say which), or the ranks could not reach "
          "this machine to say they started (then set a shared log_dir, or startup_timeout_s: 0)";
  } else {
    return "";  // a job that failed later: a missing sign of life alone proves nothing (hellos may be blocked)
  }
  if (first_rank) *first_rank = blamed.empty() ? -1 : *std::min_element(blamed.begin(), blamed.end());
  if (!run.startup_expired) return why;
  return "the job did not start within its start-up deadline of " + std::to_string(watch.startup_deadline_s) +
         " s (startup_timeout_s, at most timeout_s x 6): " + why;
}

JobOutcome job_outcome(const JobRun& run, const JobWatch& watch) {
  const auto statuses = status::read_rank_statuses(watch.status_dir);
  const auto verdict = status::read_verdict(watch.status_dir);
  JobOutcome o = summarize_job(run.wait_status, statuses, watch.num_processes, verdict);
  int first_unstarted = -1;
  const std::string unstarted = o.exit_code == 0 ? "" : never_started_message(run, watch, &first_unstarted);
  if (run.startup_expired && !unstarted.empty()) {
    o.exit_code = 124;
    o.message = unstarted;
    o.rank = first_unstarted;
    return o;
  }
  // First when no rank said how it ended (mpirun gave up on a machine before its ranks started), else
  // after what the ranks said.
  if (!unstarted.empty()) o.message = statuses.empty() ? unstarted + "; " + o.message : o.message + "; " + unstarted;
  if (o.exit_code == 0 || watch.rank_hosts.empty()) return o;
  // Statuses written on another machine than this one: the status directory is shared, so a
  // machine whose ranks left none went away (without a shared log_dir only this machine's report).
  char here[256] = {0};
  gethostname(here, sizeof here - 1);
  const bool shared = std::any_of(statuses.begin(), statuses.end(),
                                  [&](const RankStatus& s) { return !s.host.empty() && s.host != here; });
  std::vector<Unreachable> lost = unreachable_machines(watch.rank_hosts, statuses, run.daemon_hosts, shared);
  if (lost.empty()) return o;
  for (auto& m : lost) m.since_ns = last_step_end_ns(watch.status_dir, m.ranks);
  const int64_t noticed = run.failed_ns ? run.failed_ns : status::realtime_ns();
  const std::string text = unreachable_text(lost, noticed);
  bool explained = static_cast<bool>(verdict);
  for (const auto& s : statuses) explained = explained || ((s.signaled && s.code != SIGTERM) || (!s.signaled && s.code));
  o.message = explained ? o.message + "; " + text : text + "; " + o.message;
  if (!explained) o.rank = lost.front().ranks.front();
  return o;
}

}  // namespace xlaunch::launcher
