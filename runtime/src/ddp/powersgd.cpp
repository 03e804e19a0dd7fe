#include "ddp/powersgd.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Parallel.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/addmm.h>
#include <ATen/ops/mm.h>
#include <ATen/ops/randn.h>
#include <ATen/ops/zeros.h>

#include <algorithm>
#include <vector>

#include "check.h"
#include "comm/flat.h"
#include "xlaunch/error.h"

namespace xlaunch {

void orthonormalize_columns(at::Tensor& p) {
  at::NoGradGuard no_grad;
  const int64_t r = p.size(1);
  for (int64_t i = 0; i < r; ++i) {
    at::Tensor col = p.narrow(1, i, 1);
    // PyTorch divides by the norm alone and turns a zero column into NaNs; a tiny epsilon keeps it zero.
    col.div_(col.norm().add_(1e-8));
    if (i + 1 < r) {
      at::Tensor rest = p.narrow(1, i + 1, r - i - 1);
      rest.sub_((col * rest).sum(0, /*keepdim=*/true) * col);
    }
  }
}

PowerSgdBucket::PowerSgdBucket(const std::vector<at::Tensor>& views, std::shared_ptr<Communicator> comm, int rank,
                               uint64_t seed)
    : comm_(std::move(comm)) {
  XLAUNCH_ASSERT(rank >= 1, "PowerSGD rank >= 1");
  at::NoGradGuard no_grad;
  int64_t p_total = 0, q_total = 0, exact_total = 0;
  std::vector<std::pair<at::Tensor, int64_t>> shapes;  // compressed member as [n, m], and its r
  for (const auto& v : views) {
    const int64_t n = v.dim() >= 2 ? v.size(0) : 0;
    const int64_t m = n > 0 ? v.numel() / n : 0;
    const int64_t r = std::min<int64_t>({rank, n, m});
    // PyTorch's min_compression_rate of 2: compress only where it at least halves the bytes.
    if (n > 0 && m > 0 && (n + m) * r * 2 < n * m) {
      shapes.emplace_back(v.view({n, m}), r);
      p_total += n * r;
      q_total += m * r;
    } else {
      exact_.push_back(v);
      exact_total += v.numel();
    }
  }
  const at::TensorOptions options = views.front().options();
  if (exact_total > 0) exact_buf_ = comm_->allocate(exact_total, options);
  if (shapes.empty()) return;
  p_buf_ = comm_->allocate(p_total, options);
  q_buf_ = comm_->allocate(q_total, options);
  // The same starting Q on every rank.
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  q_buf_.copy_(at::randn({q_total}, gen, at::TensorOptions().dtype(options.dtype())));
  int64_t p_off = 0, q_off = 0;
  for (auto& [mat, r] : shapes) {
    const int64_t n = mat.size(0), m = mat.size(1);
    matrices_.push_back({mat, p_buf_.narrow(0, p_off, n * r).view({n, r}), q_buf_.narrow(0, q_off, m * r).view({r, m}),
                         at::zeros({n, m}, options)});
    p_off += n * r;
    q_off += m * r;
  }
}

void PowerSgdBucket::start() {
  at::NoGradGuard no_grad;
  if (exact_buf_.defined()) {
    flatten_into(exact_, exact_buf_);
    exact_work_ = comm_->allreduce_async(exact_buf_, ReduceOp::Avg);
  }
  if (matrices_.empty()) return;
  for (auto& x : matrices_) {
    x.m.add_(x.error);  // error feedback: what earlier approximations missed on this rank
    at::mm_out(x.p, x.m, x.qt.t());
  }
  p_work_ = comm_->allreduce_async(p_buf_, ReduceOp::Sum);
}

void PowerSgdBucket::exchange() {
  if (matrices_.empty()) return;
  at::NoGradGuard no_grad;
  p_work_->wait();
  p_work_.reset();
  for (auto& x : matrices_) {
    orthonormalize_columns(x.p);
    at::mm_out(x.qt, x.p.t(), x.m);  // (M^T P)^T: BLAS is ~10x slower at M^T P into an [m, r] output
  }
  q_work_ = comm_->allreduce_async(q_buf_, ReduceOp::Sum);
}

namespace {

// M <- P Qt and error <- M - P Qt in one pass over the rows (CPU, contiguous): BLAS spends twice
// as long on each of these two products with an inner dimension of r. Each element is computed
// alone, in a fixed order, so every rank (and any thread count) gets the same bits from the same
// P and Qt.
template <typename T>
void reconstruct_rows(T* m, T* error, const T* p, const T* qt, int64_t n, int64_t cols, int64_t r) {
  at::parallel_for(0, n, 8, [&](int64_t first, int64_t last) {
    std::vector<T> row(static_cast<size_t>(cols));
    for (int64_t i = first; i < last; ++i) {
      const T* pi = p + i * r;
      for (int64_t j = 0; j < cols; ++j) row[j] = pi[0] * qt[j];
      for (int64_t k = 1; k < r; ++k) {
        const T c = pi[k];
        const T* qk = qt + k * cols;
        for (int64_t j = 0; j < cols; ++j) row[j] += c * qk[j];
      }
      T* mi = m + i * cols;
      T* ei = error + i * cols;
      for (int64_t j = 0; j < cols; ++j) {
        ei[j] = mi[j] - row[j];
        mi[j] = row[j];
      }
    }
  });
}

}  // namespace

void PowerSgdBucket::complete() {
  at::NoGradGuard no_grad;
  if (exact_work_) {
    exact_work_->wait();
    exact_work_.reset();
    unflatten_into(exact_buf_, exact_);
  }
  if (matrices_.empty()) return;
  q_work_->wait();
  q_work_.reset();
  q_buf_.div_(comm_->size());  // kept: the next step starts from it
  for (auto& x : matrices_) {
    const int64_t n = x.m.size(0), cols = x.m.size(1), r = x.p.size(1);
    if (x.m.is_cpu() && x.m.scalar_type() == at::kFloat) {
      reconstruct_rows(x.m.data_ptr<float>(), x.error.data_ptr<float>(), x.p.data_ptr<float>(), x.qt.data_ptr<float>(),
                       n, cols, r);
    } else if (x.m.is_cpu() && x.m.scalar_type() == at::kDouble) {
      reconstruct_rows(x.m.data_ptr<double>(), x.error.data_ptr<double>(), x.p.data_ptr<double>(),
                       x.qt.data_ptr<double>(), n, cols, r);
    } else {
      at::addmm_out(x.error, x.m, x.p, x.qt, /*beta=*/1, /*alpha=*/-1);  // what this rank's M keeps back
      at::mm_out(x.m, x.p, x.qt);  // from P and Q alone: the same on every rank
    }
  }
}

std::vector<std::pair<std::string, at::Tensor>> PowerSgdBucket::state() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (matrices_.empty()) return out;
  out.emplace_back("q", q_buf_);
  for (size_t k = 0; k < matrices_.size(); ++k) out.emplace_back("error." + std::to_string(k), matrices_[k].error);
  return out;
}

std::string PowerSgdBucket::mismatch(const std::vector<std::pair<std::string, at::Tensor>>& saved) const {
  const auto mine = state();
  for (const auto& [name, t] : saved) {
    const auto it = std::find_if(mine.begin(), mine.end(), [&](const auto& e) { return e.first == name; });
    if (it == mine.end()) return "'" + name + "' is not part of this bucket's PowerSGD state";
    if (!it->second.sizes().equals(t.sizes()))
      return "'" + name + "' has " + std::to_string(t.numel()) + " elements there, " +
             std::to_string(it->second.numel()) + " here (another powersgd_rank or model?)";
  }
  const bool has_q = std::any_of(saved.begin(), saved.end(), [](const auto& e) { return e.first == "q"; });
  if (!mine.empty() && !has_q) return "it has no 'q'";
  return "";
}

void PowerSgdBucket::load(const std::vector<std::pair<std::string, at::Tensor>>& saved) {
  at::NoGradGuard no_grad;
  for (auto& x : matrices_) x.error.zero_();
  auto mine = state();
  for (const auto& [name, t] : saved)
    for (auto& [n, live] : mine)
      if (n == name) live.copy_(t);
}

}  // namespace xlaunch
