#include "merge_weights.h"

#include <sys/stat.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>

#include "state/checkpoint_dir.h"
#include "state/durable_files.h"
#include "state/model_shards.h"
#include "state/safetensors_format.h"
#include "state/torch_state.h"
#include "xlaunch/error.h"
#include "xlaunch/safetensors.h"

namespace xlaunch::merge {

namespace fs = std::filesystem;

std::vector<size_t> model_indices(const std::vector<std::string>& paths) {
  static const std::regex model_file(R"(rank0/model_(0|[1-9][0-9]{0,5})\.pt)");
  std::vector<size_t> out;
  std::smatch m;
  for (const std::string& p : paths)
    if (std::regex_match(p, m, model_file)) out.push_back(std::stoul(m[1]));
  std::sort(out.begin(), out.end());
  return out;
}

std::string merged_stem(size_t model) { return model == 0 ? "model" : "model_" + std::to_string(model); }

std::string merged_name(size_t model, const std::string& saved_name) {
  // Every name save_safetensors writes starts with "model" followed by '.' or '-'.
  return merged_stem(model) + saved_name.substr(std::string("model").size());
}

bool is_merged_model_file(const std::string& name) {
  static const std::regex merged(
      R"(model(_[0-9]+)?(\.safetensors|\.safetensors\.index\.json|-[0-9]{5}-of-[0-9]{5}\.safetensors))");
  return std::regex_match(name, merged);
}

namespace {

bool is_directory(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// What is read whole: rank 0's model files, the sharded models' layouts and shapes, the trainer
// state (its format version names the shard files), and format 2's pickled shards. The rest is
// not read (optimizer state), or read in place range by range (the safetensors shards, checked
// block by block against the block CRC32s saved beside them, which are read whole).
bool read_whole(const std::string& path) {
  static const std::regex whole(
      R"(rank0/model_[0-9]+\.pt|rank0/trainer_state\.txt|model_[0-9]+/(layout\.txt|tensors\.txt|rank_[0-9]+\.pt|rank_[0-9]+\.safetensors\.crc32))");
  return std::regex_match(path, whole);
}

// read_verified's and SavedModel's messages speak of load_state; here they are merge-weights', with the fix.
UsageError damaged(const UsageError& e) {
  std::string why = e.what();
  const std::string prefix = "load_state: ";
  if (why.rfind(prefix, 0) == 0) why = why.substr(prefix.size());
  return UsageError("merge-weights: " + why +
                    "; merge a complete checkpoint (an older one, or save again from the training run)");
}

checkpoint::Files read_checkpoint(const std::string& dir, std::ostream& log, checkpoint::ReadInfo* info) {
  if (!is_directory(dir) && !is_directory(dir + ".old"))
    throw UsageError("merge-weights: no checkpoint directory at " + dir + " (" +
                     (::access(dir.c_str(), F_OK) == 0 ? std::string("not a directory") : std::strerror(ENOENT)) +
                     "); give a directory save_state wrote, e.g. <project_dir>/checkpoints/checkpoint_<step>");
  if (is_directory(dir + "/checkpoints") && ::access((dir + "/MANIFEST").c_str(), F_OK) != 0)
    throw UsageError("merge-weights: " + dir + " is a project directory, not a checkpoint; give one of its "
                     "checkpoints, e.g. the newest of " + dir + "/checkpoints/checkpoint_<step>");
  bool fell_back = false;
  try {
    checkpoint::Files files = checkpoint::read_verified(dir, &fell_back, read_whole, info);
    if (fell_back)
      log << "xlaunch: merge-weights: " << dir << " is missing; reading " << dir
          << ".old, the complete checkpoint an interrupted save left\n";
    return files;
  } catch (const UsageError& e) {
    throw damaged(e);
  }
}

// Makes OUT (with its parents) and checks that a merge may write there.
void prepare_out(const MergeOptions& o) {
  std::error_code ec;
  fs::create_directories(o.out, ec);
  if (ec || !is_directory(o.out))
    throw UsageError("merge-weights: cannot make the output directory " + o.out + " (" +
                     (ec ? ec.message() : std::string("it exists and is not a directory")) +
                     "); choose a directory you can write");
  if (o.overwrite) return;
  std::vector<std::string> held;
  for (const std::string& name : durable::entries(o.out))
    if (is_merged_model_file(name)) held.push_back(name);
  std::sort(held.begin(), held.end());
  if (held.empty()) return;
  std::string names;
  for (const auto& n : held) names += (names.empty() ? "" : ", ") + n;
  throw UsageError("merge-weights: " + o.out + " already holds model files (" + names +
                   "); pass --overwrite to replace them, or choose another OUT");
}

// The files save_safetensors wrote into `dir`, as `model` in OUT: renamed there, an index last
// with its weight_map rewritten to the new shard names. Returns the names now in OUT.
std::vector<std::string> move_into_place(size_t model, const fs::path& dir, const fs::path& out) {
  std::vector<std::string> names, placed;
  for (const std::string& n : durable::entries(dir))
    if (n != "." && n != "..") names.push_back(n);
  std::sort(names.begin(), names.end());
  for (const std::string& n : names) {
    if (n == kSafetensorsIndexFile) continue;
    durable::rename_path(dir / n, out / merged_name(model, n));
    placed.push_back(merged_name(model, n));
  }
  if (std::find(names.begin(), names.end(), kSafetensorsIndexFile) != names.end()) {
    std::ifstream in(dir / kSafetensorsIndexFile);
    nlohmann::json index = nlohmann::json::parse(in);
    for (auto& [tensor, file] : index["weight_map"].items()) file = merged_name(model, file.get<std::string>());
    const std::string name = merged_name(model, kSafetensorsIndexFile);
    const fs::path tmp = dir / ("." + name + ".tmp");
    durable::write_new_file(tmp, index.dump(2) + "\n");
    durable::rename_path(tmp, out / name);
    placed.push_back(name);
  }
  durable::fsync_dir(out);
  return placed;
}

int64_t data_bytes(const NamedTensors& tensors) {
  int64_t n = 0;
  for (const auto& [name, t] : tensors) n += safetensors::nbytes_of(t);  // meta descriptions too
  return n;
}

}  // namespace

void merge_weights(const MergeOptions& o, std::ostream& log) {
  checkpoint::ReadInfo info;
  const checkpoint::Files files = read_checkpoint(o.checkpoint, log, &info);
  const checkpoint::CheckpointOnDisk disk{info.dir, checkpoint::parse_manifest(info.manifest, info.dir + "/MANIFEST")};
  std::vector<std::string> paths;
  for (const auto& [path, entry] : disk.manifest) paths.push_back(path);
  const std::vector<size_t> models = model_indices(paths);
  if (models.empty())
    throw UsageError("merge-weights: checkpoint " + o.checkpoint +
                     " holds no model (no rank0/model_<i>.pt): save_state saves the models acc.prepare prepared; "
                     "prepare the model before saving");
  prepare_out(o);

  std::string staging = o.out + "/.xlaunch-merge-XXXXXX";
  if (!::mkdtemp(staging.data()))
    throw UsageError("merge-weights: cannot write into " + o.out + " (" + std::strerror(errno) +
                     "); choose a directory you can write");
  try {
    std::vector<std::string> lines;
    for (size_t i : models) {
      // One entry at a time: at ZeRO stage 3 each parameter is assembled from the ranks' shards,
      // read in place (state/model_shards.h), written and dropped before the next.
      try {
        checkpoint::SavedModel saved(files, i, &disk);
        const NamedTensors described = saved.described();
        save_safetensors_streamed(
            described, [&](size_t k) { return saved.entry(described[k].first); }, staging + "/" + std::to_string(i),
            o.max_shard_bytes);
        lines.push_back(std::to_string(described.size()) + " tensors, " + std::to_string(data_bytes(described)) +
                        " bytes");
      } catch (const UsageError& e) {
        if (std::string(e.what()).rfind("load_state: ", 0) == 0) throw damaged(e);
        throw;
      }
    }
    std::set<std::string> written;
    for (size_t k = 0; k < models.size(); ++k) {
      const std::vector<std::string> placed = move_into_place(models[k], staging + "/" + std::to_string(models[k]), o.out);
      written.insert(placed.begin(), placed.end());
      std::string shown;
      for (const auto& p : placed) shown += (shown.empty() ? "" : ", ") + p;
      log << "xlaunch: merge-weights: model " << models[k] << " of " << o.checkpoint << " (" << lines[k] << ") -> " << o.out
          << "/" << (placed.size() == 1 ? placed[0] : "{" + shown + "}") << "\n";
    }
    // An earlier merge's files that this one did not replace would mix two merges: removed.
    for (const std::string& name : durable::entries(o.out))
      if (is_merged_model_file(name) && !written.count(name) && ::unlink((o.out + "/" + name).c_str()) != 0)
        durable::throw_io("cannot remove the earlier merge's", o.out + "/" + name);
  } catch (...) {
    checkpoint::remove_directory(staging);
    throw;
  }
  checkpoint::remove_directory(staging);
}

}  // namespace xlaunch::merge
