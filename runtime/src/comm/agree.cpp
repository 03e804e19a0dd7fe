#include "comm/agree.h"

#include <ATen/ops/empty.h>

#include <cstring>
#include <sstream>
#include <vector>

namespace xlaunch {

Agreement agree_on_error(Communicator& comm, const std::string& error_here) {
  Agreement a;
  if (comm.size() == 1) {
    if (!error_here.empty()) a = {0, error_here};
    return a;
  }
  at::Tensor flag = at::empty({1}, at::kInt);
  flag.fill_(error_here.empty() ? 0 : 1);
  comm.allreduce(flag, ReduceOp::Max);
  if (flag.item<int>() == 0) return a;
  const std::vector<std::string> errors = comm.allgather_strings(error_here);
  for (int r = 0; r < comm.size(); ++r)
    if (!errors[r].empty()) return {r, errors[r]};
  return a;
}

Agreement agree_on_rank0(Communicator& comm, const std::string& mine) {
  const std::string ref = broadcast_string(comm, mine);
  std::string difference;
  if (mine != ref) {
    auto lines = [](const std::string& s) {
      std::vector<std::string> out;
      std::stringstream ss(s);
      for (std::string l; std::getline(ss, l);) out.push_back(l);
      return out;
    };
    const auto theirs = lines(ref), ours = lines(mine);
    size_t k = 0;
    while (k < theirs.size() && k < ours.size() && theirs[k] == ours[k]) ++k;
    difference = "rank " + std::to_string(comm.rank()) + " has " + (k < ours.size() ? "'" + ours[k] + "'" : "nothing more") +
                 " where rank 0 has " + (k < theirs.size() ? "'" + theirs[k] + "'" : "nothing more");
  }
  return agree_on_error(comm, difference);
}

std::string broadcast_string(Communicator& comm, const std::string& mine, int root) {
  if (comm.size() == 1) return mine;
  at::Tensor n = at::empty({1}, at::kLong);
  n.fill_(static_cast<int64_t>(mine.size()));
  comm.broadcast(n, root);
  const int64_t len = n.item<int64_t>();
  if (len == 0) return "";
  at::Tensor bytes = at::empty({len}, at::kByte);
  if (comm.rank() == root) std::memcpy(bytes.data_ptr(), mine.data(), static_cast<size_t>(len));
  comm.broadcast(bytes, root);
  return std::string(static_cast<const char*>(bytes.data_ptr()), static_cast<size_t>(len));
}

}  // namespace xlaunch
