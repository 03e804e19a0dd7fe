// Kornia's AugmentationSequential (sequential.h).
#include "xlaunch/augment/sequential.h"

#include <ATen/ops/empty.h>

#include <algorithm>
#include <atomic>
#include <sstream>
#include <tuple>

#include "augment/rows.h"
#include "xlaunch/error.h"

namespace xlaunch::augment {

namespace {

// How much of a batch a run of row-by-row transforms takes at a time on the CPU: about this many
// bytes of its widest images. A chunk then stays in the cache from one transform to the next,
// where the whole batch (19 MB at 32 x 3 x 224 x 224) goes out to memory and back in between
// (measured in one run, the guide's pipeline at 224 x 224 on 2 threads: 1,800 samples/s in 1 MB
// chunks, 1,600 in 4 MB ones, 1,240 in whole batches; at 32 x 32 the same within noise).
constexpr int64_t kChunkBytes = int64_t{1} << 20;

// Sets rows_on_this_thread_only (rows.h) for its lifetime: a chunk's transforms run on the thread
// that took it, the chunks being the parallelism.
class RowsOnThisThread {
 public:
  RowsOnThisThread() : before_(detail::rows_on_this_thread_only) { detail::rows_on_this_thread_only = true; }
  ~RowsOnThisThread() { detail::rows_on_this_thread_only = before_; }
  RowsOnThisThread(const RowsOnThisThread&) = delete;
  RowsOnThisThread& operator=(const RowsOnThisThread&) = delete;

 private:
  bool before_;
};

Params rows_of(const Params& p, int64_t start, int64_t count) {
  return {p.values.narrow(0, start, count), p.applied.narrow(0, start, count)};
}


// A row-by-row transform must give its rows the size output_size() said, the channels and the
// dtype it was given: the chunks' results are put together on that promise.
void check_row_by_row(const Transform& t, const at::Tensor& x, at::IntArrayRef expected, at::ScalarType dtype) {
  if (x.sizes() == expected && x.scalar_type() == dtype) return;
  std::ostringstream got, want;
  got << c10::toString(x.scalar_type()) << " " << x.sizes();
  want << c10::toString(dtype) << " " << expected;
  throw UsageError("augment::Sequential: " + t.name() + " says row_by_row() but gave " + got.str() + " where " +
                   want.str() + " was due (its input's channels and dtype, the size its output_size() gives); " +
                   "make row_by_row() return false for it, or output_size() return its size");
}

}  // namespace

Sequential::Sequential(std::vector<std::shared_ptr<Transform>> transforms) : transforms_(std::move(transforms)) {
  for (size_t i = 0; i < transforms_.size(); ++i) {
    if (!transforms_[i]) {
      throw UsageError("augment::Sequential: transform " + std::to_string(i) +
                       " is null; make it with augment::make(name, args)");
    }
  }
}

at::Tensor Sequential::operator()(const at::Tensor& images, const BatchKey& key) const {
  if (!images.defined() || images.dim() != 4 || images.size(0) != static_cast<int64_t>(key.ids.size())) {
    throw UsageError("augment::Sequential: the images must be [B, C, H, W] with B = " +
                     std::to_string(key.ids.size()) + " (one row per id of the BatchKey), got " +
                     (images.defined() ? std::to_string(images.dim()) + " dimensions" +
                                             (images.dim() > 0 ? " and " + std::to_string(images.size(0)) + " rows" : "")
                                       : std::string("an undefined tensor")));
  }
  at::Tensor out = images;
  size_t i = 0;
  while (i < transforms_.size()) {
    // A run of two or more row-by-row transforms on a CPU batch of several rows goes in chunks.
    size_t end = i;
    while (end < transforms_.size() && transforms_[end]->row_by_row()) ++end;
    if (end - i >= 2 && out.dim() == 4 && out.device().is_cpu() && out.size(0) > 1 &&
        at::isFloatingType(out.scalar_type())) {
      at::Tensor chunked = apply_in_chunks(out, key, i, end);
      if (chunked.defined()) {
        out = chunked;
        i = end;
        continue;
      }
      // A transform refused a chunk: the run is applied below to the whole batch, transform by
      // transform, and the refusal comes again, naming the batch's shape instead of a chunk's.
    } else {
      end = i + 1;
    }
    for (; i < end; ++i) {
      const Transform& t = *transforms_[i];
      out = t.apply(out, t.draw(key, static_cast<int>(i), out.size(2), out.size(3)));
    }
  }
  return out;
}

at::Tensor Sequential::apply_in_chunks(const at::Tensor& images, const BatchKey& key, size_t first,
                                       size_t last) const {
  // Every transform's draws for the whole batch first (as the whole batch would draw them), each
  // for the image size it receives.
  std::vector<Params> params;
  std::vector<std::pair<int64_t, int64_t>> sizes;  // each transform's output [height, width]
  int64_t h = images.size(2), w = images.size(3), widest = h * w;
  for (size_t k = first; k < last; ++k) {
    params.push_back(transforms_[k]->draw(key, static_cast<int>(k), h, w));
    std::tie(h, w) = transforms_[k]->output_size(h, w);
    sizes.emplace_back(h, w);
    widest = std::max(widest, h * w);
  }
  const int64_t rows = images.size(0), channels = images.size(1);
  // As many chunks as 1 MB pieces, at least one per thread, rows split evenly among them.
  const int64_t row_bytes = channels * widest * images.element_size();
  int64_t pieces = (rows * row_bytes + kChunkBytes - 1) / kChunkBytes;
  if (!detail::rows_on_this_thread_only) pieces = std::max<int64_t>(pieces, at::get_num_threads());
  pieces = std::clamp<int64_t>(pieces, 1, rows);
  const int64_t chunk = (rows + pieces - 1) / pieces;
  at::Tensor out = at::empty({rows, channels, h, w}, images.options().memory_format(at::MemoryFormat::Contiguous));
  std::atomic<bool> refused{false};
  detail::parallel_rows((rows + chunk - 1) / chunk, 1, [&](int64_t begin, int64_t end) {
    const RowsOnThisThread alone;
    for (int64_t c = begin; c < end && !refused.load(); ++c) {
      const int64_t start = c * chunk, count = std::min(chunk, rows - start);
      at::Tensor x = images.narrow(0, start, count);
      for (size_t k = first; k < last; ++k) {
        try {
          x = transforms_[k]->apply(x, rows_of(params[k - first], start, count));
        } catch (const UsageError&) {
          refused = true;
          return;
        }
        check_row_by_row(*transforms_[k], x, {count, channels, sizes[k - first].first, sizes[k - first].second},
                         images.scalar_type());
      }
      out.narrow(0, start, count).copy_(x);
    }
  });
  return refused.load() ? at::Tensor() : out;
}

}  // namespace xlaunch::augment
