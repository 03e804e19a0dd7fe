// cuDNN autotuning and deterministic algorithms (docs/performance.md#deterministic-runs-and-cudnn-
// autotuning): the config's cudnn_benchmark and deterministic (XLAUNCH_CUDNN_BENCHMARK,
// XLAUNCH_DETERMINISTIC), applied by the Accelerator's constructor on every rank, before any
// prepare, to LibTorch's process-wide context (what torch.backends.cudnn.benchmark,
// torch.backends.cudnn.deterministic and torch.use_deterministic_algorithms set in Python).
//
// cuBLAS: deterministic matrix products need CUBLAS_WORKSPACE_CONFIG=:4096:8 (or :16:8) in the
// environment before the process's first cuBLAS handle; PyTorch refuses a CUDA matmul under
// deterministic algorithms without it. The runtime sets it here rather than the launcher exporting
// it: a program started by hand gets it too, and the Accelerator is made before any training, so
// before the first cuBLAS call of a program that makes it first. (A program that runs CUDA matrix
// products before making its Accelerator must set the variable itself.)
#pragma once

#include <exception>
#include <string>

namespace xlaunch::algorithms {

struct AlgorithmSettings {
  bool cudnn_benchmark = false;  // cuDNN times its algorithms per new input shape, keeps the fastest
  bool deterministic = false;    // deterministic algorithms only; an operation without one fails
};

inline constexpr const char* kCublasWorkspaceVar = "CUBLAS_WORKSPACE_CONFIG";
inline constexpr const char* kCublasDeterministicWorkspace = ":4096:8";
// PyTorch's list of the operations that have no deterministic implementation (or get one only
// under deterministic mode).
inline constexpr const char* kDeterministicDocs =
    "https://pytorch.org/docs/stable/generated/torch.use_deterministic_algorithms.html";

// Turns on in at::globalContext() what is asked for: cuDNN benchmark (cudnn_benchmark); or cuDNN
// deterministic, no cuDNN benchmark and deterministic algorithms as errors, not warnings
// (deterministic), with CUBLAS_WORKSPACE_CONFIG=:4096:8 when it is unset (setenv: call it before
// other threads read the environment). A setting that is false changes nothing, so what the
// program set in LibTorch's context itself stays (both are off in LibTorch by default). Throws UsageError for both settings true (autotuning picks algorithms by timing,
// which is not deterministic), or with deterministic for a CUBLAS_WORKSPACE_CONFIG other than
// :4096:8 and :16:8. Returns the line the main process prints at the start with deterministic on
// (what is on, and where PyTorch lists what then refuses to run); "" otherwise.
std::string apply(const AlgorithmSettings& s);

// The operation PyTorch names in its refusal to run one without a deterministic implementation
// ("put_ does not have a deterministic implementation, but you set 'torch.use_deterministic_
// algorithms(True)'. ..."): "put_"; "" when `message` is not such a refusal.
std::string refused_operation(const std::string& message);

// When `e` holds such a refusal (a c10::Error): throws UsageError with one message that names the
// operation, where it ran (`where`: "acc.backward", ...), this rank, and the fixes (deterministic:
// false, or another operation). Returns otherwise, so that the caller rethrows `e` unchanged.
void explain_refusal(const std::exception_ptr& e, const char* where);

}  // namespace xlaunch::algorithms
