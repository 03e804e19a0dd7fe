#include "xlaunch/dataset.h"

#include <c10/core/ScalarType.h>

#include <cstring>
#include <sstream>

namespace xlaunch {

SampleError::SampleError(int64_t index, const std::string& message)
    : Error(message), index_(index) {}

namespace detail {
namespace {

std::string shape_text(const at::Tensor& t) {
  std::ostringstream os;
  os << t.sizes() << " " << t.scalar_type();
  return os.str();
}

int64_t numel_of(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

}  // namespace

void throw_sample_error(int64_t index) {
  try {
    throw;
  } catch (const SampleError&) {
    throw;
  } catch (const std::exception& e) {
    throw SampleError(index, "loading dataset sample " + std::to_string(index) + " failed: " + e.what());
  } catch (...) {
    throw SampleError(index, "loading dataset sample " + std::to_string(index) +
                                 " failed with a non-standard exception");
  }
}

void throw_unsized_dataset() {
  throw UsageError("Loader: the dataset's size() returned no value (a stream dataset); xlaunch's "
                   "loader shards datasets by index and needs one with a known size");
}

at::Tensor collate_rows(const std::vector<at::Tensor>& samples, c10::ArrayRef<int64_t> indices,
                        const HostAllocator& alloc, const char* what) {
  const at::Tensor& first = samples.front();
  for (size_t i = 1; i < samples.size(); ++i) {
    if (samples[i].sizes() != first.sizes() || samples[i].scalar_type() != first.scalar_type())
      throw UsageError(std::string("Loader: the ") + what + " of sample " + std::to_string(indices[i]) +
                       " is " + shape_text(samples[i]) + " but that of sample " +
                       std::to_string(indices[0]) + " is " + shape_text(first) +
                       "; a batch is one contiguous tensor, so every sample needs the same shape and "
                       "dtype (resize, crop or pad in the dataset)");
  }
  std::vector<int64_t> shape{static_cast<int64_t>(samples.size())};
  shape.insert(shape.end(), first.sizes().begin(), first.sizes().end());
  at::Tensor out = alloc(shape, first.scalar_type());
  const size_t row_bytes = static_cast<size_t>(first.numel()) * first.element_size();
  auto* dst = static_cast<char*>(out.data_ptr());
  for (size_t i = 0; i < samples.size(); ++i) {
    const at::Tensor& s = samples[i];
    if (s.device().is_cpu() && s.is_contiguous())
      std::memcpy(dst + i * row_bytes, s.data_ptr(), row_bytes);
    else
      out.select(0, static_cast<int64_t>(i)).copy_(s);
  }
  return out;
}

at::Tensor restage(const at::Tensor& t, const HostAllocator& alloc) {
  at::Tensor out = alloc(t.sizes(), t.scalar_type());
  out.copy_(t);
  return out;
}

Source row_source(std::shared_ptr<const RowDataset> ds) {
  if (!ds) throw UsageError("Loader: the RowDataset pointer is null");
  Source s;
  s.size = ds->size();
  const RowDataset::Layout layout = ds->layout();
  s.collate = [ds, layout](c10::ArrayRef<int64_t> indices, const HostAllocator& alloc, Batch& out) {
    const auto rows = static_cast<int64_t>(indices.size());
    std::vector<int64_t> dshape{rows}, tshape{rows};
    dshape.insert(dshape.end(), layout.data_shape.begin(), layout.data_shape.end());
    tshape.insert(tshape.end(), layout.target_shape.begin(), layout.target_shape.end());
    out.data = alloc(dshape, layout.data_dtype);
    if (layout.has_target) out.target = alloc(tshape, layout.target_dtype);
    const size_t drow = numel_of(layout.data_shape) * c10::elementSize(layout.data_dtype);
    const size_t trow = numel_of(layout.target_shape) * c10::elementSize(layout.target_dtype);
    auto* d = static_cast<char*>(out.data.data_ptr());
    auto* t = layout.has_target ? static_cast<char*>(out.target.data_ptr()) : nullptr;
    for (int64_t i = 0; i < rows; ++i) {
      try {
        ds->write(indices[i], d + i * drow, t ? t + i * trow : nullptr);
      } catch (...) {
        throw_sample_error(indices[i]);
      }
    }
  };
  return s;
}

}  // namespace detail
}  // namespace xlaunch
