#include "ddp/accumulation.h"

#include <ATen/ops/_foreach_mul.h>
#include <ATen/ops/tensor.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>

#include "profile/sync_count.h"
#include "xlaunch/error.h"
#include "xlaunch/extend/communicator.h"

namespace xlaunch {

MicroStep plan_micro_step(int64_t done, int64_t steps, int64_t batches_left) {
  const int64_t k = done % steps;  // this micro-step's place in its window
  const bool end_of_loader = batches_left == 0;
  MicroStep s;
  s.sync = k + 1 == steps || end_of_loader;
  s.window_length = batches_left < 0 ? steps : std::min(steps, k + 1 + batches_left);
  s.next_done = end_of_loader ? 0 : done + 1;
  return s;
}

namespace {

const char* kMixed =
    "acc.backward: one gradient accumulation window mixes backward(loss) and backward(loss_sum, num_items); "
    "a window's losses are divided by its length in the first form and by its items in the second, so the two "
    "cannot be summed. Use one form for every micro-step of a window (every backward between two optimizer steps)";

std::string number(double x) {
  std::ostringstream os;
  os << x;
  return os.str();
}

}  // namespace

void ItemWindow::add_mean(bool sync) {
  if (item_backwards_ > 0) throw UsageError(kMixed);
  ++mean_backwards_;
  if (sync) reset();
}

void ItemWindow::add_items(double n) {
  if (mean_backwards_ > 0) throw UsageError(kMixed);
  ++item_backwards_;
  if (std::isfinite(n) && n >= 0) {
    host_items_ += n;
  } else if (bad_.empty()) {
    bad_ = "num_items " + number(n) + " in micro-step " + std::to_string(item_backwards_) + " of the window";
  }
}

void ItemWindow::add_items(const at::Tensor& n) {
  if (!n.defined() || n.dim() != 0) {
    std::ostringstream shape;
    if (n.defined()) shape << n.sizes();
    throw UsageError("acc.backward(loss_sum, num_items): num_items must be an integer or a 0-dim tensor (got " +
                     (n.defined() ? "a tensor of shape " + shape.str() : std::string("an undefined tensor")) +
                     "); pass the count, e.g. mask.sum(), not the mask");
  }
  if (mean_backwards_ > 0) throw UsageError(kMixed);
  ++item_backwards_;
  // Summed where it lies: reading it now would stall the host on the device every micro-step.
  const at::Tensor x = n.detach().to(at::kDouble);
  device_items_ = device_items_.defined() ? device_items_ + x : x;
}

double ItemWindow::close(Communicator& comm) {
  double mine = host_items_;
  if (device_items_.defined()) {
    profile::syncs::RuntimeSync sync("the num_items tensors' sum, read once per window (acc.backward(loss_sum, num_items))");
    const double d = device_items_.item<double>();  // the window's one host read of device counts
    if (std::isfinite(d) && d >= 0) mine += d;
    else if (bad_.empty()) bad_ = "num_items tensors summing to " + number(d) + " over the window";
  }
  const int64_t backwards = item_backwards_;
  const std::string bad = bad_;
  reset();
  // One allreduce: the items of every rank, and how many ranks had bad ones (whose items count 0).
  at::Tensor v = at::tensor({bad.empty() ? mine : 0.0, bad.empty() ? 0.0 : 1.0}, at::kDouble);
  if (comm.size() > 1) comm.allreduce(v, ReduceOp::Sum);
  const double total = v[0].item<double>();
  const auto bad_ranks = static_cast<int64_t>(v[1].item<double>());
  if (bad_ranks > 0)
    throw UsageError("acc.backward(loss_sum, num_items): num_items must be a count >= 0 (tokens, valid labels), but " +
                     std::to_string(bad_ranks) + " of " + std::to_string(world_) + " ranks passed a negative or " +
                     "non-finite one" + (bad.empty() ? std::string() : " (this rank: " + bad + ")") +
                     ". Pass the number of items loss_sum sums over, e.g. (labels != ignore_index).sum()");
  if (total == 0)
    throw UsageError("acc.backward(loss_sum, num_items): the accumulation window ending here (" +
                     std::to_string(backwards) + " micro-step(s) on each of " + std::to_string(world_) +
                     " rank(s)) has num_items 0 on every rank: there is no item to average the loss over, and "
                     "its gradients would be 0/0. Check that the batches hold items that count (labels not all "
                     "ignore_index, masks not all zero), or leave such batches out on every rank alike");
  const double factor = reference_ / total;
  reference_ = total;
  return factor;
}

void ItemWindow::reset() {
  host_items_ = 0;
  device_items_ = at::Tensor();
  bad_.clear();
  item_backwards_ = mean_backwards_ = 0;
}

void scale_gradients(const std::vector<at::Tensor>& grads, double factor) {
  // _foreach_mul_ wants one device and dtype per list (one fused launch on CUDA).
  std::map<std::tuple<int, int, at::ScalarType>, std::vector<at::Tensor>> groups;
  for (const auto& g : grads)
    if (g.defined()) groups[{static_cast<int>(g.device().type()), g.device().index(), g.scalar_type()}].push_back(g);
  for (auto& [key, list] : groups) at::_foreach_mul_(list, factor);
}

}  // namespace xlaunch
