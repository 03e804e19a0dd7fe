#include "xlaunch/safetensors.h"

#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <tuple>

#include "state/durable_files.h"
#include "state/torch_state.h"
#include "xlaunch/error.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian; this code copies bytes as they are");

namespace fs = std::filesystem;
using OrderedJson = nlohmann::ordered_json;

namespace xlaunch {
namespace {

// The safetensors dtypes this reads and writes, and torch's types for them.
struct DtypeRow {
  const char* name;
  at::ScalarType type;
};
constexpr DtypeRow kDtypes[] = {
    {"F64", at::kDouble},  {"F32", at::kFloat},  {"F16", at::kHalf},
    {"BF16", at::kBFloat16}, {"F8_E4M3", at::kFloat8_e4m3fn}, {"F8_E5M2", at::kFloat8_e5m2},
    {"I64", at::kLong},    {"I32", at::kInt},    {"I16", at::kShort},
    {"I8", at::kChar},     {"U64", at::ScalarType::UInt64}, {"U32", at::ScalarType::UInt32},
    {"U16", at::ScalarType::UInt16}, {"U8", at::kByte}, {"BOOL", at::kBool},
};

const DtypeRow* row_of(at::ScalarType t) {
  for (const auto& r : kDtypes)
    if (r.type == t) return &r;
  return nullptr;
}

const DtypeRow* row_of(const std::string& name) {
  for (const auto& r : kDtypes)
    if (name == r.name) return &r;
  return nullptr;
}

// The reference implementation's limit: a larger header is taken for a corrupt or hostile file.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

durable::SaveHook notify;  // set_save_hook

using durable::fsync_dir;
using durable::throw_io;
using durable::write_all;
using durable::write_new_file;

int64_t nbytes_of(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// ---- sizes and plans -----------------------------------------------------------------------

[[noreturn]] void bad_size(const std::string& text, const std::string& why) {
  throw UsageError("'" + text + "' is not a size" + why +
                   "; write bytes (\"4096\") or a number with a unit: KB, MB, GB, TB (powers of 1000) or "
                   "KiB, MiB, GiB, TiB (powers of 1024), e.g. \"5GB\" or \"500MiB\"");
}

// ---- checks before writing -----------------------------------------------------------------

void check_tensor(const std::string& name, const at::Tensor& t) {
  const std::string what = "save_safetensors: tensor '" + name + "' ";
  if (!t.defined()) throw UsageError(what + "is undefined; pass only tensors that hold values");
  if (t.is_meta()) throw UsageError(what + "is on the meta device and has no values; materialize the model first");
  if (t.layout() != at::kStrided)
    throw UsageError(what + "is not dense (layout " + c10::str(t.layout()) +
                     "); safetensors stores dense tensors: pass t.to_dense()");
  if (!row_of(t.scalar_type()))
    throw UsageError(what + "has dtype " + std::string(at::toString(t.scalar_type())) +
                     ", which safetensors cannot store (it has no complex or quantized types); convert it "
                     "(e.g. torch::view_as_real for complex, dequantize() for quantized) before saving");
}

void check_names(const NamedTensors& tensors) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw UsageError("save_safetensors: a tensor has an empty name; give every tensor a name");
    if (name == "__metadata__")
      throw UsageError("save_safetensors: '__metadata__' is the safetensors header's metadata entry and cannot name a "
                       "tensor; rename it");
    if (!seen.insert(name).second)
      throw UsageError("save_safetensors: two tensors are named '" + name + "'; names must be unique");
    check_tensor(name, t);
  }
}

// The bytes a tensor's elements span in its storage: [first, one past the last).
std::pair<uintptr_t, uintptr_t> span_of(const at::Tensor& t) {
  const auto begin = reinterpret_cast<uintptr_t>(t.data_ptr());
  int64_t last = 0;
  for (int64_t d = 0; d < t.dim(); ++d) last += (t.size(d) - 1) * t.stride(d);
  return {begin, begin + static_cast<uintptr_t>((last + 1) * static_cast<int64_t>(t.element_size()))};
}

// Overlapping memory (tied weights, a tensor and its view) is refused, as safetensors.torch
// does: the file would hold two independent copies. Disjoint parts of one storage are fine.
void check_not_shared(const NamedTensors& tensors) {
  struct Span {
    std::string device;
    uintptr_t begin, end;
    const std::string* name;
    bool operator<(const Span& o) const { return std::tie(device, begin, end) < std::tie(o.device, o.begin, o.end); }
  };
  std::vector<Span> spans;
  for (const auto& [name, t] : tensors)
    if (t.numel() > 0 && t.has_storage()) {
      const auto [begin, end] = span_of(t);
      spans.push_back({t.device().str(), begin, end, &name});
    }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i)
    if (spans[i].device == spans[i - 1].device && spans[i].begin < spans[i - 1].end)
      throw UsageError("save_safetensors: tensors '" + *spans[i - 1].name + "' and '" + *spans[i].name +
                       "' share memory (tied weights, or one is a view of the other). The file would hold two "
                       "copies and loading it would untie them. Pass only one of the names (transformers re-ties "
                       "such weights on load), or clone() one if they are meant to be separate");
}

