// save_run (state/training_run.h): every rank's part gathered on rank 0, which writes the files.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <functional>
#include <memory>
#include <thread>
#include <sstream>

#include "comm/agree.h"
#include "ddp/accumulation.h"
#include "state/loader_state.h"
#include "state/model_shards.h"
#include "state/safetensors_format.h"
#include "state/snapshots.h"
#include "state/checkpoint_dir.h"
#include "state/durable_files.h"
#include "state/torch_state.h"
#include "state/training_run_parts.h"
#include "state/zero_state.h"
#include "xlaunch/checkpoint_object.h"
#include "xlaunch/env_vars.h"
#include "xlaunch/error.h"
#include "xlaunch/grad_scaler.h"
#include "xlaunch/loader.h"
#include "xlaunch/lr_scheduler.h"

namespace xlaunch::checkpoint {
namespace {

using Named = NamedTensors;

std::string env_text() {
  std::ostringstream os;
  for (const env::Var* v : env::kAll) os << v->name << "=" << env::raw(*v) << "\n";
  return os.str();
}

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

std::string host_name() {
  char name[256] = {};
  return gethostname(name, sizeof name - 1) == 0 ? name : "unknown-host";
}

// Every rank's `mine`, on rank 0 (collective; the others get an empty list). One rank at a time,
// as a broadcast: all of them at once could be beyond what one allgather may carry.
std::vector<std::string> gather_on_rank0(const TrainingRun& run, const std::string& mine) {
  std::vector<std::string> out;
  for (int r = 0; r < run.world; ++r) {
    std::string got = r == 0 ? mine : broadcast_string(*run.comm, run.rank == r ? mine : std::string(), r);
    if (run.rank == 0) out.push_back(std::move(got));
  }
  return out;
}

bool has_hook_state(const Reducer& reducer) { return !reducer.hook_state().empty(); }

// This rank's place in the layout the sharded files follow (shard_world_of: the job, or with
// ddp.shard_group machine one machine's ranks, whose replicas on the other machines hold the same
// shards), and whether it writes its shards (the first replica's ranks do; the others would write
// the same bytes).
int shard_rank_of(const TrainingRun& run) { return run.models.empty() ? run.rank : run.models.front().reducer->shard_rank(); }
bool writes_shards(const TrainingRun& run) { return run.models.empty() || run.models.front().reducer->replica() == 0; }

// A file of this rank's own (its generators, its shards), made when it is written: a rank holds one
// at a time.
struct OwnFile {
  std::string path;
  std::function<std::string()> bytes;
  // For an asynchronous save: a copy of what it is made of, now, and the bytes of that copy
  // later (in the background). Empty, or returning an empty Producer: bytes() now is the copy.
  std::function<Producer()> snapshot;
};

// This rank's files (state/checkpoint_dir.h: rng/, ddp/, optimizer_<i>/, model_<i>/). The same
// kinds, in the same order, on every rank: the settings that decide them are agreed.
std::vector<OwnFile> rank_files(const TrainingRun& run) {
  const std::string r = std::to_string(run.rank);
  std::vector<OwnFile> out;
  // Every rank's generators differ (dropout masks, device_specific seeds).
  out.push_back({"rng/rank_" + r + ".pt", [&run] { return rng_bytes(run.device); }});
  for (size_t i = 0; i < run.models.size(); ++i)
    if (has_hook_state(*run.models[i].reducer))
      out.push_back({"ddp/model_" + std::to_string(i) + "_rank_" + r + ".pt",
                     [&run, i] { return pickle_bytes(run.models[i].reducer->hook_state()); }});
  // Sharded state under this rank's place in the shards' layout; none (an empty path) on the other
  // replicas, so that every rank lists the same kinds.
  const std::string s = std::to_string(shard_rank_of(run));
  const bool shards = writes_shards(run);
  for (size_t i = 0; i < run.optimizers.size(); ++i)
    if (run.optimizers[i].sharded)
      out.push_back({shards ? "optimizer_" + std::to_string(i) + "/rank_" + s + ".pt" : "",
                     [&run, i] { return archive_bytes([&](auto& ar) { run.optimizers[i].inner->save(ar); }); },
                     [&run, i] { return optimizer_snapshot(*run.optimizers[i].inner); }});
  for (size_t i = 0; i < run.models.size(); ++i)
    if (shards_params(*run.models[i].reducer))
      out.push_back({shards ? model_dir(i) + "rank_" + s + ".safetensors" : "",
                     [&run, i] { return safetensors::file_bytes(shard_tensors(*run.models[i].reducer, i)); },
                     [&run, i] { return safetensors_snapshot(shard_tensors(*run.models[i].reducer, i)); }});
  return out;
}

// What rank 0 writes beside the ranks' files, gathered there: every rank's pieces of every sharded
// optimizer ([i]: empty when not sharded) and of every sharded model ([i][r]).
struct Layouts {
  std::vector<std::string> optimizer_pieces;
  std::vector<std::vector<std::string>> model_pieces;
};

Layouts gather_layouts(const TrainingRun& run) {
  Layouts out;
  out.optimizer_pieces.resize(run.optimizers.size());
  for (size_t i = 0; i < run.optimizers.size(); ++i) {
    const TrainingRun::OptimizerPart& opt = run.optimizers[i];
    if (!opt.sharded) continue;  // the same on every rank: zero_stage is an agreed setting
    std::vector<std::vector<checkpoint::PieceLayout>> pieces;
    for (const auto& group : checkpoint::held_tensors(*opt.inner, opt.sharded, reducers_of(run))) {
      pieces.emplace_back();
      for (const auto& h : group) pieces.back().push_back(h.layout);
    }
    const std::string mine = writes_shards(run) ? checkpoint::rank_layout_text(shard_rank_of(run), pieces) : "";
    for (std::string& text : gather_on_rank0(run, mine))
      out.optimizer_pieces[i] += text;
  }
  out.model_pieces.resize(run.models.size());
  for (size_t i = 0; i < run.models.size(); ++i) {
    const Reducer& reducer = *run.models[i].reducer;
    if (!shards_params(reducer)) continue;
    std::vector<checkpoint::PieceLayout> pieces;
    for (const HeldTensor& h : param_pieces(reducer, i)) pieces.push_back(h.layout);
    out.model_pieces[i] = gather_on_rank0(run, writes_shards(run) ? rank_layout_text(shard_rank_of(run), {pieces}) : "");
    out.model_pieces[i].erase(std::remove(out.model_pieces[i].begin(), out.model_pieces[i].end(), std::string()),
                              out.model_pieces[i].end());
  }
  return out;
}

// What rank 0 writes: everything but the ranks' own files (rank_files). stream_states[r]: rank
// r's streaming loaders' positions (empty: no loader streams). With `later` (an asynchronous save),
// the model files and the optimizers it can copy (optimizer_snapshot) are copied now and go there,
// to be serialized on the background thread; the rest is serialized at once.
Files files_of(const TrainingRun& run, const std::vector<std::string>& stream_states, const Layouts& layouts,
               std::vector<std::pair<std::string, Producer>>* later = nullptr) {
  Files files;
  const bool any_sharded_model = std::any_of(layouts.model_pieces.begin(), layouts.model_pieces.end(),
                                             [](const std::vector<std::string>& p) { return !p.empty(); });
  const int format = any_sharded_model ? checkpoint::kShardedModelFormatVersion : checkpoint::kFormatVersion;
  KeyValues state{{"format_version", std::to_string(format)},
                  {"world_size", std::to_string(run.world)},
                  {"zero_stage", std::to_string(run.ddp.zero_stage)},
                  {"step", std::to_string(*run.step)},
                  {"micro_step", std::to_string(*run.micro_step)},
                  {"models", std::to_string(run.models.size())},
                  {"optimizers", std::to_string(run.optimizers.size())},
                  {"loaders", std::to_string(run.loaders->size())},
                  {"scaler", run.scaler ? "1" : "0"},
                  {"schedulers", std::to_string(run.schedulers.size())},
                  {"custom_objects", std::to_string(run.custom.size())}};
  std::ostringstream meta;
  meta << "xlaunch checkpoint\nformat_version " << format << "\nworld_size " << run.world
       << "\nzero_stage " << run.ddp.zero_stage << "\nsaved_by rank 0 on " << host_name() << "\ntime " << utc_now() << "\nstep " << *run.step
       << "\nmicro_step " << *run.micro_step << "\n";
  for (size_t i = 0; i < run.models.size(); ++i) {
    // At stage 3 the parameters are in the ranks' shards; rank 0's file holds what is kept whole.
    const std::vector<std::string>& sharded = run.models[i].reducer->names();
    Named whole;
    for (auto& [name, t] : model_state(*run.models[i].module)) {
      const bool in_shards =
          !layouts.model_pieces[i].empty() && std::find(sharded.begin(), sharded.end(), name) != sharded.end();
      meta << "model " << i << " '" << name << "' " << describe(t) << (in_shards ? " sharded" : "") << "\n";
      if (!in_shards) whole.emplace_back(name, t);
    }
    const std::string model_file = "rank0/model_" + std::to_string(i) + ".pt";
    if (later) later->emplace_back(model_file, pickle_snapshot(whole));
    else files[model_file] = pickle_bytes(whole);
    if (layouts.model_pieces[i].empty()) continue;
    meta << "model " << i << " sharded over " << shard_world_of(run) << " ranks (zero_stage 3"
         << (shard_world_of(run) < run.world ? ", ddp.shard_group machine: one machine's shards" : "") << ")\n";
    files.merge(sharded_model_files(*run.models[i].reducer, *run.models[i].module, i, layouts.model_pieces[i]));
  }
  for (size_t i = 0; i < run.optimizers.size(); ++i) {
    const TrainingRun::OptimizerPart& opt = run.optimizers[i];
    state["optimizer." + std::to_string(i) + ".steps"] = std::to_string(*opt.steps);
    if (!opt.sharded) {
      const std::string optimizer_file = "rank0/optimizer_" + std::to_string(i) + ".pt";
      if (Producer copied = later ? optimizer_snapshot(*opt.inner) : Producer())
        later->emplace_back(optimizer_file, std::move(copied));
      else
        files[optimizer_file] = archive_bytes([&](auto& ar) { opt.inner->save(ar); });
      continue;
    }
    // Sharded: every rank writes its own file (rank_files); here, what their pieces hold
    // (state/sharded_layout.h).
    const std::string dir = "optimizer_" + std::to_string(i) + "/";
    checkpoint::OptimizerLayout layout;
    layout.world = shard_world_of(run);
    layout.stage = run.ddp.zero_stage;
    layout.groups = static_cast<int>(opt.inner->param_groups().size());
    layout.params = checkpoint::params_of(*opt.inner, opt.sharded, reducers_of(run));
    files[dir + "layout.txt"] = checkpoint::layout_text(layout) + layouts.optimizer_pieces[i];
    meta << "optimizer " << i << " sharded over " << layout.world << " ranks (zero_stage " << layout.stage
         << (layout.world < run.world ? ", ddp.shard_group machine: one machine's shards" : "") << ")\n";
  }
  files["rank0/registered.txt"] = registered_text(run);
  for (size_t i = 0; i < run.schedulers.size(); ++i) {
    const TrainingRun::SchedulerPart& s = run.schedulers[i];
    files["rank0/scheduler_" + std::to_string(i) + ".pt"] = archive_bytes([&](auto& ar) { s.inner->save(ar); });
    state["scheduler." + std::to_string(i) + ".followed"] = std::to_string(*s.followed);
    meta << "scheduler " << i << " " << s.inner->name() << " lr";
    for (double lr : s.inner->last_lr()) meta << " " << exact(lr);
    meta << "\n";
  }
  for (size_t i = 0; i < run.custom.size(); ++i)
    files["rank0/custom_" + std::to_string(i) + ".pt"] = archive_bytes([&](auto& ar) { run.custom[i]->save(ar); });
  checkpoint::save_loader_positions(*run.loaders, run.world, state, meta, stream_states);
  // What backward(loss_sum, num_items) divides by next (ddp/accumulation.h): a resume divides alike.
  state["accumulation.items_reference"] = exact(run.items->reference());
  if (run.scaler) {
    const GradScalerState s = run.scaler->state_dict();
    state["scaler.scale"] = exact(s.scale);
    state["scaler.growth_factor"] = exact(s.growth_factor);
    state["scaler.backoff_factor"] = exact(s.backoff_factor);
    state["scaler.growth_interval"] = std::to_string(s.growth_interval);
    state["scaler.growth_tracker"] = std::to_string(s.growth_tracker);
    meta << "scaler scale " << exact(s.scale) << "\n";
  }
  if (std::any_of(run.models.begin(), run.models.end(), [](const auto& m) { return has_hook_state(*m.reducer); }))
    meta << "comm_hook " << run.ddp.comm_hook << " rank " << run.ddp.powersgd_rank << "\n";
  files["rank0/trainer_state.txt"] = key_values_text(state);
  files["metadata.txt"] = meta.str();
  files["config/env.txt"] = env_text();
  const std::string config_file = env::raw(env::kConfigFile);
  if (!config_file.empty()) {
    std::ifstream in(config_file, std::ios::binary);
    std::ostringstream os;
    if (in) os << in.rdbuf();
    files["config/config_file.yaml"] = in ? os.str() : "# " + config_file + " could not be read when saving\n";
  }
  return files;
}

// Whether every rank sees the directory rank 0 is writing (one file system), by a file only rank 0
// can have written there. Collective.
bool every_rank_sees(const TrainingRun& run, const std::string& tmp) {
  const std::string probe = ".xlaunch-probe", token = tmp + " " + host_name() + " " + std::to_string(::getpid());
  std::string error;
  if (run.rank == 0) {
    try {
      write_part(tmp, probe, token);
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  if (const Agreement a = agree_on_error(*run.comm, error); a.failed()) throw Error(a.message);
  const std::string sent = broadcast_string(*run.comm, run.rank == 0 ? token : "");
  std::ifstream in(tmp + "/" + probe, std::ios::binary);
  std::ostringstream got;
  if (in) got << in.rdbuf();
  const bool mine = in && got.str() == sent && !shared_dir_refused(run.rank);
  // Not an error: some rank not seeing it only chooses the way the files go.
  const bool all = !agree_on_error(*run.comm, mine ? "" : "does not see " + tmp).failed();
  if (run.rank == 0 && ::unlink((tmp + "/" + probe).c_str()) != 0) error = "cannot remove " + tmp + "/" + probe;
  if (const Agreement a = agree_on_error(*run.comm, error); a.failed()) throw Error(a.message);
  return all;
}

// Every rank's own files: written by each rank into the directory when all see it, else sent to
// rank 0 one file at a time (rank 0 holds one at a time). Collective; returns, on rank 0, the
// MANIFEST lines of the files written by the others.
std::string write_rank_files(const TrainingRun& run, PendingCheckpoint* pending, const std::string& tmp, bool shared) {
  const std::vector<OwnFile> mine = rank_files(run);
  std::string lines, error;
  if (shared) {
    try {
      for (const OwnFile& f : mine)
        if (!f.path.empty()) lines += write_part(tmp, f.path, f.bytes());
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (const Agreement a = agree_on_error(*run.comm, error); a.failed())
      throw Error("rank " + std::to_string(a.rank) + " could not write its part: " + a.message);
    std::string others;
    const std::vector<std::string> all = gather_on_rank0(run, lines);
    for (size_t r = 1; r < all.size(); ++r) others += all[r];
    return run.rank == 0 ? lines + others : std::string();
  }
  for (const OwnFile& f : mine) {
    // The same kinds on every rank (rank_files): rank r's k-th file, after rank r - 1's.
    const std::vector<std::string> paths = gather_on_rank0(run, f.path);
    for (int r = 0; r < run.world; ++r) {
      // (An empty path: this rank holds no such file, a replica of another's shards.)
      const auto own = [&] { return f.path.empty() ? std::string() : f.bytes(); };
      const std::string bytes = r == 0 ? (run.rank == 0 ? own() : std::string())
                                       : broadcast_string(*run.comm, run.rank == r ? own() : std::string(), r);
      if (run.rank != 0 || !error.empty() || paths[static_cast<size_t>(r)].empty()) continue;
      try {
        pending->write(paths[static_cast<size_t>(r)], bytes);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
  }
  if (const Agreement a = agree_on_error(*run.comm, error); a.failed()) throw Error(a.message);
  return "";
}

// A save under way: what every save does first, collectively, before any file is written.
struct Opened {
  Layouts layouts;
  std::vector<std::string> streams;          // rank r's streaming loaders' positions
  std::unique_ptr<PendingCheckpoint> pending;  // rank 0's
  std::string tmp;                           // its directory, on every rank
  bool shared = false;                       // every rank sees it
};

Opened open_save(const std::string& dir, const TrainingRun& run) {
  Opened o;
  o.layouts = gather_layouts(run);
  // Streaming loaders stand differently on every rank (loader_state.h).
  if (checkpoint::any_stream(*run.loaders))
    o.streams = run.comm->allgather_strings(checkpoint::stream_positions_text(*run.loaders, run.rank, run.world));
  std::string error;
  try {
    if (run.rank == 0) o.pending = std::make_unique<PendingCheckpoint>(dir);
  } catch (const std::exception& e) {
    error = e.what();
  }
  const Agreement outcome = agree_on_error(*run.comm, error);
  if (outcome.failed()) throw Error("save_state(" + dir + ") failed on rank 0: " + outcome.message);
  o.tmp = broadcast_string(*run.comm, run.rank == 0 ? o.pending->tmp() : "");
  return o;
}

// The rest of a save, every rank at once (collective); throws Error naming the rank at fault.
void finish_save(const std::string& dir, const TrainingRun& run, Opened& o) {
  std::string error;
  try {
    // Every rank writes its own shard where it can; what it wrote is in rank 0's MANIFEST.
    const std::string others = write_rank_files(run, o.pending.get(), o.tmp, o.shared);
    if (run.rank == 0) {
      o.pending->add_lines(others);
      for (const auto& [path, bytes] : files_of(run, o.streams, o.layouts)) o.pending->write(path, bytes);
      o.pending->commit();
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  // The outcome doubles as the barrier: nobody returns before the checkpoint exists. Unless it
  // was committed, rank 0's pending directory is removed (~PendingCheckpoint).
  const Agreement outcome = agree_on_error(*run.comm, error);
  o.pending.reset();
  if (outcome.failed())
    throw Error("save_state(" + dir + ") failed on rank " + std::to_string(outcome.rank) + ": " + outcome.message);
}

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// A background save on one rank (save_run_async): its files, already serialized, written by a
// thread; on rank 0 also the shared files, and the commit once every rank has left its marker.
class Background final : public BackgroundSave {
 public:
  Background(const std::string& dir, int rank, int world, double deadline_s, Opened opened,
             std::vector<std::pair<std::string, std::function<std::string()>>> mine, Files shared, double blocked_s)
      : dir_(dir), blocked_s_(blocked_s), start_(std::chrono::steady_clock::now()) {
    thread_ = std::thread([this, rank, world, deadline_s, o = std::move(opened), mine = std::move(mine),
                           shared = std::move(shared)]() mutable {
      try {
        run(rank, world, deadline_s, o, mine, shared);
      } catch (const std::exception& e) {
        error_ = e.what();
      }
      written_s_ = since(start_);
      o.pending.reset();  // removes the temporary unless committed
    });
  }
  ~Background() override {
    if (thread_.joinable()) thread_.join();
  }
  std::string wait() override {
    if (thread_.joinable()) thread_.join();
    return error_;
  }
  const std::string& dir() const override { return dir_; }
  double blocked_s() const override { return blocked_s_; }
  double written_s() const override { return written_s_; }

 private:
  static std::string marker(int rank) { return ".done-" + std::to_string(rank); }

  void run(int rank, int world, double deadline_s, Opened& o,
           std::vector<std::pair<std::string, std::function<std::string()>>>& mine,
           Files& shared) {
    std::string lines, failed;
    try {
      for (auto& [path, bytes] : mine) {
        lines += write_part(o.tmp, path, bytes());
        bytes = nullptr;  // its memory goes as soon as it is written
      }
    } catch (const std::exception& e) {
      failed = e.what();
    }
    if (rank != 0) {
      // Rank 0 takes a marker only once it is whole: written aside, then renamed.
      write_part(o.tmp, marker(rank) + ".part", failed.empty() ? lines : "error " + failed);
      durable::rename_path(o.tmp + "/" + marker(rank) + ".part", o.tmp + "/" + marker(rank));
      if (!failed.empty()) throw Error(failed);
      return;
    }
    // Every other rank's marker, within the deadline, even once one has failed: the temporary
    // directory is removed only when no rank writes in it any more.
    const auto t0 = std::chrono::steady_clock::now();
    std::vector<bool> seen(static_cast<size_t>(world), false);
    seen[0] = true;
    for (int left = world - 1; left > 0;) {
      for (int r = 1; r < world; ++r) {
        const std::string path = o.tmp + "/" + marker(r);
        if (seen[static_cast<size_t>(r)] || ::access(path.c_str(), F_OK) != 0) continue;
        std::ifstream in(path, std::ios::binary);
        std::ostringstream text;
        text << in.rdbuf();
        if (text.str().rfind("error ", 0) == 0) {
          if (failed.empty()) failed = "rank " + std::to_string(r) + " could not write its part: " + text.str().substr(6);
        } else {
          o.pending->add_lines(text.str());
        }
        ::unlink(path.c_str());
        seen[static_cast<size_t>(r)] = true;
        --left;
      }
      if (left == 0) break;
      if (since(t0) > deadline_s) {
        std::string missing;
        for (int r = 1; r < world; ++r)
          if (!seen[static_cast<size_t>(r)]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        throw Error("rank(s) " + missing + " did not finish writing their part of " + dir_ + " within " +
                    std::to_string(static_cast<int>(deadline_s)) + " s (XLAUNCH_TIMEOUT_S); the previous checkpoint is kept");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    if (!failed.empty()) throw Error(failed);
    o.pending->add_lines(lines);
    for (const auto& [path, bytes] : shared) o.pending->write(path, bytes);
    o.pending->commit();
  }

  std::string dir_, error_;
  double blocked_s_ = 0, written_s_ = 0;
  std::chrono::steady_clock::time_point start_;
  std::thread thread_;
};

}  // namespace

void save_run(const std::string& dir, const TrainingRun& run) {
  Opened o = open_save(dir, run);
  o.shared = run.world == 1 || every_rank_sees(run, o.tmp);
  finish_save(dir, run, o);
}

std::unique_ptr<BackgroundSave> save_run_async(const std::string& dir, const TrainingRun& run, double deadline_s) {
  const auto t0 = std::chrono::steady_clock::now();
  Opened o = open_save(dir, run);
  o.shared = run.world == 1 || every_rank_sees(run, o.tmp);
  if (!o.shared) {  // the files travel through rank 0, which a background thread cannot do
    finish_save(dir, run, o);
    return nullptr;
  }
  // The copy to host memory: every file serialized now, so training may change the state at once.
  std::vector<std::pair<std::string, std::function<std::string()>>> mine;
  Files shared;
  std::string error;
  try {
    for (const OwnFile& f : rank_files(run)) {
      if (f.path.empty()) continue;  // another replica's shards
      if (Producer later = f.snapshot ? f.snapshot() : Producer()) {
        mine.emplace_back(f.path, std::move(later));
        continue;
      }
      auto bytes = std::make_shared<std::string>(f.bytes());
      mine.emplace_back(f.path, [bytes] { return std::move(*bytes); });
    }
    if (run.rank == 0) {
      std::vector<std::pair<std::string, Producer>> later;
      shared = files_of(run, o.streams, o.layouts, &later);
      for (auto& [path, produce] : later) mine.emplace_back(path, std::move(produce));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  const Agreement outcome = agree_on_error(*run.comm, error);
  if (outcome.failed())
    throw Error("save_state(" + dir + ") failed on rank " + std::to_string(outcome.rank) + ": " + outcome.message);
  return std::make_unique<Background>(dir, run.rank, run.world, deadline_s, std::move(o), std::move(mine),
                                      std::move(shared), since(t0));
}

}  // namespace xlaunch::checkpoint
