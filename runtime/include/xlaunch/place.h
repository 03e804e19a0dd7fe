// A process's place in the job (rank, world size, local rank), read from the launcher's
// environment: Open MPI (OMPI_COMM_WORLD_*), then PMI (PMI_RANK/PMI_SIZE), Slurm
// (SLURM_PROCID/SLURM_NTASKS), torchrun (RANK/WORLD_SIZE/LOCAL_RANK). A process started by hand is
// rank 0 of 1.
//
// Header-only and torch-free: the runtime (process_state.h) and the launcher's per-rank wrapper
// (`xlaunch __rank`) both read the place here, so the rank a status file names is the rank the
// runtime's messages name.
#pragma once

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <functional>
#include <string>

#include "xlaunch/error.h"

namespace xlaunch {

// Returns the value of an environment variable, or null when it is unset.
using GetEnv = std::function<const char*(const char*)>;

// Where this process stands: its rank among all processes and among those of its machine.
struct Place {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string source = "none (started by hand: rank 0 of 1)";
};

namespace place_detail {

struct Scheme {
  const char* rank;
  const char* size;
  const char* local_rank;  // may be null
  const char* local_size;  // may be null
  const char* source;
};

// In order of precedence: the launcher we use first.
inline constexpr Scheme kSchemes[] = {
    {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE", "Open MPI"},
    {"PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "PMI"},
    {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, "Slurm"},
    {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"},
};

inline int parse_nonneg(const GetEnv& getenv, const char* name) {
  const char* s = getenv(name);
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s, &end, 10);
  if (*s == '\0' || *end != '\0' || errno != 0 || v < 0 || v > INT_MAX)
    throw UsageError(std::string(name) + "='" + s +
                     "' is not a non-negative integer; it describes this process's place in the job. "
                     "Unset it, or start the job through `xlaunch run`.");
  return static_cast<int>(v);
}

}  // namespace place_detail

// Pure: the place described by an environment; the first scheme whose rank and size variables are
// both set decides. Throws UsageError when its variables contradict each other (rank >= world
// size, a non-number, ...), naming the variables.
inline Place place_from_env(const GetEnv& getenv) {
  using place_detail::parse_nonneg;
  for (const place_detail::Scheme& s : place_detail::kSchemes) {
    if (!getenv(s.rank) || !getenv(s.size)) continue;
    Place p;
    p.source = s.source;
    p.rank = parse_nonneg(getenv, s.rank);
    p.world_size = parse_nonneg(getenv, s.size);
    if (p.world_size < 1 || p.rank >= p.world_size)
      throw UsageError(std::string(s.rank) + "=" + std::to_string(p.rank) + " is not below " + s.size + "=" +
                       std::to_string(p.world_size) + "; the launcher's environment is inconsistent");
    p.local_rank = (s.local_rank && getenv(s.local_rank)) ? parse_nonneg(getenv, s.local_rank) : p.rank;
    p.local_world_size =
        (s.local_size && getenv(s.local_size)) ? parse_nonneg(getenv, s.local_size) : p.world_size;
    if (p.local_rank >= p.local_world_size) p.local_world_size = p.local_rank + 1;
    return p;
  }
  return Place{};
}

}  // namespace xlaunch
