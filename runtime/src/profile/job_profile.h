// Starts this process's step clock and, when asked for, its timeline (step_clock.h, trace.h), from
// the XLAUNCH_* variables. Collective when the world has several ranks and a timeline is asked
// for: every rank measures its clock's offset from rank 0's.
#pragma once

namespace xlaunch::profile {

void start_job_profile(int rank, int world, int local_rank, bool mpi_active);

}  // namespace xlaunch::profile
