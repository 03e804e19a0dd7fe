// Reading safetensors weights: one file, or a directory's index and the shards it names
// (load_safetensors), and into a module's tensors (load_model).
#include <ATen/ops/empty.h>
#include <c10/core/GradMode.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "state/durable_files.h"
#include "state/safetensors_format.h"
#include "state/torch_state.h"
#include "xlaunch/safetensors.h"

namespace fs = std::filesystem;

namespace xlaunch {
namespace {

using durable::throw_io;
using safetensors::invalid_file;
using safetensors::kMaxHeaderBytes;

struct OpenFile {
  int fd = -1;
  ~OpenFile() {
    if (fd >= 0) ::close(fd);
  }
};

void read_exactly(int fd, void* data, size_t size, uint64_t offset, const fs::path& path) {
  if (!durable::read_all_at(fd, data, size, offset, path))
    throw UsageError("load_safetensors: " + path.string() + " ended early (was it truncated?)");
}

NamedTensors read_file(const fs::path& path) {
  OpenFile f;
  f.fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);  // a FIFO must not block us
  if (f.fd < 0)
    throw UsageError("load_safetensors: cannot open " + path.string() + ": " + std::strerror(errno) +
                     "; pass a .safetensors file or the directory save_model wrote");
  struct stat st {};
  if (::fstat(f.fd, &st) != 0) throw_io("cannot stat", path);
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (!S_ISREG(st.st_mode)) throw invalid_file(path, "it is not a regular file");
  const safetensors::Index index = safetensors::read_index(
      size, [&](uint64_t offset, uint64_t length, void* dst) { read_exactly(f.fd, dst, length, offset, path); }, path);
  const uint64_t data_start = index.data_start;
  NamedTensors out;
  for (const safetensors::Entry& e : index.entries) {
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
