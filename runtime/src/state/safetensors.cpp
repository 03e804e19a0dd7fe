// The pure decisions of a save: sizes as Hugging Face tools write them, which tensors go in which
// shard, and the shards' names. The writing is safetensors_save.cpp; the reading,
// safetensors_load.cpp; the format itself, safetensors_format.cpp.
#include "xlaunch/safetensors.h"

#include <cctype>
#include <cstdio>
#include <regex>

#include "xlaunch/error.h"

namespace xlaunch {
namespace {

[[noreturn]] void bad_size(const std::string& text, const std::string& why) {
  throw UsageError("'" + text + "' is not a size" + why +
                   "; write bytes (\"4096\") or a number with a unit: KB, MB, GB, TB (powers of 1000) or "
                   "KiB, MiB, GiB, TiB (powers of 1024), e.g. \"5GB\" or \"500MiB\"");
}

}  // namespace

int64_t parse_size(const std::string& text) {
  // number, its decimals, the unit: prefix, "i", "B"
  static const std::regex pattern(R"(\s*([0-9]{1,19})(\.([0-9]{1,18}))?\s*(([kKmMgGtT])([iI])?)?([bB])?\s*)");
  std::smatch m;
  if (!std::regex_match(text, m, pattern)) bad_size(text, "");
  if (m[7].matched && m[7] == "b") bad_size(text, " (\"b\" means bits to some tools; bytes are \"B\")");
  if (m[4].matched && !m[7].matched) bad_size(text, " (the unit lacks its \"B\")");
  // Exact decimal arithmetic: "0.1KB" is 100 bytes, not 100.000000001.
  const std::string decimals = m[3].str();
  __int128 value = 0, divisor = 1, factor = 1;
  for (char digit : m[1].str() + decimals) value = value * 10 + (digit - '0');  // at most 37 digits
  for (size_t i = 0; i < decimals.size(); ++i) divisor *= 10;
  if (m[5].matched) {
    const int power = static_cast<int>(std::string("kmgt").find(static_cast<char>(std::tolower(m[5].str()[0])))) + 1;
    for (int i = 0; i < power; ++i) factor *= m[6].matched ? 1024 : 1000;
  }
  value *= factor;
  if (value == 0 || value % divisor != 0 || value / divisor > INT64_MAX) bad_size(text, " of whole positive bytes");
  return static_cast<int64_t>(value / divisor);
}

std::vector<std::vector<size_t>> plan_shards(const std::vector<int64_t>& tensor_bytes, int64_t max_shard_bytes) {
  if (max_shard_bytes <= 0) throw UsageError("plan_shards: max_shard_bytes must be > 0");
  std::vector<std::vector<size_t>> shards;
  std::vector<size_t> current;
  int64_t current_bytes = 0;
  for (size_t i = 0; i < tensor_bytes.size(); ++i) {
    const int64_t bytes = tensor_bytes[i];
    if (bytes > max_shard_bytes) {
      shards.push_back({i});
      continue;
    }
    if (current_bytes + bytes > max_shard_bytes) {
      shards.push_back(std::move(current));
      current.clear();
      current_bytes = 0;
    }
    current.push_back(i);
    current_bytes += bytes;
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

std::string shard_file_name(size_t index, size_t count) {
  char name[64];
  std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return name;
}

}  // namespace xlaunch
