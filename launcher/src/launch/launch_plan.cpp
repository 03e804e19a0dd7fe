#include "launch/launch_plan.h"

#include <algorithm>
#include <map>
#include <sstream>
#include <stdexcept>

#include "xlaunch/config/setting.h"
#include "xlaunch/env_vars.h"

namespace xlaunch::launcher {

using config::LaunchConfig;

namespace {

// The per-launch variables: what `xlaunch run` decides for each attempt, not a setting.
std::string per_launch_value(const env::Var& v, const Environment& e) {
  if (&v == &env::kResume) return e.resume;
  if (&v == &env::kRunId) return e.run_id;
  if (&v == &env::kRestartCount) return std::to_string(e.restart_count);
  if (&v == &env::kStatusDir) return e.status_dir;
  if (&v == &env::kConfigFile) return e.config_file;
  throw std::logic_error(std::string("launch plan: no value for ") + v.name +
                         " (declared in env_vars.h, neither a setting nor per launch)");
}

// A setting's variable carries its value as the table's row spells it, but for two whose variable
// says more than the key: XLAUNCH_USE_CPU is 1 for MULTI_CPU too, and the loader's "auto" is
// kAutoWorkers in the config.
std::string setting_value(const config::Setting& s, const LaunchConfig& c) {
  if (s.var == &env::kUseCpu) return config::runs_on_cpu(c) ? "1" : "0";
  if (s.var == &env::kNumWorkers && c.loader.num_workers == config::LoaderSection::kAutoWorkers) return "auto";
  return s.text(c);
}

bool needs_quotes(const std::string& w) {
  if (w.empty()) return true;
  for (char ch : w)
    if (!(isalnum(static_cast<unsigned char>(ch)) || std::string("-_./=:,+@%").find(ch) != std::string::npos))
      return true;
  return false;
}

}  // namespace

std::string attempt_resume(const std::string& resume_option, const std::string& project_dir, int attempt) {
  if (attempt == 0) return resume_option;
  if (!project_dir.empty()) return kResumeLatest;
  return resume_option;
}

EnvList exported_env(const LaunchConfig& c, const Environment& e) {
  std::map<const env::Var*, std::string> settings;
  for (const config::Setting& s : config::settings_table())
    if (s.var) settings[s.var] = setting_value(s, c);
  EnvList out;
  for (const env::Var* v : env::kAll) {
    const auto it = settings.find(v);
    out.emplace_back(v->name, it != settings.end() ? it->second : per_launch_value(*v, e));
  }
  return out;
}

std::string wrapped_agent(const std::string& self_exe, const std::string& agent) {
  std::istringstream in(agent);
  std::vector<std::string> words;
  for (std::string w; in >> w;) words.push_back(w);
  if (words.empty() || agent.find(':') != std::string::npos || self_exe.find_first_of(" \t") != std::string::npos)
    return "";
  // Open MPI treats some agents by their name: the batch systems' (qrsh, llspawn) are left to it;
  // ssh gets -x (no X11 forwarding), as Open MPI gives it.
  const std::string name = words[0].substr(words[0].rfind('/') + 1);
  if (name == "qrsh" || name == "llspawn") return "";
  if (name == "ssh" && std::find(words.begin(), words.end(), "-x") == words.end()) words.insert(words.begin() + 1, "-x");
  std::string out = self_exe + " __agent " + std::to_string(words.size());
  for (const auto& w : words) out += " " + w;
  return out;
}

LaunchPlan make_launch_plan(const LaunchConfig& c, const Environment& e, const std::string& train_bin,
                            const std::vector<std::string>& train_args) {
  LaunchPlan p;
  p.env = exported_env(c, e);
  auto& a = p.argv;
  a.push_back(e.mpirun);
  if (e.is_root) a.push_back("--allow-run-as-root");
  a.insert(a.end(), {"-np", std::to_string(c.num_processes)});
  const int per_machine = config::processes_per_machine(c);
  if (config::runs_on_cpu(c) && per_machine > e.cpu_cores) a.push_back("--oversubscribe");
  if (!c.mpi.hostfile.empty()) {
    a.insert(a.end(), {"--hostfile", c.mpi.hostfile});
  } else if (!c.mpi.hosts.empty()) {
    std::string hosts;
    for (const auto& h : c.mpi.hosts) hosts += (hosts.empty() ? "" : ",") + h + ":" + std::to_string(per_machine);
    a.insert(a.end(), {"-H", hosts});
  }
  // One machine: fill slots in order. Several: the same number of ranks on each.
  std::string map_by = c.mpi.map_by;
  if (map_by.empty()) map_by = c.num_machines > 1 ? "ppr:" + std::to_string(per_machine) + ":node" : "slot";
  a.insert(a.end(), {"--map-by", map_by, "--bind-to", c.mpi.bind_to});
  if (c.num_machines > 1)
    a.insert(a.end(), {"--mca", "oob_tcp_keepalive_time", std::to_string(kOobKeepaliveTimeS), "--mca",
                       "oob_tcp_keepalive_intvl", std::to_string(kOobKeepaliveIntvlS), "--mca", "oob_tcp_keepalive_probes",
                       std::to_string(kOobKeepaliveProbes)});
  // Several machines: the daemons' agent runs under `xlaunch __agent`, which records how it ended and
  // what it said for the start-up deadline's message, unless the config chooses the agent itself.
  const bool agent_chosen = std::any_of(c.mpi.extra_args.begin(), c.mpi.extra_args.end(), [](const std::string& w) {
    return w.find("rsh_agent") != std::string::npos;
  });
  const std::string agent = wrapped_agent(e.self_exe, e.rsh_agent);
  if (c.num_machines > 1 && !agent_chosen && !agent.empty()) a.insert(a.end(), {"--mca", "plm_rsh_agent", agent});
  a.insert(a.end(), c.mpi.extra_args.begin(), c.mpi.extra_args.end());
  for (const auto& [name, value] : p.env) a.insert(a.end(), {"-x", name});
  a.insert(a.end(), {e.self_exe, "__rank", "--status_dir", e.status_dir});
  if (e.hello_port > 0) a.insert(a.end(), {"--hello", std::to_string(e.hello_port)});
  a.insert(a.end(), {"--", train_bin});
  a.insert(a.end(), train_args.begin(), train_args.end());
  return p;
}

std::string shell_join(const std::vector<std::string>& argv) {
  std::string s;
  for (const auto& w : argv) {
    if (!s.empty()) s += ' ';
    if (!needs_quotes(w)) {
      s += w;
      continue;
    }
    s += '\'';
    for (char ch : w) s += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    s += '\'';
  }
  return s;
}

}  // namespace xlaunch::launcher
