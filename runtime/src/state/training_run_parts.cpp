// What save_run and load_run share (state/run_save.cpp, run_load.cpp): the list of registered
// parts both compare, and the parts of a load that differ by rank: each optimizer's state, re-sliced
// for this world size and stage, and each communication hook's state.
#include <sstream>

#include "comm/agree.h"
#include "state/log_main.h"
#include "state/model_shards.h"
#include "state/torch_state.h"
#include "state/training_run_parts.h"
#include "xlaunch/checkpoint_object.h"
#include "xlaunch/error.h"
#include "xlaunch/lr_scheduler.h"

namespace xlaunch::checkpoint {
namespace {

// "a (x), b (y)" of the lines of registered.txt that start with `kind`.
std::string kinds_listed(const std::string& text, const std::string& kind, size_t* count) {
  std::istringstream in(text);
  std::string out;
  *count = 0;
  for (std::string line; std::getline(in, line);) {
    if (line.compare(0, kind.size() + 1, kind + " ") != 0) continue;
    const auto name = line.find(' ', kind.size() + 1);
    out += (out.empty() ? "" : ", ") + (name == std::string::npos ? std::string("?") : line.substr(name + 1));
    ++*count;
  }
  return out.empty() ? "none" : out;
}

}  // namespace

checkpoint::Reducers reducers_of(const TrainingRun& run) {
  checkpoint::Reducers out;
  for (const auto& m : run.models) out.push_back(m.reducer);
  return out;
}

int shard_world_of(const TrainingRun& run) { return run.models.empty() ? run.world : run.models.front().reducer->shard_world(); }

std::string registered_text(const TrainingRun& run) {
  std::ostringstream os;
  for (size_t i = 0; i < run.schedulers.size(); ++i) os << "scheduler " << i << " " << run.schedulers[i].inner->name() << "\n";
  for (size_t i = 0; i < run.custom.size(); ++i) os << "custom " << i << " " << run.custom[i]->type_name() << "\n";
  return os.str();
}

void check_registered(const TrainingRun& run, const Files& files) {
  const auto it = files.find("rank0/registered.txt");
  const std::string saved = it == files.end() ? "" : it->second;  // checkpoints from before: none
  const std::string mine = registered_text(run);
  const struct {
    const char* kind;
    const char* what;
    const char* fix;
  } kinds[] = {{"scheduler", "prepared schedulers", "prepare the same schedulers (acc.prepare(scheduler))"},
               {"custom", "objects registered for checkpointing", "register the same objects "
                                                                 "(acc.register_for_checkpointing)"}};
  for (const auto& k : kinds) {
    size_t n_saved = 0, n_mine = 0;
    const std::string saved_list = kinds_listed(saved, k.kind, &n_saved);
    const std::string mine_list = kinds_listed(mine, k.kind, &n_mine);
    if (saved_list != mine_list)
      throw UsageError("load_state: the checkpoint holds " + std::to_string(n_saved) + " " + k.what + " (" + saved_list +
                       "), this program has " + std::to_string(n_mine) + " (" + mine_list + "). " + k.fix +
                       ", in the same order, before calling load_state");
  }
}

std::unique_ptr<torch::serialize::InputArchive> archive_of(const Files& files, const std::string& path,
                                                           const at::Device& device) {
  const auto it = files.find(path);
  if (it == files.end()) throw UsageError("load_state: the checkpoint has no " + path);
  auto archive = std::make_unique<torch::serialize::InputArchive>();
  std::istringstream in(it->second);
  archive->load_from(in, device);
  return archive;
}

std::vector<std::unique_ptr<torch::serialize::InputArchive>> optimizer_archives(
    const TrainingRun& run, const Files& files, const KeyValues& state, const std::string& checkpoint) {
  std::vector<std::unique_ptr<torch::serialize::InputArchive>> out;
  std::string error;
  try {
    const int64_t saved_world = get_int(state, "world_size");
    for (size_t i = 0; i < run.optimizers.size(); ++i) {
      const TrainingRun::OptimizerPart& opt = run.optimizers[i];
      const std::string dir = "optimizer_" + std::to_string(i) + "/";
      const std::string whole = "rank0/optimizer_" + std::to_string(i) + ".pt";
      const bool sharded_saved = files.count(dir + "layout.txt") > 0;
      if (!sharded_saved && !opt.sharded) {  // stage 0 on both sides: the file as it is
        out.push_back(archive_of(files, whole, run.device));
        continue;
      }
      const std::string what = "optimizer " + std::to_string(i) + " of checkpoint " + checkpoint;
      const checkpoint::Reducers reducers = reducers_of(run);
      const auto mine = checkpoint::params_of(*opt.inner, opt.sharded, reducers);
      const int groups = static_cast<int>(opt.inner->param_groups().size());
      checkpoint::OptimizerLayout saved;
      checkpoint::RankFile rank_file;
      if (sharded_saved) {
        saved = checkpoint::parse_layout(files.at(dir + "layout.txt"), checkpoint + "/" + dir + "layout.txt");
        checkpoint::check_same_params(saved, mine, groups, what);
        rank_file = [&](int r) { return archive_of(files, dir + "rank_" + std::to_string(r) + ".pt", run.device); };
      } else {
        saved = checkpoint::whole_layout(mine, groups);
        rank_file = [&](int) { return archive_of(files, whole, run.device); };
      }
      const auto held = checkpoint::held_tensors(*opt.inner, opt.sharded, reducers);
      checkpoint::Resharded r = checkpoint::reshard(*opt.inner, held, saved, rank_file, run.device, what);
      if (!r.note.empty()) log_main(run.rank, "load_state: " + what + ": " + r.note);
      const int64_t from_world = sharded_saved ? saved.world : saved_world;
      const int64_t from_stage = sharded_saved ? saved.stage : 0;
      const int64_t here = shard_world_of(run);
      if (from_world != here || from_stage != run.ddp.zero_stage) {
        log_main(run.rank, "load_state: optimizer state of " + std::to_string(from_world) + " ranks at stage " +
                        std::to_string(from_stage) + " re-sliced for " + std::to_string(here) + " ranks at stage " +
                        std::to_string(run.ddp.zero_stage) + (here < run.world ? " (ddp.shard_group machine)" : "") +
                        " (optimizer " + std::to_string(i) + ")");
      } else if (run.rank == 0) {
        bool same = true;
        for (size_t g = 0; g < held.size(); ++g) {
          std::vector<checkpoint::PieceLayout> layouts;
          for (const auto& h : held[g]) layouts.push_back(h.layout);
          same = same && layouts == saved.pieces[0][g];
        }
        if (!same)
          log_main(0, "load_state: optimizer state of " + std::to_string(from_world) + " ranks at stage " +
                      std::to_string(from_stage) + " re-sliced for this run's buckets, which differ from the saved "
                      "ones (bucket_cap_mb changed?) (optimizer " + std::to_string(i) + ")");
      }
      out.push_back(std::move(r.archive));
    }
  } catch (const std::exception& e) {
    error = e.what();
  }
  const Agreement outcome = agree_on_error(*run.comm, error);
  if (outcome.failed()) throw UsageError(outcome.message);
  return out;
}

std::string hook_state_file(const TrainingRun& run, size_t model, int64_t saved_world) {
  const int rank = saved_world == run.world ? run.rank : 0;
  return "ddp/model_" + std::to_string(model) + "_rank_" + std::to_string(rank) + ".pt";
}

std::set<std::string> rank_files_needed(const TrainingRun& run, const Files& files, int64_t saved_world) {
  std::set<std::string> out{"rng/rank_" + std::to_string(run.rank) + ".pt"};
  for (size_t i = 0; i < run.models.size(); ++i) out.insert(hook_state_file(run, i, saved_world));
  for (size_t i = 0; i < run.optimizers.size(); ++i) {
    const std::string dir = "optimizer_" + std::to_string(i) + "/";
    const auto layout = files.find(dir + "layout.txt");
    if (layout == files.end()) continue;
    const TrainingRun::OptimizerPart& opt = run.optimizers[i];
    const OptimizerLayout saved = parse_layout(layout->second, dir + "layout.txt");
    for (int r : saved_ranks_needed(saved, held_tensors(*opt.inner, opt.sharded, reducers_of(run))))
      out.insert(dir + "rank_" + std::to_string(r) + ".pt");
  }
  for (size_t i = 0; i < run.models.size(); ++i) {
    if (!files.count(model_dir(i) + "layout.txt")) continue;
    const SavedModel saved(files, i);
    for (const HeldTensor& h : held_entries(*run.models[i].module, *run.models[i].reducer, i))
      for (int r : saved.ranks_for(h.layout)) out.insert(model_rank_file(files, i, r));
  }
  return out;
}

std::vector<NamedTensors> hook_states_to_restore(const TrainingRun& run, const Files& files, int64_t saved_world) {
  std::vector<NamedTensors> out(run.models.size());
  const std::string& hook = run.ddp.comm_hook;
  for (size_t i = 0; i < run.models.size(); ++i) {
    const Reducer& reducer = *run.models[i].reducer;
    // Only that file was read (rank_files_needed).
    const std::string path = hook_state_file(run, i, saved_world);
    const bool saved = files.count(path) > 0;
    if (reducer.hook_state().empty()) {
      if (saved)
        log_main(run.rank, "load_state: the checkpoint has communication-hook state for model " + std::to_string(i) +
                        "; this run's comm_hook is " + hook + ", so it is ignored");
      continue;
    }
    if (!saved) {
      log_main(run.rank, "load_state: the checkpoint has no " + hook + " state for model " + std::to_string(i) +
                      " (saved with another comm_hook): its state and step count start afresh");
      continue;
    }
    std::string note;
    NamedTensors state =
        reducer.hook_state_for_world(unpickle(files, path), static_cast<int>(saved_world), run.world, &note);
    if (!note.empty()) log_main(run.rank, "load_state: " + note);
    const std::string why = reducer.hook_state_mismatch(state);
    if (!why.empty())
      throw UsageError("load_state: the checkpoint's " + hook + " state of model " + std::to_string(i) +
                       " does not fit this run: " + why + ". Resume with the ddp settings it was saved with "
                       "(config/env.txt in the checkpoint lists them), or from a checkpoint saved with comm_hook none");
    out[i] = std::move(state);
  }
  return out;
}

}  // namespace xlaunch::checkpoint
