// save_run (state/training_run.h): every rank's part gathered on rank 0, which writes the files.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <fstream>
#include <sstream>

#include "comm/agree.h"
#include "ddp/accumulation.h"
#include "state/loader_state.h"
#include "state/model_shards.h"
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

// A sharded optimizer's state (ZeRO stage >= 1), on rank 0: every rank's optimizer file, and
// every rank's pieces (checkpoint::rank_layout_text). Empty for an optimizer that is not sharded.
struct OptimizerShards {
  std::vector<std::string> files;
  std::string pieces;
};

// Every rank's `mine`, on rank 0 (collective; the others get an empty list). One rank at a time,
// as a broadcast: all of them at once could be the size of the whole model or optimizer, beyond
// what one allgather may carry.
std::vector<std::string> gather_on_rank0(const TrainingRun& run, const std::string& mine) {
  std::vector<std::string> out;
  for (int r = 0; r < run.world; ++r) {
    std::string got = r == 0 ? mine : broadcast_string(*run.comm, run.rank == r ? mine : std::string(), r);
    if (run.rank == 0) out.push_back(std::move(got));
  }
  return out;
}

// Every rank's communication-hook state of every model, on rank 0 (collective): [i][r] is rank
// r's of model i, pickled (empty: none).
std::vector<std::vector<std::string>> gather_hook_states(const TrainingRun& run) {
  std::vector<std::vector<std::string>> out(run.models.size());
  for (size_t i = 0; i < run.models.size(); ++i) {
    const Named state = run.models[i].reducer->hook_state();
    if (state.empty()) continue;  // the same on every rank: the hook is one of the agreed settings
    out[i] = gather_on_rank0(run, pickle_bytes(state));
  }
  return out;
}

// Every rank's state of every sharded optimizer, on rank 0 (collective).
std::vector<OptimizerShards> gather_optimizer_shards(const TrainingRun& run) {
  std::vector<OptimizerShards> out(run.optimizers.size());
  for (size_t i = 0; i < run.optimizers.size(); ++i) {
    const TrainingRun::OptimizerPart& opt = run.optimizers[i];
    if (!opt.sharded) continue;  // the same on every rank: zero_stage is an agreed setting
    std::vector<std::vector<checkpoint::PieceLayout>> pieces;
    for (const auto& group : checkpoint::held_tensors(*opt.inner, opt.sharded, reducers_of(run))) {
      pieces.emplace_back();
      for (const auto& h : group) pieces.back().push_back(h.layout);
    }
    out[i].files = gather_on_rank0(run, archive_bytes([&](auto& ar) { opt.inner->save(ar); }));
    for (std::string& text : gather_on_rank0(run, checkpoint::rank_layout_text(run.rank, pieces))) out[i].pieces += text;
  }
  return out;
}

// Every rank's shard of every model ZeRO stage 3 shards, on rank 0 (collective): [i] is empty
// for a model kept whole, else its files (state/model_shards.h).
std::vector<Files> gather_model_shards(const TrainingRun& run) {
  std::vector<Files> out(run.models.size());
  for (size_t i = 0; i < run.models.size(); ++i) {
    const Reducer& reducer = *run.models[i].reducer;
    if (!shards_params(reducer)) continue;  // the same on every rank: zero_stage is agreed
    ShardFile mine = shard_file(reducer, i);
    const std::vector<std::string> bytes = gather_on_rank0(run, mine.bytes);
    mine.bytes.clear();
    const std::vector<std::string> texts = gather_on_rank0(run, mine.layout);
    if (run.rank != 0) continue;
    out[i] = sharded_model_files(reducer, *run.models[i].module, i, texts);
    for (size_t r = 0; r < bytes.size(); ++r) out[i][model_dir(i) + "rank_" + std::to_string(r) + ".pt"] = bytes[r];
  }
  return out;
}

