// The safetensors format itself (xlaunch/safetensors.h describes it): the dtypes by their
// safetensors names, and the JSON header, built for the writer (safetensors_save.cpp) and parsed
// and checked for the reader (safetensors_load.cpp). No file I/O here.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "xlaunch/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; this code copies bytes as they are");

namespace xlaunch::safetensors {

namespace fs = std::filesystem;

// A safetensors dtype and torch's type for it.
struct DtypeRow {
  const char* name;
  at::ScalarType type;
};

// The row of a torch type, or of a safetensors name; nullptr when safetensors (or this reader)
// has none.
const DtypeRow* row_of(at::ScalarType t);
const DtypeRow* row_of(const std::string& name);

// The reference implementation's limit: a larger header is taken for a corrupt or hostile file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

int64_t nbytes_of(const at::Tensor& t);

// The header of a file holding `tensors` in this order, padded with spaces to a multiple of 8:
// "__metadata__" holds "format": "pt" and `metadata`. UsageError when a name is not UTF-8.
std::string header_of(const std::vector<const std::pair<std::string, at::Tensor>*>& tensors,
                      const std::map<std::string, std::string>& metadata);

// "load_safetensors: <path> is not a valid safetensors file: <why>"
UsageError invalid_file(const fs::path& path, const std::string& why);

// One tensor of a header: where its bytes lie in the data after the header, [begin, end).
struct Entry {
  std::string name;
  const DtypeRow* dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// The entries of the header `text` of the file `path`, in data order, checked as the reference
// reader checks them: JSON, an object of string metadata and of tensors with a known dtype, a shape
// of sizes and offsets whose length fits both, tiling the data_size bytes that follow the header
// exactly. Throws invalid_file for the first problem.
std::vector<Entry> parse_header(const std::string& text, uint64_t data_size, const fs::path& path);

// Reads `length` bytes at `offset` of one file into `dst`; throws when it cannot.
using ReadAt = std::function<void(uint64_t offset, uint64_t length, void* dst)>;

// A file's entries (parse_header) and where its data starts.
struct Index {
  uint64_t data_start = 0;
  std::vector<Entry> entries;
};

// The index of the safetensors file `path` of `size` bytes, whose header is read through `read`
// (the data is not read): the header length checked against the file and kMaxHeaderBytes, then
// parse_header. Throws invalid_file.
Index read_index(uint64_t size, const ReadAt& read, const fs::path& path);

// The bytes of one safetensors file holding `tensors` (no metadata but "format"), in memory: the
// sharded checkpoints' rank files (state/model_shards.h). Throws save_safetensors' UsageErrors.
std::string file_bytes(const std::vector<std::pair<std::string, at::Tensor>>& tensors);

}  // namespace xlaunch::safetensors
