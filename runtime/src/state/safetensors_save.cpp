// Writing safetensors weights (save_safetensors): the checks made before anything is written, the
// files under hidden temporary names, and their renaming into place so that a crash never leaves a
// mix of two saves.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <tuple>

#include "state/durable_files.h"
#include "state/safetensors_format.h"
#include "state/torch_state.h"
#include "xlaunch/safetensors.h"

namespace fs = std::filesystem;

namespace xlaunch {
namespace {

using durable::fsync_dir;
using durable::throw_io;
using durable::write_all;
using durable::write_new_file;
using safetensors::nbytes_of;
using safetensors::row_of;

durable::SaveHook notify;  // set_safetensors_save_hook

// ---- checks before writing -----------------------------------------------------------------

// `described`: the tensor only describes what will be written (save_safetensors_streamed), so a
// meta tensor is fine; its values are checked when they come (value_of).
void check_tensor(const std::string& name, const at::Tensor& t, bool described) {
  const std::string what = "save_safetensors: tensor '" + name + "' ";
  if (!t.defined()) throw UsageError(what + "is undefined; pass only tensors that hold values");
  if (t.is_meta() && !described)
    throw UsageError(what + "is on the meta device and has no values; materialize the model first");
  if (t.layout() != at::kStrided)
    throw UsageError(what + "is not dense (layout " + c10::str(t.layout()) +
                     "); safetensors stores dense tensors: pass t.to_dense()");
  if (!row_of(t.scalar_type()))
    throw UsageError(what + "has dtype " + std::string(at::toString(t.scalar_type())) +
                     ", which safetensors cannot store (it has no complex or quantized types); convert it "
                     "(e.g. torch::view_as_real for complex, dequantize() for quantized) before saving");
}

void check_names(const NamedTensors& tensors, bool described) {
  std::set<std::string> seen;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) throw UsageError("save_safetensors: a tensor has an empty name; give every tensor a name");
    if (name == "__metadata__")
      throw UsageError("save_safetensors: '__metadata__' is the safetensors header's metadata entry and cannot name a "
                       "tensor; rename it");
    if (!seen.insert(name).second)
      throw UsageError("save_safetensors: two tensors are named '" + name + "'; names must be unique");
    check_tensor(name, t, described);
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
    if (t.numel() > 0 && t.has_storage() && !t.is_meta()) {
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

// The tensors of one file (`indices` into `tensors`) in their order in it: by element size, largest
// first, then by name.
std::vector<size_t> file_order(const NamedTensors& tensors, std::vector<size_t> indices) {
  std::stable_sort(indices.begin(), indices.end(), [&](size_t a, size_t b) {
    const size_t sa = tensors[a].second.element_size(), sb = tensors[b].second.element_size();
    return sa != sb ? sa > sb : tensors[a].first < tensors[b].first;
  });
  return indices;
}

// described[i]'s values, from `value`, as a contiguous CPU tensor; Error when they do not match it.
at::Tensor value_of(const NamedTensors& described, size_t i, const TensorSource& value) {
  const auto& [name, want] = described[i];
  const at::Tensor got = value(i);
  if (!got.defined() || got.is_meta() || got.layout() != at::kStrided || got.scalar_type() != want.scalar_type() ||
      got.sizes() != want.sizes())
    throw Error("save_safetensors: the values given for tensor '" + name + "' (" +
                (got.defined() ? describe(got) : std::string("undefined")) + ") are not what was described (" +
                describe(want) + ")");
  return got.detach().to(at::kCPU).contiguous();
}

// One file's bytes, tensor after tensor, each fetched when it is written, to `put`.
void stream_file(const NamedTensors& described, const std::vector<size_t>& order, const TensorSource& value,
                 const std::map<std::string, std::string>& metadata,
                 const std::function<void(const void*, size_t)>& put) {
  std::vector<const std::pair<std::string, at::Tensor>*> entries;
  for (size_t i : order) entries.push_back(&described[i]);
  const std::string header = safetensors::header_of(entries, metadata);
  const uint64_t length = header.size();
  put(&length, sizeof length);
  put(header.data(), header.size());
  for (size_t i : order) {
    const at::Tensor cpu = value_of(described, i, value);
    put(cpu.data_ptr(), static_cast<size_t>(nbytes_of(cpu)));
  }
}

// The shards of `described` (plan_shards), each in its file order.
std::vector<std::vector<size_t>> shards_of(const NamedTensors& described, int64_t max_shard_bytes) {
  std::vector<int64_t> bytes;
  for (const auto& entry : described) bytes.push_back(nbytes_of(entry.second));
  std::vector<std::vector<size_t>> shards = plan_shards(bytes, max_shard_bytes);
  for (auto& s : shards) s = file_order(described, std::move(s));
  return shards;
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

}  // namespace

void set_safetensors_save_hook(std::function<void(const std::string&)> hook) { notify.set(std::move(hook)); }

namespace {

void check_arguments(const NamedTensors& tensors, const std::string& dir_text, int64_t max_shard_bytes,
                     const std::map<std::string, std::string>& metadata, bool described) {
  if (dir_text.empty()) throw UsageError("save_safetensors: the directory is empty; pass one, such as \"model\"");
  if (max_shard_bytes <= 0)
    throw UsageError("save_safetensors: max_shard_bytes is " + std::to_string(max_shard_bytes) +
                     "; pass a positive size, such as parse_size(\"5GB\")");
  const auto format = metadata.find("format");
  if (format != metadata.end() && format->second != "pt")
    throw UsageError("save_safetensors: metadata \"format\" is '" + format->second +
                     "'; it must be \"pt\" (transformers refuses other values for torch weights). Drop that key");
  check_names(tensors, described);
  check_not_shared(tensors);
}

void save_checked(const NamedTensors& tensors, const TensorSource& value, const std::string& dir_text,
                  int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  std::vector<std::vector<size_t>> shards = shards_of(tensors, max_shard_bytes);
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
    const fs::path path = dir / temps.names.back();
    write_new_file(path, [&](int fd) {
      stream_file(tensors, shards[s], value, metadata, [&](const void* data, size_t size) { write_all(fd, data, size, path); });
    });
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

}  // namespace

void save_safetensors(const NamedTensors& tensors, const std::string& dir, int64_t max_shard_bytes,
                      const std::map<std::string, std::string>& metadata) {
  check_arguments(tensors, dir, max_shard_bytes, metadata, /*described=*/false);
  save_checked(tensors, [&](size_t i) { return tensors[i].second; }, dir, max_shard_bytes, metadata);
}

void save_safetensors_streamed(const NamedTensors& described, const TensorSource& value, const std::string& dir,
                               int64_t max_shard_bytes, const std::map<std::string, std::string>& metadata) {
  check_arguments(described, dir, max_shard_bytes, metadata, /*described=*/true);
  save_checked(described, value, dir, max_shard_bytes, metadata);
}

std::vector<size_t> safetensors_write_order(const NamedTensors& described, int64_t max_shard_bytes) {
  std::vector<size_t> out;
  for (const auto& shard : shards_of(described, max_shard_bytes)) out.insert(out.end(), shard.begin(), shard.end());
  return out;
}

namespace safetensors {

std::string file_bytes(const NamedTensors& tensors) {
  check_names(tensors, /*described=*/false);
  check_not_shared(tensors);
  std::vector<size_t> all(tensors.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  std::string out;
  stream_file(tensors, file_order(tensors, all), [&](size_t i) { return tensors[i].second; }, {},
              [&](const void* data, size_t size) { out.append(static_cast<const char*>(data), size); });
  return out;
}

}  // namespace safetensors
}  // namespace xlaunch
