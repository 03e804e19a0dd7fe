#include "xlaunch/extend/communicator.h"

#include <ATen/ops/cat.h>
#include <ATen/ops/div.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <cstring>
#include <exception>

#include "comm/flat.h"
#include "xlaunch/error.h"

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

// A compressed allreduce: the collective over the cast copy, then the copy cast back into place.
class CastBackWork final : public Work {
 public:
  CastBackWork(std::shared_ptr<Work> inner, at::Tensor wire, std::vector<at::Tensor> ts)
      : inner_(std::move(inner)), wire_(std::move(wire)), ts_(std::move(ts)) {}
  void wait() override {
    if (!inner_) return;
    inner_->wait();
    inner_.reset();
    unflatten_into(wire_, ts_);
    ts_.clear();
  }

 private:
  std::shared_ptr<Work> inner_;
  at::Tensor wire_;
  std::vector<at::Tensor> ts_;
};
// The default reduce-scatter: the allreduce of a copy, then this rank's chunk copied out.
class ChunkWork final : public Work {
 public:
  ChunkWork(std::shared_ptr<Work> inner, at::Tensor full, at::Tensor out, int64_t offset)
      : inner_(std::move(inner)), full_(std::move(full)), out_(std::move(out)), offset_(offset) {}
  void wait() override {
    if (!inner_) return;
    inner_->wait();
    inner_.reset();
    out_.copy_(full_.narrow(0, offset_, out_.numel()));
    full_ = at::Tensor();
  }

 private:
  std::shared_ptr<Work> inner_;
  at::Tensor full_, out_;
  int64_t offset_;
};
}  // namespace

void check_reduce_scatter_args(const Communicator& comm, const at::Tensor& in, const at::Tensor& out) {
  auto fail = [&](const std::string& why) {
    throw UsageError(comm.name() + " reduce_scatter: " + why + " (in: " + std::to_string(in.numel()) + " " +
                     std::string(c10::toString(in.scalar_type())) + " on " + in.device().str() + ", out: " +
                     std::to_string(out.numel()) + " " + std::string(c10::toString(out.scalar_type())) + " on " +
                     out.device().str() + ", " + std::to_string(comm.size()) + " ranks)");
  };
  if (!in.is_contiguous() || !out.is_contiguous()) fail("both tensors must be contiguous");
  if (in.scalar_type() != out.scalar_type()) fail("in and out must have the same dtype");
  if (in.device() != out.device()) fail("in and out must be on the same device");
  if (in.numel() != out.numel() * comm.size()) fail("in must hold size() * out.numel() elements");
}

std::shared_ptr<Work> Communicator::reduce_scatter_async(at::Tensor in, at::Tensor out, ReduceOp op) {
  check_reduce_scatter_args(*this, in, out);
  op = reduce_op_for(in.scalar_type(), op, "reduce_scatter");
  if (size() == 1) {
    out.copy_(in.reshape({-1}));
    return completed_work();
  }
  at::Tensor full = in.reshape({-1}).clone();
  auto inner = allreduce_async(full, op);
  return std::make_shared<ChunkWork>(std::move(inner), std::move(full), std::move(out), rank() * out.numel());
}

std::shared_ptr<Work> completed_work() {
  static const auto done = std::make_shared<DoneWork>();
  return done;
}

ReduceOp reduce_op_for(at::ScalarType dtype, ReduceOp op, const char* collective) {
  if (dtype != at::kBool) return op;
  if (op == ReduceOp::Avg)
    throw UsageError(std::string(collective) + ": Avg over bool tensors has no meaning (an average of true and "
                     "false is not a bool); reduce with Sum or Max (both are logical or), or convert the tensor "
                     "to a floating-point dtype first");
  return ReduceOp::Max;
}

at::Tensor Communicator::allocate(int64_t numel, const at::TensorOptions& options) {
  return at::zeros({numel}, options);
}

std::shared_ptr<Work> Communicator::allreduce_coalesced_async(std::vector<at::Tensor> ts, ReduceOp op) {
  std::vector<std::shared_ptr<Work>> works;
  for (auto& t : ts) works.push_back(allreduce_async(t, op));
  return std::make_shared<AllWork>(std::move(works));
}

std::shared_ptr<Work> Communicator::allreduce_compressed_async(std::vector<at::Tensor> ts, ReduceOp op,
                                                               at::ScalarType wire) {
  if (wire != at::kHalf && wire != at::kBFloat16)
    throw UsageError(std::string("allreduce_compressed_async: the wire type must be float16 or bfloat16, not ") +
                     at::toString(wire));
  for (const auto& t : ts)
    if (!t.defined() || !t.is_floating_point() || !t.is_contiguous())
      throw UsageError("allreduce_compressed_async: every tensor must be a contiguous floating-point tensor");
  if (size() == 1 || ts.empty()) return completed_work();
  std::vector<at::Tensor> flat;
  for (const auto& t : ts) flat.push_back(t.view(-1));
  const at::Tensor all = flat.size() == 1 ? flat.front() : at::cat(flat);
  // Divided before the cast, as PyTorch's fp16 hook does: a sum of float16 values overflows sooner.
  at::Tensor on_wire = at::empty({all.numel()}, all.options().dtype(wire));
  if (op == ReduceOp::Avg) at::div_out(on_wire, all, at::scalar_tensor(static_cast<double>(size())));  // one pass: divide and cast
  else on_wire.copy_(all);
  auto inner = allreduce_async(on_wire, op == ReduceOp::Avg ? ReduceOp::Sum : op);
  return std::make_shared<CastBackWork>(std::move(inner), std::move(on_wire), std::move(ts));
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
