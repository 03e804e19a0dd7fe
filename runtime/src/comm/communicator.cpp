#include "xlaunch/communicator.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>
#include <exception>

namespace xlaunch {
namespace {
class DoneWork final : public Work {
 public:
  void wait() override {}
};

// Completes when every part has; the first error is rethrown after all parts were waited for.
class AllWork final : public Work {
 public:
  explicit AllWork(std::vector<std::shared_ptr<Work>> parts) : parts_(std::move(parts)) {}
  void wait() override {
    std::exception_ptr first;
    for (auto& w : parts_) {
      try {
        w->wait();
      } catch (...) {
        if (!first) first = std::current_exception();
      }
    }
    if (first) std::rethrow_exception(first);
  }

 private:
  std::vector<std::shared_ptr<Work>> parts_;
};
}  // namespace

std::shared_ptr<Work> completed_work() {
  static const auto done = std::make_shared<DoneWork>();
  return done;
}

at::Tensor Communicator::allocate(int64_t numel, const at::TensorOptions& options) {
  return at::zeros({numel}, options);
}

std::shared_ptr<Work> Communicator::allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op) {
  std::vector<std::shared_ptr<Work>> works;
  for (auto& t : ts) works.push_back(allreduce_async(t, op));
  return std::make_shared<AllWork>(std::move(works));
}

at::Tensor Communicator::allgather(const at::Tensor& in) {
  const at::Tensor src = in.contiguous();
  std::vector<int64_t> shape{size()};
  shape.insert(shape.end(), src.sizes().begin(), src.sizes().end());
  at::Tensor out = at::empty(shape, src.options());
  allgather_async(src, out)->wait();
  return out;
}

std::vector<std::string> Communicator::allgather_strings(const std::string& s) {
  // Two rounds: the lengths, then the bytes padded to the longest.
  const auto cpu_long = at::TensorOptions().dtype(at::kLong);
  at::Tensor len = at::empty({1}, cpu_long);
  len.fill_(static_cast<int64_t>(s.size()));
  at::Tensor lens = allgather(len);
  const int64_t longest = std::max<int64_t>(1, lens.max().item<int64_t>());
  at::Tensor mine = at::zeros({longest}, at::TensorOptions().dtype(at::kByte));
  std::memcpy(mine.data_ptr(), s.data(), s.size());
  at::Tensor all = allgather(mine);
  std::vector<std::string> result;
  for (int r = 0; r < size(); ++r) {
    const auto* p = all.data_ptr<uint8_t>() + r * longest;
    result.emplace_back(reinterpret_cast<const char*>(p), static_cast<size_t>(lens[r].item<int64_t>()));
  }
  return result;
}

}  // namespace xlaunch
