#include "comm/object_exchange.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>

#include "xlaunch/error.h"

namespace xlaunch {
namespace {

const at::TensorOptions kLong = at::TensorOptions().dtype(at::kLong);

void refuse_oversize(const std::vector<std::pair<int, int64_t>>& sizes, int64_t limit, const std::string& call) {
  const std::string problem = oversize_problem(sizes, limit, call);
  if (!problem.empty()) throw UsageError(problem);
}

}  // namespace

std::string oversize_problem(const std::vector<std::pair<int, int64_t>>& sizes, int64_t limit, const std::string& call) {
  std::string over;
  for (const auto& [rank, size] : sizes)
    if (size > limit)
      over += std::string(over.empty() ? "" : ", ") + "rank " + std::to_string(rank) + "'s is " +
              std::to_string(size) + " bytes";
  if (over.empty()) return "";
  return call + ": a value is larger than the limit of " + std::to_string(limit) +
         " bytes (AcceleratorOptions::max_object_bytes) once encoded: " + over +
         ". Send less per call (split the value over several calls), send large numeric data as tensors "
         "(acc.gather, which takes different row counts), or raise max_object_bytes";
}

std::vector<std::string> gather_bytes(Communicator& comm, const std::string& mine, int64_t limit) {
  at::Tensor size = at::empty({1}, kLong);
  size.fill_(static_cast<int64_t>(mine.size()));
  const at::Tensor sizes = comm.allgather(size).view(-1).contiguous();
  const int64_t* s = sizes.data_ptr<int64_t>();
  std::vector<std::pair<int, int64_t>> by_rank;
  for (int r = 0; r < comm.size(); ++r) by_rank.emplace_back(r, s[r]);
  refuse_oversize(by_rank, limit, "gather_object");
  // Every value padded to the longest: one allgather of world * longest bytes.
  const int64_t longest = std::max<int64_t>(1, *std::max_element(s, s + comm.size()));
  at::Tensor padded = at::zeros({longest}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(padded.data_ptr(), mine.data(), mine.size());
  const at::Tensor all = comm.allgather(padded);
  const auto* bytes = reinterpret_cast<const char*>(all.data_ptr<uint8_t>());
  std::vector<std::string> out;
  for (int r = 0; r < comm.size(); ++r) out.emplace_back(bytes + r * longest, static_cast<size_t>(s[r]));
  return out;
}

std::string broadcast_bytes(Communicator& comm, const std::string& mine, int root, int64_t limit) {
  if (root < 0 || root >= comm.size())
    throw UsageError("broadcast_object: from " + std::to_string(root) + " is not a rank of this job (0 to " +
                     std::to_string(comm.size() - 1) + ")");
  at::Tensor size = at::empty({1}, kLong);
  size.fill_(static_cast<int64_t>(comm.rank() == root ? mine.size() : 0));
  comm.broadcast(size, root);
  const int64_t n = size.item<int64_t>();
  refuse_oversize({{root, n}}, limit, "broadcast_object");
  at::Tensor bytes = at::zeros({std::max<int64_t>(n, 1)}, at::TensorOptions().dtype(at::kByte));
  if (comm.rank() == root) std::memcpy(bytes.data_ptr(), mine.data(), mine.size());
  comm.broadcast(bytes, root);
  return std::string(reinterpret_cast<const char*>(bytes.data_ptr<uint8_t>()), static_cast<size_t>(n));
}

}  // namespace xlaunch