// ---- writing -------------------------------------------------------------------------------

std::string hidden_temporary(const std::string& file) { return "." + file + ".tmp-" + std::to_string(::getpid()); }

bool is_stale_temporary(const std::string& name) {
  static const std::regex pattern(R"(\.model[^/]*\.(safetensors|json)\.tmp-[0-9]+)");
  return std::regex_match(name, pattern);
}

bool is_shard_name(const std::string& name) {
  static const std::regex pattern(R"(model-[0-9]{5}-of-[0-9]{5}\.safetensors)");
  return std::regex_match(name, pattern);
}

// The header of a file holding `tensors` in this order, padded with spaces to a multiple of 8.
std::string header_of(const std::vector<const std::pair<std::string, at::Tensor>*>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  OrderedJson header;
  header["__metadata__"]["format"] = "pt";
  for (const auto& [key, value] : metadata)
    if (key != "format") header["__metadata__"][key] = value;
  int64_t offset = 0;
  for (const auto* entry : tensors) {
    const at::Tensor& t = entry->second;
    const int64_t end = offset + nbytes_of(t);
    header[entry->first] = {{"dtype", row_of(t.scalar_type())->name}, {"shape", t.sizes().vec()},
                            {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    throw UsageError(std::string("save_safetensors: a tensor name or metadata entry is not valid UTF-8 (") + e.what() +
                     "); safetensors headers are JSON, which holds UTF-8 text only");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  return text;
}

void write_safetensors_file(const fs::path& path, const NamedTensors& tensors, const std::vector<size_t>& indices,
                            const std::map<std::string, std::string>& metadata) {
  std::vector<const std::pair<std::string, at::Tensor>*> order;
  for (size_t i : indices) order.push_back(&tensors[i]);
  std::stable_sort(order.begin(), order.end(), [](const auto* a, const auto* b) {
    const size_t sa = a->second.element_size(), sb = b->second.element_size();
    return sa != sb ? sa > sb : a->first < b->first;
  });
  const std::string header = header_of(order, metadata);
  write_new_file(path, [&](int fd) {
    const uint64_t length = header.size();
    write_all(fd, &length, sizeof length, path);
    write_all(fd, header.data(), header.size(), path);
    for (const auto* entry : order) {
      const at::Tensor cpu = entry->second.detach().to(at::kCPU).contiguous();
      write_all(fd, cpu.data_ptr(), static_cast<size_t>(nbytes_of(cpu)), path);
    }
  });
}

std::string index_json(const NamedTensors& tensors, const std::vector<std::vector<size_t>>& shards) {
  nlohmann::json weight_map = nlohmann::json::object();
  int64_t total = 0;
  for (size_t s = 0; s < shards.size(); ++s)
    for (size_t i : shards[s]) {
      weight_map[tensors[i].first] = shard_file_name(s, shards.size());
      total += nbytes_of(tensors[i].second);
    }
  const nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  return index.dump(2) + "\n";
}

// Removes `name` in `dir` when it is a regular file of this user's; anything else is left.
bool remove_own_file(const fs::path& dir, const std::string& name) {
  const fs::path path = dir / name;
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) return false;
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw_io("cannot remove", path);
  return true;
}

std::vector<std::string> entries_of(const fs::path& dir) {
  if (::access(dir.c_str(), F_OK) != 0) throw_io("cannot list", dir);
  return durable::entries(dir);
}

// Temporaries renamed when their files are in place; the rest are removed when a save fails.
struct Temporaries {
  fs::path dir;
  std::vector<std::string> names;
  ~Temporaries() {
    for (const auto& n : names) ::unlink((dir / n).c_str());
  }
};

void rename_into_place(const fs::path& dir, const std::string& temp, const std::string& file) {
  if (::rename((dir / temp).c_str(), (dir / file).c_str()) != 0) throw_io("cannot rename " + temp + " to", dir / file);
}

// ---- reading -------------------------------------------------------------------------------

struct OpenFile {
  int fd = -1;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

void read_exactly(int fd, void* data, size_t size, uint64_t offset, const fs::path& path) {
  char* p = static_cast<char*>(data);
  while (size > 0) {
    const ssize_t n = ::pread(fd, p, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw_io("cannot read", path);
    if (n == 0) throw UsageError("load_safetensors: " + path.string() + " ended early (was it truncated?)");
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

struct Entry {
  std::string name;
  const DtypeRow* dtype;
  std::vector<int64_t> shape;
  uint64_t begin, end;
};

// One header entry, checked: a known dtype, a shape of sizes, offsets whose length fits both.
Entry parse_entry(const std::string& name, const nlohmann::json& info, const fs::path& path) {
  const auto bad = [&](const std::string& why) {
    return UsageError("load_safetensors: " + path.string() + " is not a valid safetensors file: tensor '" + name +
                      "' " + why);
  };
  if (!info.is_object() || !info.contains("dtype") || !info.contains("shape") || !info.contains("data_offsets"))
    throw bad("lacks one of dtype, shape, data_offsets");
  const auto& dtype = info["dtype"];
  const DtypeRow* row = dtype.is_string() ? row_of(dtype.get<std::string>()) : nullptr;
  if (!row) throw bad("has dtype " + dtype.dump() + ", which this reader does not support");
  Entry e{name, row, {}, 0, 0};
  uint64_t bytes = c10::elementSize(row->type);
  if (!info["shape"].is_array()) throw bad("has a shape that is not a list");
  for (const auto& size : info["shape"]) {
    if (!size.is_number_unsigned()) throw bad("has a shape entry that is not a whole number >= 0: " + size.dump());
    const uint64_t s = size.get<uint64_t>();
    if (s > static_cast<uint64_t>(INT64_MAX) || __builtin_mul_overflow(bytes, s, &bytes)) throw bad("is too large");
    e.shape.push_back(static_cast<int64_t>(s));
  }
  const auto& offsets = info["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2 || !offsets[0].is_number_unsigned() ||
      !offsets[1].is_number_unsigned())
    throw bad("has data_offsets that are not two whole numbers: " + offsets.dump());
  e.begin = offsets[0].get<uint64_t>();
  e.end = offsets[1].get<uint64_t>();
  if (e.end < e.begin || e.end - e.begin != bytes)
    throw bad("has data_offsets " + offsets.dump() + " for " + std::to_string(bytes) + " bytes of " + row->name +
              " data");
  return e;
}

NamedTensors read_file(const fs::path& path) {
  OpenFile f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block us
  if (f.fd < 0)
    throw UsageError("load_safetensors: cannot open " + path.string() + ": " + std::strerror(errno) +
                     "; pass a .safetensors file or the directory save_model wrote");
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw_io("cannot stat", path);
  const auto invalid = [&](const std::string& why) {
    return UsageError("load_safetensors: " + path.string() + " is not a valid safetensors file: " + why);
  };
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (!S_ISREG(st.st_mode)) throw invalid("it is not a regular file");
  if (size < 8) throw invalid("it has " + std::to_string(size) + " bytes, fewer than the 8 of its header length");
  uint64_t header_length = 0;
  read_exactly(f.fd, &header_length, 8, 0, path);
  if (header_length > kMaxHeaderBytes || header_length > size - 8)
    throw invalid("its header length is " + std::to_string(header_length) + " bytes, and the file has " +
                  std::to_string(size) + " (at most 100 MB of header is read)");
  std::string text(header_length, '\0');
  read_exactly(f.fd, text.data(), text.size(), 8, path);
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw invalid(std::string("its header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) throw invalid("its header is not a JSON object");
  std::vector<Entry> entries;
  for (const auto& [name, info] : header.items()) {
    if (name != "__metadata__") {
      entries.push_back(parse_entry(name, info, path));
      continue;
    }
    if (!info.is_object()) throw invalid("its __metadata__ is not an object of strings");
    for (const auto& [key, value] : info.items())
      if (!value.is_string()) throw invalid("its __metadata__ entry '" + key + "' is not a string");
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.begin, a.end) < std::tie(b.begin, b.end);
  });
  const uint64_t data_start = 8 + header_length, data_size = size - data_start;
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    if (e.begin != expected)
      throw invalid("tensor '" + e.name + "' starts at data offset " + std::to_string(e.begin) + ", not at " +
                    std::to_string(expected) + " where the previous one ended (tensors must tile the data)");
    expected = e.end;
  }
  if (expected != data_size)
    throw invalid("its tensors cover " + std::to_string(expected) + " bytes of data, and the file holds " +
                  std::to_string(data_size) + " after the header");
  NamedTensors out;
  for (const Entry& e : entries) {
    at::Tensor t = at::empty(e.shape, at::TensorOptions().dtype(e.dtype->type));
    read_exactly(f.fd, t.data_ptr(), static_cast<size_t>(e.end - e.begin), data_start + e.begin, path);
    out.emplace_back(e.name, std::move(t));
  }
  return out;
}

// A directory with an index: every shard it names, each holding exactly the tensors mapped to it.
NamedTensors read_sharded(const fs::path& dir) {
  const fs::path index_path = dir / kSafetensorsIndexFile;
  const auto invalid = [&](const std::string& why) {
    return UsageError("load_safetensors: " + index_path.string() + " is not a valid index: " + why);
  };
  std::string text;
  {
    OpenFile f;
    f.fd = ::open(index_path.c_str(), O_RDONLY | O_CLOEXEC);
    if (f.fd < 0) throw_io("cannot open", index_path);
    struct stat st {};
    if (::fstat(f.fd, &st) != 0) throw_io("cannot stat", index_path);
    if (static_cast<uint64_t>(st.st_size) > kMaxHeaderBytes) throw invalid("it is larger than 100 MB");
    text.resize(static_cast<size_t>(st.st_size));
    read_exactly(f.fd, text.data(), text.size(), 0, index_path);
  }
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw invalid(std::string("it is not JSON (") + e.what() + ")");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
    throw invalid("it has no \"weight_map\" object");
  std::map<std::string, std::string> file_of;
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) {
    if (!file.is_string()) throw invalid("the file of '" + name + "' is not a string");
    const std::string f = file.get<std::string>();
    if (f.empty() || f == "." || f == ".." || f.find('/') != std::string::npos)
      throw invalid("it maps '" + name + "' to '" + f + "', which is not a file name in " + dir.string());
    file_of[name] = f;
    files.insert(f);
  }
  NamedTensors out;
  for (const std::string& file : files)
    for (auto& [name, t] : read_file(dir / file)) {
      const auto it = file_of.find(name);
      if (it == file_of.end() || it->second != file)
        throw invalid("shard " + file + " holds tensor '" + name + "', which the index " +
                      (it == file_of.end() ? "does not list" : "maps to " + it->second) +
                      " (the shards and the index are of different saves; save again)");
      file_of.erase(it);
      out.emplace_back(name, std::move(t));
    }
  if (!file_of.empty())
    throw invalid("it maps '" + file_of.begin()->first + "' to " + file_of.begin()->second +
                  ", which does not hold it (the shards and the index are of different saves; save again)");
  return out;
}

// "a, b, c and 4 more"
std::string first_names(const std::vector<std::string>& names) {
  constexpr size_t kShown = 5;
  std::string out;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > kShown) out += " and " + std::to_string(names.size() - kShown) + " more";
  return out;
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

void set_safetensors_save_hook(std::function<void(const std::string&)> hook) { notify.set(std::move(hook)); }

void save_safetensors(const NamedTensors& tensors, const std::string& dir_text, int64_t max_shard_bytes,
                      const std::map<std::string, std::string>& metadata) {
  if (dir_text.empty()) throw UsageError("save_safetensors: the directory is empty; pass one, such as \"model\"");
  if (max_shard_bytes <= 0)
    throw UsageError("save_safetensors: max_shard_bytes is " + std::to_string(max_shard_bytes) +
                     "; pass a positive size, such as parse_size(\"5GB\")");
  const auto format = metadata.find("format");
  if (format != metadata.end() && format->second != "pt")
    throw UsageError("save_safetensors: metadata \"format\" is '" + format->second +
                     "'; it must be \"pt\" (transformers refuses other values for torch weights). Drop that key");
  check_names(tensors);
  check_not_shared(tensors);

  std::vector<int64_t> bytes;
  for (const auto& entry : tensors) bytes.push_back(nbytes_of(entry.second));
  std::vector<std::vector<size_t>> shards = plan_shards(bytes, max_shard_bytes);
  const bool sharded = shards.size() > 1;
  if (shards.empty()) shards.emplace_back();  // no tensors: one file with the metadata alone
  std::vector<std::string> files;
  for (size_t s = 0; s < shards.size(); ++s) files.push_back(sharded ? shard_file_name(s, shards.size()) : kSafetensorsFile);

  const fs::path dir = fs::path(dir_text);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    throw Error("save_safetensors: cannot create the directory " + dir.string() + ": " +
                (ec ? ec.message() : "a file of that name exists"));
  for (const auto& name : entries_of(dir))
    if (is_stale_temporary(name)) remove_own_file(dir, name);

  Temporaries temps{dir, {}};
  for (size_t s = 0; s < shards.size(); ++s) {
    temps.names.push_back(hidden_temporary(files[s]));
    write_safetensors_file(dir / temps.names.back(), tensors, shards[s], metadata);
    notify("wrote " + files[s]);
  }
  fsync_dir(dir);
  // From here until the new index is written, no index names a file: a crash leaves no mix of saves.
  if (sharded)
    for (const char* previous : {kSafetensorsIndexFile, kSafetensorsFile})
      if (remove_own_file(dir, previous)) {
        fsync_dir(dir);
        notify(std::string("removed ") + previous);
      }
  for (size_t s = 0; s < files.size(); ++s) {
    rename_into_place(dir, temps.names[s], files[s]);
    notify("renamed " + files[s]);
  }
  temps.names.clear();
  fsync_dir(dir);
  if (sharded) {
    const std::string index = index_json(tensors, shards);
    temps.names.push_back(hidden_temporary(kSafetensorsIndexFile));
    write_new_file(dir / temps.names.back(), [&](int fd) { write_all(fd, index.data(), index.size(), dir); });
    rename_into_place(dir, temps.names.back(), kSafetensorsIndexFile);
    temps.names.clear();
    fsync_dir(dir);
    notify(std::string("wrote ") + kSafetensorsIndexFile);
  }
  // The previous index goes before its shards: an index, when present, names only files that exist.
  bool removed = !sharded && remove_own_file(dir, kSafetensorsIndexFile);
  if (removed) notify(std::string("removed ") + kSafetensorsIndexFile);
  const std::set<std::string> kept(files.begin(), files.end());
  for (const auto& name : entries_of(dir))
    if (is_shard_name(name) && !kept.count(name) && remove_own_file(dir, name)) {
      removed = true;
      notify("removed " + name);
    }
  if (removed) fsync_dir(dir);
}

NamedTensors load_safetensors(const std::string& path_text) {
  if (path_text.empty()) throw UsageError("load_safetensors: the path is empty; pass a .safetensors file or a directory");
  const fs::path path(path_text);
  if (!fs::is_directory(path)) return read_file(path);
  if (fs::exists(path / kSafetensorsFile)) return read_file(path / kSafetensorsFile);
  if (fs::exists(path / kSafetensorsIndexFile)) return read_sharded(path);
  throw UsageError("load_safetensors: " + path.string() + " holds neither " + kSafetensorsFile + " nor " +
                   kSafetensorsIndexFile + " (was its save interrupted?); pass the directory save_model wrote, or a "
                   ".safetensors file");
}

void load_model(torch::nn::Module& module, const std::string& dir, bool strict) {
  const NamedTensors saved = load_safetensors(dir);
  const NamedTensors mine = model_state(module);
  std::map<std::string, const at::Tensor*> saved_by_name;
  for (const auto& [name, t] : saved) saved_by_name[name] = &t;
  std::vector<std::string> missing, unexpected, mismatched;
  std::set<std::string> known;
  for (const auto& [name, t] : mine) {
    known.insert(name);
    const auto it = saved_by_name.find(name);
    if (it == saved_by_name.end())
      missing.push_back(name);
    else if (it->second->sizes() != t.sizes() || it->second->scalar_type() != t.scalar_type())
      mismatched.push_back(name + " (file " + describe(*it->second) + ", model " + describe(t) + ")");
  }
  for (const auto& [name, t] : saved)
    if (!known.count(name)) unexpected.push_back(name);
  std::string problems;
  if (strict && !missing.empty()) problems += "\n  missing from the file: " + first_names(missing);
  if (strict && !unexpected.empty()) problems += "\n  in the file, not in the model: " + first_names(unexpected);
  if (!mismatched.empty()) problems += "\n  shape or dtype differs: " + first_names(mismatched);
  if (!problems.empty())
    throw UsageError("load_model: " + dir + " does not fit the model (" + module.name() + "):" + problems +
                     "\nBuild the model the weights were saved from (same constructor arguments and dtype), or "
                     "pass strict=false to skip names that only one side has");
  c10::NoGradGuard no_grad;
  for (const auto& [name, t] : mine) {
    const auto it = saved_by_name.find(name);
    if (it != saved_by_name.end()) at::Tensor(t).copy_(*it->second);
  }
}

}  // namespace xlaunch
