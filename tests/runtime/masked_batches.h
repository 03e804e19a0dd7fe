// Micro-batches of a masked per-item loss (tokens or labels that do not count), for the tests of
// backward(loss_sum, num_items): the windows they form, how they are spread over 1, 2 or 3 ranks,
// and one process training on the window as one large batch. Every rank can build every batch.
#pragma once

#include <ATen/ops/randperm.h>
#include <ATen/ops/zeros.h>

#include <vector>

#include "models.h"
#include "xlaunch/accelerator.h"

namespace xlaunch::test {

struct Masked {
  at::Tensor x, y, mask;  // mask: 1 for the rows that count (the items), 0 for the others
  int64_t items = 0;
};

inline Masked masked_batch(int id, int64_t rows, int64_t items) {
  auto gen = at::detail::createCPUGenerator(7000 + id);
  Masked b{at::randn({rows, 20}, gen), at::randint(0, 10, {rows}, gen, at::kLong), at::zeros({rows}), items};
  b.mask.index_fill_(0, at::randperm(rows, gen, at::kLong).slice(0, 0, items), 1.0);
  return b;
}

// The sum of the per-item cross entropies over the rows that count.
inline at::Tensor loss_sum_of(const at::Tensor& logits, const Masked& b) {
  namespace F = torch::nn::functional;
  return (F::cross_entropy(logits, b.y, F::CrossEntropyFuncOptions().reduction(torch::kNone)) * b.mask).sum();
}

// Window 0: micro-batches of 3, 8, 1 and 12 items (24) among 5, 10, 2 and 15 rows; window 1 (a
// second optimizer step): 7, 2, 9 and 4 items (22).
inline std::vector<Masked> window_batches(int window) {
  const std::vector<std::vector<std::pair<int64_t, int64_t>>> shapes{{{5, 3}, {10, 8}, {2, 1}, {15, 12}},
                                                                     {{9, 7}, {4, 2}, {11, 9}, {6, 4}}};
  std::vector<Masked> out;
  for (size_t k = 0; k < 4; ++k) out.push_back(masked_batch(10 * window + static_cast<int>(k), shapes[window][k].first,
                                                            shapes[window][k].second));
  return out;
}

// The window's micro-batches rank `rank` of `world` trains on, one per micro-step: each exactly
// once over the ranks; -1 is a micro-batch with no item (all its rows masked). The micro-steps per
// rank are the gradient_accumulation_steps.
inline std::vector<int> spread(int world, int rank) {
  if (world == 1) return {0, 1, 2, 3};
  if (world == 2) return rank == 0 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
  const std::vector<std::vector<int>> three{{0, 3}, {1, -1}, {2, -1}};
  return three.at(rank);
}

inline Masked micro_batch(const std::vector<Masked>& window, int which, int rank, int step) {
  return which >= 0 ? window[which] : masked_batch(900 + 10 * rank + step, 4, 0);
}

// This rank's micro-steps of one window: num_items as a 0-dim tensor on even micro-steps and as a
// number on odd ones (both forms in one window).
template <typename Model>
void train_window(xlaunch::Accelerator& acc, Model& model, const std::vector<Masked>& window) {
  const std::vector<int> mine = spread(acc.num_processes(), acc.process_index());
  for (size_t k = 0; k < mine.size(); ++k) {
    acc.accumulate();
    const Masked b = micro_batch(window, mine[k], acc.process_index(), static_cast<int>(k));
    const at::Tensor loss_sum = loss_sum_of(model(b.x), b);
    if (k % 2 == 0) acc.backward(loss_sum, b.mask.sum());
    else acc.backward(loss_sum, static_cast<double>(b.items));
  }
}

// One process, one batch: the window's micro-batches concatenated, the loss the mean over its items.
inline void reference_backward(Mlp& reference, const std::vector<Masked>& window) {
  std::vector<at::Tensor> xs, ys, masks;
  for (const auto& b : window) {
    xs.push_back(b.x);
    ys.push_back(b.y);
    masks.push_back(b.mask);
  }
  const Masked all{at::cat(xs), at::cat(ys), at::cat(masks), 0};
  (loss_sum_of(reference(all.x), all) / all.mask.sum()).backward();
}

inline void clear_grads(torch::nn::Module& m) {
  for (auto& p : m.parameters()) p.mutable_grad().reset();
}

}  // namespace xlaunch::test
