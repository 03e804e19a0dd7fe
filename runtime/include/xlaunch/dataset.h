// What the Loader (loader.h) can read, and the batch it hands over.
//
// Two kinds of datasets plug in:
//  1. Any LibTorch dataset, unchanged: a torch::data::datasets::Dataset<Self, Example<>> with
//     get(index) and size() (torch::data::datasets::MNIST, FashionMnist, your own), or the result
//     of .map(transform) on one (MapDataset: get_batch(indices)), including .map(Stack<>()).
//     Each sample's tensors are copied into the rows of one contiguous batch tensor.
//  2. A RowDataset: writes each sample straight into its row of the collated batch, with no
//     per-sample tensor at all. The fast path for CPU-heavy augmentation.
//
// get(index) / write(index, ...) are called concurrently from the loader's worker threads, for
// distinct indices: they must not modify shared state, and must be deterministic in the index
// (draw random augmentation from an RNG seeded by the index, and the epoch if you like), so that
// the batches are the same whatever num_workers is.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "xlaunch/error.h"
#include "xlaunch/sampler.h"

namespace xlaunch {

// One collated batch, as the training loop receives it.
struct Batch {
  at::Tensor data;    // [rows, sample shape...] on the loader's device
  at::Tensor target;  // [rows, target shape...]; undefined when the dataset has no targets
  int64_t index = 0;  // the batch's number in the epoch (0-based, counting skipped batches)
  ShardSpan span;     // where its rows sit in the epoch: pass to gather_for_metrics
  int64_t size() const { return data.size(0); }
};

// A dataset sample failed to load: thrown in the training thread, whichever thread loaded it.
class SampleError : public Error {
 public:
  SampleError(int64_t index, const std::string& message);
  int64_t index() const { return index_; }  // the dataset index of the sample

 private:
  int64_t index_;
};

class RowDataset {
 public:
  struct Layout {
    std::vector<int64_t> data_shape;  // one sample, without the batch dim
    at::ScalarType data_dtype = at::kFloat;
    bool has_target = true;
    std::vector<int64_t> target_shape;  // {} for a scalar label
    at::ScalarType target_dtype = at::kLong;
  };

  virtual ~RowDataset() = default;
  virtual int64_t size() const = 0;
  virtual Layout layout() const = 0;
  // Writes sample `index` into data_row (contiguous, data_shape elements of data_dtype) and
  // target_row (likewise; nullptr when !has_target). Throw to report a bad sample.
  virtual void write(int64_t index, void* data_row, void* target_row) const = 0;
};

// Allocates the tensor a batch is collated into (pinned host memory when bound for a GPU).
using HostAllocator = std::function<at::Tensor(at::IntArrayRef sizes, at::ScalarType dtype)>;

namespace detail {

// A dataset, type-erased for the loader: its size, and how to collate a list of indices.
struct Source {
  int64_t size = 0;
  std::function<void(c10::ArrayRef<int64_t> indices, const HostAllocator& alloc, Batch& out)> collate;
};

// Must be called inside a catch block: rethrows the current exception as a SampleError for
// `index` (a SampleError passes through unchanged).
[[noreturn]] void throw_sample_error(int64_t index);
[[noreturn]] void throw_unsized_dataset();
// Copies each sample (equal shapes and dtypes, else UsageError) into a row of one tensor.
at::Tensor collate_rows(const std::vector<at::Tensor>& samples, c10::ArrayRef<int64_t> indices,
                        const HostAllocator& alloc, const char* what);
// An already collated tensor, moved into memory from `alloc`.
at::Tensor restage(const at::Tensor& t, const HostAllocator& alloc);

Source row_source(std::shared_ptr<const RowDataset> dataset);

template <typename T, typename = void>
struct has_get : std::false_type {};
template <typename T>
struct has_get<T, std::void_t<decltype(std::declval<T&>().get(size_t{}))>> : std::true_type {};
template <typename T, typename = void>
struct has_target : std::false_type {};
template <typename T>
struct has_target<T, std::void_t<decltype(std::declval<T&>().target)>> : std::true_type {};
template <typename T>
struct is_vector : std::false_type {};
template <typename T, typename A>
struct is_vector<std::vector<T, A>> : std::true_type {};

template <typename Examples>
void collate_examples(Examples& examples, c10::ArrayRef<int64_t> indices, const HostAllocator& alloc,
                      Batch& out) {
  std::vector<at::Tensor> data, target;
  data.reserve(examples.size());
  for (auto& ex : examples) {
    data.push_back(std::move(ex.data));
    if constexpr (has_target<std::decay_t<decltype(ex)>>::value) {
      static_assert(std::is_same_v<std::decay_t<decltype(ex.target)>, at::Tensor>,
                    "xlaunch::Loader collates Example<at::Tensor, at::Tensor> or TensorExample");
      target.push_back(std::move(ex.target));
    }
  }
  out.data = collate_rows(data, indices, alloc, "data");
  if (!target.empty()) out.target = collate_rows(target, indices, alloc, "target");
}

// A LibTorch dataset with get(index): one get() per sample.
template <typename D>
void collate_by_get(D& ds, c10::ArrayRef<int64_t> indices, const HostAllocator& alloc, Batch& out) {
  using ExampleT = std::decay_t<decltype(ds.get(size_t{}))>;
  std::vector<ExampleT> examples;
  examples.reserve(indices.size());
  for (const int64_t i : indices) {
    try {
      examples.push_back(ds.get(static_cast<size_t>(i)));
    } catch (...) {
      throw_sample_error(i);
    }
  }
  collate_examples(examples, indices, alloc, out);
}

// A LibTorch batch dataset (MapDataset...): one get_batch() per batch. When it throws, the
// samples are retried one by one to name the one that fails.
template <typename D>
void collate_by_get_batch(D& ds, c10::ArrayRef<int64_t> indices, const HostAllocator& alloc,
                          Batch& out) {
  using Request = typename D::BatchRequestType;
  const std::vector<size_t> all(indices.begin(), indices.end());
  auto call = [&ds](const size_t* first, const size_t* last) { return ds.get_batch(Request(first, last)); };
  typename D::BatchType result;
  try {
    result = call(all.data(), all.data() + all.size());
  } catch (...) {
    for (const size_t& i : all) {
      try {
        call(&i, &i + 1);
      } catch (...) {
        throw_sample_error(static_cast<int64_t>(i));
      }
    }
    throw_sample_error(indices.front());
  }
  if constexpr (is_vector<decltype(result)>::value) {
    collate_examples(result, indices, alloc, out);
  } else {  // already stacked (.map(Stack<>()))
    out.data = restage(result.data, alloc);
    if constexpr (has_target<decltype(result)>::value) out.target = restage(result.target, alloc);
  }
}

template <typename D>
Source torch_source(std::shared_ptr<D> ds) {
  const auto n = ds->size();
  if (!n.has_value()) throw_unsized_dataset();
  Source s;
  s.size = static_cast<int64_t>(*n);
  s.collate = [ds](c10::ArrayRef<int64_t> indices, const HostAllocator& alloc, Batch& out) {
    if constexpr (has_get<D>::value) {
      collate_by_get(*ds, indices, alloc, out);
    } else {
      collate_by_get_batch(*ds, indices, alloc, out);
    }
  };
  return s;
}

}  // namespace detail
}  // namespace xlaunch
