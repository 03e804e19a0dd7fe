#include "algorithms/algorithms.h"

#include <ATen/Context.h>
#include <c10/util/Exception.h>

#include <cctype>
#include <cstdlib>

#include "xlaunch/error.h"

namespace xlaunch::algorithms {
namespace {

constexpr const char* kRefusal = " does not have a deterministic implementation";

void ensure_cublas_workspace() {
  const char* set = std::getenv(kCublasWorkspaceVar);
  if (!set) {
    if (setenv(kCublasWorkspaceVar, kCublasDeterministicWorkspace, /*overwrite=*/0) != 0)
      throw UsageError(std::string("deterministic: true: cannot set ") + kCublasWorkspaceVar +
                       " (setenv failed); set " + kCublasWorkspaceVar + "=" + kCublasDeterministicWorkspace +
                       " in the environment yourself");
    return;
  }
  const std::string v = set;
  if (v != ":4096:8" && v != ":16:8")
    throw UsageError(std::string("deterministic: true needs deterministic cuBLAS, but ") + kCublasWorkspaceVar + "='" +
                     v + "' is not one of :4096:8 and :16:8; unset it (xlaunch then sets " +
                     kCublasDeterministicWorkspace + ") or set one of those, or set deterministic: false");
}

}  // namespace

std::string apply(const AlgorithmSettings& s) {
  if (s.cudnn_benchmark && s.deterministic)
    throw UsageError("cudnn_benchmark and deterministic are both true: cuDNN's autotuning chooses algorithms by "
                     "timing them, which differs from run to run. Set cudnn_benchmark: false for a deterministic "
                     "run, or deterministic: false for the fastest algorithms");
  at::Context& ctx = at::globalContext();
  if (s.cudnn_benchmark) ctx.setBenchmarkCuDNN(true);
  if (!s.deterministic) return "";
  ensure_cublas_workspace();
  ctx.setBenchmarkCuDNN(false);
  ctx.setDeterministicCuDNN(true);
  ctx.setDeterministicAlgorithms(true, /*warn_only=*/false);
  return std::string("deterministic: true: deterministic algorithms only (cuDNN deterministic, no autotuning; ") +
         kCublasWorkspaceVar + "=" + std::getenv(kCublasWorkspaceVar) +
         "). An operation without a deterministic implementation stops the job, naming itself; PyTorch lists them: " +
         kDeterministicDocs;
}

std::string refused_operation(const std::string& message) {
  const size_t at = message.find(kRefusal);
  if (at == std::string::npos) return "";
  // The operation is the word before the phrase (PyTorch starts its message with it; context
  // added in front of the message is skipped).
  size_t begin = at;
  while (begin > 0 && !std::isspace(static_cast<unsigned char>(message[begin - 1]))) --begin;
  return message.substr(begin, at - begin);
}

void explain_refusal(const std::exception_ptr& e, const char* where) {
  if (!e) return;
  std::string op;
  try {
    std::rethrow_exception(e);
  } catch (const c10::Error& err) {
    op = refused_operation(err.msg());
  } catch (...) {
    return;
  }
  if (op.empty()) return;
  throw UsageError(std::string(where) + " ran " + op + ", which has no deterministic implementation, and this job "
                   "runs deterministic algorithms only (deterministic: true, XLAUNCH_DETERMINISTIC=1). Set "
                   "deterministic: false (in the config, or leave out --deterministic), or use another operation "
                   "in place of " + op + " (PyTorch lists the operations without a deterministic implementation: " +
                   kDeterministicDocs + "). (This is " + where_am_i() + ".)");
}

}  // namespace xlaunch::algorithms