// stream_states[r]: rank r's streaming loaders' positions (empty: no loader streams).
Files files_of(const TrainingRun& run, const std::vector<std::string>& rng,
               const std::vector<std::vector<std::string>>& hook_states, const std::vector<std::string>& stream_states,
               const std::vector<OptimizerShards>& shards, std::vector<Files> model_shards) {
  Files files;
  const bool any_sharded_model =
      std::any_of(model_shards.begin(), model_shards.end(), [](const Files& f) { return !f.empty(); });
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
      const bool in_shards = !model_shards[i].empty() && std::find(sharded.begin(), sharded.end(), name) != sharded.end();
      meta << "model " << i << " '" << name << "' " << describe(t) << (in_shards ? " sharded" : "") << "\n";
      if (!in_shards) whole.emplace_back(name, t);
    }
    files["rank0/model_" + std::to_string(i) + ".pt"] = pickle_bytes(whole);
    if (!model_shards[i].empty())
      meta << "model " << i << " sharded over " << run.world << " ranks (zero_stage 3)\n";
    files.merge(model_shards[i]);
  }
  for (size_t i = 0; i < run.optimizers.size(); ++i) {
    const TrainingRun::OptimizerPart& opt = run.optimizers[i];
    state["optimizer." + std::to_string(i) + ".steps"] = std::to_string(*opt.steps);
    if (!opt.sharded) {
      files["rank0/optimizer_" + std::to_string(i) + ".pt"] = archive_bytes([&](auto& ar) { opt.inner->save(ar); });
      continue;
    }
    // Sharded: every rank's file, and what their pieces hold (state/sharded_layout.h).
    const std::string dir = "optimizer_" + std::to_string(i) + "/";
    for (size_t r = 0; r < shards[i].files.size(); ++r) files[dir + "rank_" + std::to_string(r) + ".pt"] = shards[i].files[r];
    checkpoint::OptimizerLayout layout;
    layout.world = run.world;
    layout.stage = run.ddp.zero_stage;
    layout.groups = static_cast<int>(opt.inner->param_groups().size());
    layout.params = checkpoint::params_of(*opt.inner, opt.sharded, reducers_of(run));
    files[dir + "layout.txt"] = checkpoint::layout_text(layout) + shards[i].pieces;
    meta << "optimizer " << i << " sharded over " << run.world << " ranks (zero_stage " << layout.stage << ")\n";
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
  for (size_t r = 0; r < rng.size(); ++r) files["rng/rank_" + std::to_string(r) + ".pt"] = rng[r];
  for (size_t i = 0; i < hook_states.size(); ++i)
    for (size_t r = 0; r < hook_states[i].size(); ++r)
      files["ddp/model_" + std::to_string(i) + "_rank_" + std::to_string(r) + ".pt"] = hook_states[i][r];
  if (!hook_states.empty() && !hook_states.front().empty())
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

}  // namespace

void save_run(const std::string& dir, const TrainingRun& run) {
  // Every rank's generators differ (dropout masks, device_specific seeds): rank 0 writes them all.
  const std::vector<std::string> rng = run.comm->allgather_strings(rng_bytes(run.device));
  const auto hook_states = gather_hook_states(run);
  const auto shards = gather_optimizer_shards(run);
  auto model_shards = gather_model_shards(run);
  // Streaming loaders stand differently on every rank (loader_state.h).
  const std::vector<std::string> streams =
      checkpoint::any_stream(*run.loaders)
          ? run.comm->allgather_strings(checkpoint::stream_positions_text(*run.loaders, run.rank, run.world))
          : std::vector<std::string>{};
  std::string error;
  if (run.rank == 0) {
    try {
      checkpoint::write_atomically(dir, files_of(run, rng, hook_states, streams, shards, std::move(model_shards)));
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  // The outcome doubles as the barrier: nobody returns before the checkpoint exists.
  const Agreement outcome = agree_on_error(*run.comm, error);
  if (outcome.failed()) throw Error("save_state(" + dir + ") failed on rank 0: " + outcome.message);
}

}  // namespace xlaunch::checkpoint
