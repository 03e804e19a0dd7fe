#include "xlaunch/fashion_mnist.h"

#include <ATen/ops/empty.h>
#include <zlib.h>

#include <cstring>
#include <memory>
#include <vector>

#include "xlaunch/error.h"

namespace xlaunch {
namespace {

constexpr int kIdxUint8 = 0x08;

[[noreturn]] void bad_file(const std::string& path, const std::string& problem) {
  throw UsageError("Fashion-MNIST file " + path + " " + problem +
                   "; reinstall the Debian package dataset-fashion-mnist (apt-get install --reinstall "
                   "dataset-fashion-mnist)");
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};

void read_exact(gzFile f, void* dst, size_t n, const std::string& path) {
  auto* p = static_cast<char*>(dst);
  while (n > 0) {
    const unsigned chunk = static_cast<unsigned>(std::min<size_t>(n, 1u << 30));
    const int got = gzread(f, p, chunk);
    if (got < 0) {
      int code = 0;
      bad_file(path, std::string("could not be decompressed (zlib: ") + gzerror(f, &code) + ")");
    }
    if (got == 0) bad_file(path, "is truncated");
    p += got;
    n -= static_cast<size_t>(got);
  }
}

uint32_t big_endian(const unsigned char* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

}  // namespace

at::Tensor read_idx_file(const std::string& path) {
  // gzopen reads uncompressed files transparently.
  std::unique_ptr<gzFile_s, GzCloser> f(gzopen(path.c_str(), "rb"));
  if (!f)
    throw UsageError("Fashion-MNIST file " + path + " not found: install the Debian package "
                     "dataset-fashion-mnist (apt-get install dataset-fashion-mnist), or pass the "
                     "directory that holds the four *-ubyte.gz files");
  unsigned char magic[4];
  read_exact(f.get(), magic, 4, path);
  if (magic[0] != 0 || magic[1] != 0 || magic[2] != kIdxUint8 || magic[3] < 1 || magic[3] > 4)
    bad_file(path, "is not an IDX file of unsigned bytes");
  std::vector<int64_t> dims(magic[3]);
  for (auto& d : dims) {
    unsigned char b[4];
    read_exact(f.get(), b, 4, path);
    d = big_endian(b);
  }
  at::Tensor out = at::empty(dims, at::kByte);
  read_exact(f.get(), out.data_ptr(), static_cast<size_t>(out.numel()), path);
  return out;
}

FashionMnist::FashionMnist(Split split, const std::string& root) {
  const std::string prefix = root + (split == Split::Train ? "/train" : "/t10k");
  images_ = read_idx_file(prefix + "-images-idx3-ubyte.gz");
  const at::Tensor labels = read_idx_file(prefix + "-labels-idx1-ubyte.gz");
  if (images_.dim() != 3 || images_.size(1) != 28 || images_.size(2) != 28)
    bad_file(prefix + "-images-idx3-ubyte.gz", "does not hold 28x28 images");
  if (labels.dim() != 1 || labels.size(0) != images_.size(0))
    bad_file(prefix + "-labels-idx1-ubyte.gz", "does not hold one label per image (" +
                                                   std::to_string(images_.size(0)) + " images)");
  targets_ = labels.to(at::kLong);
  if (targets_.numel() > 0 && targets_.max().item<int64_t>() > 9)
    bad_file(prefix + "-labels-idx1-ubyte.gz", "holds labels outside 0..9");
}

torch::data::Example<> FashionMnist::get(size_t index) {
  const auto i = static_cast<int64_t>(index);
  if (i >= images_.size(0))
    throw UsageError("FashionMnist::get: index " + std::to_string(i) + " is out of range (size " +
                     std::to_string(images_.size(0)) + ")");
  at::Tensor image = at::empty({1, 28, 28}, at::kFloat);
  const uint8_t* src = images_.data_ptr<uint8_t>() + i * 28 * 28;
  float* dst = image.data_ptr<float>();
  for (int k = 0; k < 28 * 28; ++k) dst[k] = static_cast<float>(src[k]) * (1.0f / 255.0f);
  return {image, targets_[i]};
}

std::optional<size_t> FashionMnist::size() const { return static_cast<size_t>(images_.size(0)); }

const char* FashionMnist::class_name(int64_t label) {
  static const char* const kNames[] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                       "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};
  if (label < 0 || label > 9) throw UsageError("FashionMnist::class_name: label " + std::to_string(label) + " is not in 0..9");
  return kNames[label];
}

}  // namespace xlaunch
