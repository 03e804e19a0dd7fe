// Finding programs: the training binary the user names, and Open MPI's mpirun.
#pragma once

#include <optional>
#include <string>

namespace xlaunch::launcher {

// Like execvp: a name containing '/' is taken as a path; a bare name is searched in `path_var`
// (a PATH value). Returns the first executable regular file found.
std::optional<std::string> find_program(const std::string& name, const std::string& path_var);

// The training binary as a path ready to exec. Throws LaunchError saying whether it is missing,
// not a file, or not executable, and how to fix it.
std::string resolve_train_binary(const std::string& name, const std::string& path_var);

// Pure: the version from `mpirun --version` output ("mpirun (Open MPI) 4.1.4" -> "4.1.4"), or
// nullopt when the output is not Open MPI's (MPICH's Hydra, Intel MPI, ...).
std::optional<std::string> parse_open_mpi_version(const std::string& version_output);

struct OpenMpi {
  std::string mpirun;   // path
  std::string version;  // "4.1.4"
};

// Finds mpirun in `path_var` and checks it is Open MPI by running `mpirun --version`. Throws
// LaunchError with the fix when it is missing or another MPI.
OpenMpi find_open_mpi(const std::string& path_var);

struct CommandOutput {
  std::string out;  // what it wrote to stdout
  int status = -1;  // pclose's status; -1 when it could not be started
};

// Runs `shell_command` through /bin/sh and waits for it.
CommandOutput run_command(const std::string& shell_command);

// The program Open MPI starts its daemons on other machines with, as it would choose it: the
// plm_rsh_agent (or orte_rsh_agent) of this environment, else ssh, else rsh, when found in
// path_var; "" when there is none.
std::string rsh_agent(const std::string& path_var);

// The real PATH, or the default search path when unset.
std::string path_env();

}  // namespace xlaunch::launcher
