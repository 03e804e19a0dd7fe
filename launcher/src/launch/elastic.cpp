#include "launch/elastic.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "launch/launch_error.h"

namespace xlaunch::launcher {

std::vector<std::string> listed_machines(const config::LaunchConfig& c) {
  if (!c.mpi.hosts.empty()) return c.mpi.hosts;
  std::ifstream in(c.mpi.hostfile);
  if (!in) throw LaunchError("cannot read hostfile " + c.mpi.hostfile + ": " + std::strerror(errno) +
                             "; fix mpi.hostfile or --hostfile");
  std::ostringstream text;
  text << in.rdbuf();
  std::vector<std::string> hosts = parse_hostfile(text.str());
  if (hosts.empty())
    throw LaunchError("hostfile " + c.mpi.hostfile + " lists no machine; write one 'host slots=N' line per machine");
  return hosts;
}

std::vector<std::string> rsh_agent_argv(const std::vector<std::string>& extra_args, const std::string& env_agent) {
  std::string agent = env_agent;
  for (size_t i = 0; i + 2 < extra_args.size(); ++i)
    if ((extra_args[i] == "--mca" || extra_args[i] == "-mca") && extra_args[i + 1] == "plm_rsh_agent")
      agent = extra_args[i + 2];
  agent = agent.substr(0, agent.find(':'));  // "ssh : rsh": Open MPI takes the first it finds
  std::vector<std::string> argv;
  std::istringstream words(agent);
  for (std::string w; words >> w;) argv.push_back(w);
  if (argv.empty()) argv.push_back("ssh");
  const std::string prog = argv[0].substr(argv[0].rfind('/') + 1);
  if (prog == "ssh") argv.insert(argv.begin() + 1, {"-o", "BatchMode=yes"});
  return argv;
}

namespace {

bool is_this_machine(const std::string& host) {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  const std::string self = name;
  return host == "localhost" || host == "127.0.0.1" || host == self || host == self.substr(0, self.find('.'));
}

struct Probe {
  pid_t pid = -1;
  int out = -1;  // read end of its stdout + stderr
  std::string text;
  bool done = false;
  int status = 0;
};

// fork + exec `agent host true` in a new process group; its output into a pipe.
Probe start_probe(const std::vector<std::string>& agent, const std::string& host) {
  std::vector<std::string> argv = agent;
  argv.insert(argv.end(), {host, "true"});
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) throw LaunchError(std::string("pipe: ") + std::strerror(errno));
  const pid_t pid = fork();
  if (pid < 0) throw LaunchError(std::string("fork: ") + std::strerror(errno));
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // no probe outlives an interrupted xlaunch
    const int devnull = open("/dev/null", O_RDONLY);
    dup2(devnull, 0);
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    execvp(args[0], args.data());
    std::fprintf(stderr, "cannot run %s: %s\n", args[0], std::strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid);  // also here: no race with the kill below
  close(fds[1]);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  Probe p;
  p.pid = pid;
  p.out = fds[0];
  return p;
}

std::string last_line(std::string text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
  const size_t nl = text.rfind('\n');
  return nl == std::string::npos ? text : text.substr(nl + 1);
}

std::string why_not(const Probe& p, const std::vector<std::string>& agent) {
  const std::string line = last_line(p.text);
  const std::string said = line.empty() ? "" : ": " + line;
  if (WIFSIGNALED(p.status)) return "`" + agent[0] + " HOST true` was killed by signal " + std::to_string(WTERMSIG(p.status)) + said;
  return "`" + agent[0] + " HOST true` exited with code " + std::to_string(WEXITSTATUS(p.status)) + said;
}

}  // namespace

