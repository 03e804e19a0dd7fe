#include "launch/programs.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <climits>
#include <cstring>
#include <fstream>
#include <vector>
#include <regex>

#include "launch/launch_error.h"
#include "launch/launch_plan.h"

namespace xlaunch::launcher {

namespace {
bool is_executable_file(const std::string& p) {
  struct stat st {};
  return stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(p.c_str(), X_OK) == 0;
}
}  // namespace

CommandOutput run_command(const std::string& shell_command) {
  CommandOutput r;
  FILE* f = popen(shell_command.c_str(), "r");
  if (!f) return r;
  char buf[512];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, f)) > 0) r.out.append(buf, n);
  r.status = pclose(f);
  return r;
}

std::string path_env() {
  const char* p = std::getenv("PATH");
  return p ? p : "/usr/local/bin:/usr/bin:/bin";
}

std::optional<std::string> find_program(const std::string& name, const std::string& path_var) {
  if (name.empty()) return std::nullopt;
  if (name.find('/') != std::string::npos) return is_executable_file(name) ? std::optional(name) : std::nullopt;
  size_t i = 0;
  while (i <= path_var.size()) {
    size_t j = path_var.find(':', i);
    if (j == std::string::npos) j = path_var.size();
    const std::string dir = j == i ? "." : path_var.substr(i, j - i);  // empty entry: current dir
    const std::string candidate = dir + "/" + name;
    if (is_executable_file(candidate)) return candidate;
    i = j + 1;
  }
  return std::nullopt;
}

std::string resolve_train_binary(const std::string& name, const std::string& path_var) {
  if (auto found = find_program(name, path_var)) return *found;
  if (name.find('/') == std::string::npos)
    throw LaunchError("training binary '" + name + "' not found in PATH; give its path (e.g. ./" + name +
                      ") or add its directory to PATH");
  struct stat st {};
  if (stat(name.c_str(), &st) != 0)
    throw LaunchError("training binary '" + name + "' not found (" + std::strerror(errno) +
                      "); check the path, and build it first if it is part of your project");
  if (!S_ISREG(st.st_mode)) throw LaunchError("training binary '" + name + "' is not a file; give the program itself");
  throw LaunchError("training binary '" + name + "' is not executable; run `chmod +x " + name + "`");
}

std::optional<std::string> parse_open_mpi_version(const std::string& out) {
  static const std::regex re(R"(\(Open(RTE| MPI)\) ([0-9][0-9A-Za-z.\-]*))");
  std::smatch m;
  if (!std::regex_search(out, m, re)) return std::nullopt;
  return m[2].str();
}

OpenMpi find_open_mpi(const std::string& path_var) {
  const auto mpirun = find_program("mpirun", path_var);
  if (!mpirun)
    throw LaunchError("mpirun not found in PATH: install Open MPI (Debian/Ubuntu: apt-get install openmpi-bin), "
                      "or add the directory holding Open MPI's mpirun to PATH");
  const std::string out = run_command(shell_join({*mpirun, "--version"}) + " 2>&1").out;
  const auto version = parse_open_mpi_version(out);
  if (!version) {
    const std::string first = out.substr(0, out.find('\n'));
    throw LaunchError(*mpirun + " is not Open MPI's mpirun (`mpirun --version` said: '" + first +
                      "'): xlaunch needs Open MPI; install openmpi-bin and put its mpirun first in PATH "
                      "(Debian: update-alternatives --config mpirun)");
  }
  return {*mpirun, *version};
}

std::string rsh_agent(const std::string& path_var) {
  for (const char* name : {"OMPI_MCA_plm_rsh_agent", "OMPI_MCA_orte_rsh_agent"})
    if (const char* v = std::getenv(name); v && *v) return v;
  // One chosen in an MCA parameter file stays Open MPI's to read: not wrapped. (Files named in
  // OMPI_MCA_mca_param_files: not looked into, not wrapped either.)
  if (const char* v = std::getenv("OMPI_MCA_mca_param_files"); v && *v) return "";
  const char* home = std::getenv("HOME");
  std::vector<std::string> files = {std::string(home ? home : "") + "/.openmpi/mca-params.conf",
                                    "/etc/openmpi/openmpi-mca-params.conf"};
  if (const auto mpirun = find_program("mpirun", path_var)) {  // <prefix>/bin/mpirun: <prefix>/etc/...
    char real[PATH_MAX];
    if (realpath(mpirun->c_str(), real)) {
      std::string prefix = real;
      prefix = prefix.substr(0, prefix.rfind('/'));
      prefix = prefix.substr(0, prefix.rfind('/'));
      files.push_back(prefix + "/etc/openmpi-mca-params.conf");
    }
  }
  for (const std::string& file : files) {
    std::ifstream in(file);
    for (std::string line; std::getline(in, line);)
      if (line.find("rsh_agent") != std::string::npos && line.find_first_not_of(" \t") != line.find('#')) return "";
  }
  for (const char* name : {"ssh", "rsh"})
    if (find_program(name, path_var)) return name;
  return "";
}

}  // namespace xlaunch::launcher
