// Starts this process's step clock and, when asked for, its timeline (step_clock.h, trace.h), from
// the XLAUNCH_* variables. Collective when the world has several ranks and a timeline is asked
// for: every rank measures its clock's offset from rank 0's.
#pragma once

#include <string>

namespace xlaunch::profile {

void start_job_profile(int rank, int world, int local_rank, bool mpi_active);

// Publishes the CUDA device `device` (an index of this process's CUDA runtime, so after
// CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER) as this rank's GPU in its stats: its PCI bus id
// (cudaDeviceGetPCIBusId), by which the launcher finds it among NVML's GPUs of this host for the
// report. Call once the rank's device is chosen (the Accelerator's constructor). A CPU rank calls
// nothing and publishes no bus id. Without CUDA, or when CUDA cannot name the device, nothing is
// published (the report leaves the rank's GPU columns blank rather than guessing), a warning
// says why, and the CUDA error is cleared so that no later launch check reports it. Returns the
// bus id published, or "".
std::string publish_cuda_device(int device);

}  // namespace xlaunch::profile