std::vector<HostAnswer> probe_hosts(const std::vector<std::string>& agent, const std::vector<std::string>& hosts,
                                    double timeout_s) {
  std::vector<HostAnswer> answers(hosts.size());
  std::vector<Probe> probes(hosts.size());
  for (size_t i = 0; i < hosts.size(); ++i) {
    answers[i].host = hosts[i];
    if (is_this_machine(hosts[i])) {
      answers[i].answered = true;
      probes[i].done = true;
      continue;
    }
    probes[i] = start_probe(agent, hosts[i]);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  auto running = [&] { return std::any_of(probes.begin(), probes.end(), [](const Probe& p) { return !p.done; }); };
  while (running() && std::chrono::steady_clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (const Probe& p : probes)
      if (p.out >= 0) fds.push_back({p.out, POLLIN, 0});
    poll(fds.data(), fds.size(), 50);
    for (Probe& p : probes) {
      if (p.done) continue;
      char buf[4096];
      ssize_t n = 0;
      while (p.out >= 0 && (n = read(p.out, buf, sizeof buf)) > 0) p.text.append(buf, static_cast<size_t>(n));
      if (p.out >= 0 && n == 0) {  // end of its output: stop polling it (it stays readable)
        close(p.out);
        p.out = -1;
      }
      if (waitpid(p.pid, &p.status, WNOHANG) == p.pid) p.done = true;
    }
  }
  for (size_t i = 0; i < probes.size(); ++i) {
    Probe& p = probes[i];
    if (p.out >= 0) close(p.out);
    if (p.pid < 0) continue;
    if (!p.done) {
      kill(-p.pid, SIGKILL);
      waitpid(p.pid, &p.status, 0);
      answers[i].why = "did not answer `" + agent[0] + " HOST true` within " + std::to_string(static_cast<int>(timeout_s)) + " s";
    } else if (WIFEXITED(p.status) && WEXITSTATUS(p.status) == 0) {
      answers[i].answered = true;
    } else {
      answers[i].why = why_not(p, agent);
    }
  }
  return answers;
}

AttemptMachines choose_machines(const std::vector<std::string>& listed, const std::vector<HostAnswer>& answers,
                                const std::map<std::string, int>& failures, int max_failures, int max_machines) {
  AttemptMachines m;
  for (const std::string& host : listed) {
    const auto f = failures.find(host);
    const int failed = f == failures.end() ? 0 : f->second;
    if (failed >= max_failures) {
      m.notes.push_back("machine " + host + " kept out: its ranks were at fault in " + std::to_string(failed) +
                        " failed attempt" + (failed == 1 ? "" : "s") + " (max_machine_failures " +
                        std::to_string(max_failures) + ")");
      continue;
    }
    const auto a = std::find_if(answers.begin(), answers.end(), [&](const HostAnswer& x) { return x.host == host; });
    if (a == answers.end() || !a->answered) {
      m.notes.push_back("machine " + host + " left out: " + (a == answers.end() ? "not asked" : a->why));
      continue;
    }
    if (static_cast<int>(m.hosts.size()) == max_machines) {
      m.notes.push_back("machine " + host + " stands by: the job already has num_machines' MAX (" +
                        std::to_string(max_machines) + ")");
      continue;
    }
    m.hosts.push_back(host);
  }
  return m;
}

config::LaunchConfig attempt_config(const config::LaunchConfig& c, const std::vector<std::string>& hosts) {
  config::LaunchConfig a = c;
  const int per_machine = config::processes_per_machine(c);
  a.mpi.hostfile.clear();
  a.mpi.hosts = hosts;
  a.num_machines = static_cast<int>(hosts.size());
  a.min_machines = 0;
  a.num_processes = a.num_machines * per_machine;
  return a;
}

std::string machine_of_rank(const std::vector<std::string>& hosts, int per_machine, int rank) {
  if (rank < 0 || per_machine < 1 || rank / per_machine >= static_cast<int>(hosts.size())) return "";
  return hosts[static_cast<size_t>(rank / per_machine)];
}

std::string join_hosts(const std::vector<std::string>& hosts) {
  std::string s;
  for (const auto& h : hosts) s += (s.empty() ? "" : ", ") + h;
  return s;
}

std::vector<std::string> first_machines(const config::LaunchConfig& c) {
  std::vector<std::string> hosts = listed_machines(c);
  if (static_cast<int>(hosts.size()) > c.num_machines) hosts.resize(static_cast<size_t>(c.num_machines));
  return hosts;
}

ElasticMachines::ElasticMachines(const config::LaunchConfig& c) : c_(c), listed_(listed_machines(c)) {
  const char* agent = std::getenv("OMPI_MCA_plm_rsh_agent");
  agent_ = rsh_agent_argv(c.mpi.extra_args, agent ? agent : "");
}

std::vector<std::string> ElasticMachines::choose(int attempt) {
  std::vector<std::string> ask;
  for (const auto& h : listed_)
    if (failures_[h] < c_.max_machine_failures) ask.push_back(h);
  const AttemptMachines m = choose_machines(listed_, probe_hosts(agent_, ask, kHostProbeTimeoutS), failures_,
                                            c_.max_machine_failures, c_.num_machines);
  for (const auto& n : m.notes) std::fprintf(stderr, "xlaunch: %s\n", n.c_str());
  if (static_cast<int>(m.hosts.size()) < c_.min_machines) {
    std::fprintf(stderr,
                 "xlaunch: only %zu machine%s can take part (%s), fewer than the %d that num_machines %s needs; "
                 "ending the job (bring machines back or lower MIN)\n",
                 m.hosts.size(), m.hosts.size() == 1 ? "" : "s", m.hosts.empty() ? "none" : join_hosts(m.hosts).c_str(),
                 c_.min_machines, config::machines_string(c_).c_str());
    return {};
  }
  const int world = static_cast<int>(m.hosts.size()) * config::processes_per_machine(c_);
  std::fprintf(stderr, "xlaunch: attempt %d on %zu of num_machines %s: %s; world size %d\n", attempt + 1,
               m.hosts.size(), config::machines_string(c_).c_str(), join_hosts(m.hosts).c_str(), world);
  return m.hosts;
}

void ElasticMachines::blame(const std::vector<std::string>& hosts, int rank) {
  const std::string host = machine_of_rank(hosts, config::processes_per_machine(c_), rank);
  if (host.empty()) return;
  const int n = ++failures_[host];
  std::fprintf(stderr, "xlaunch: machine %s (rank %d) was at fault in %d failed attempt%s (max_machine_failures %d)\n",
               host.c_str(), rank, n, n == 1 ? "" : "s", c_.max_machine_failures);
}

}  // namespace xlaunch::launcher
