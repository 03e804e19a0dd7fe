// PPO on CartPole-v1, data-parallel through the Accelerator, with a batched environment pool per
// rank:
//
//   xlaunch run -n 2 examples/ppo_cartpole
//
// Each rank steps its own xlaunch::rl::EnvPool (different seeds per rank; --backend tensor steps
// them as tensors, rl::TensorEnv, on the rank's device, and then the whole loop stays there: the
// finished episodes are read from the batches' tensors once per update, when logged), collects --num_steps
// steps of its --num_envs environments, and runs PPO's update on that rollout: clipped surrogate
// objective, clipped value loss, entropy bonus, generalised advantage estimation (GAE), minibatch
// epochs with advantages normalised per minibatch, gradient clipping, a linearly annealed learning
// rate (CleanRL's ppo.py, with its clipped value loss), with most of RL Baselines3 Zoo's tuned
// hyperparameters for CartPole-v1 (8 environments of 32 steps per update over the job, gamma 0.98,
// lambda 0.8, 20 epochs of one minibatch, lr 1e-3 annealed, no entropy bonus; its clip range stays
// 0.2 here where the Zoo anneals it). Advantages are normalised over each rank's minibatch. The prepared model averages the gradients of
// the ranks' minibatches in backward, so the ranks hold the same policy throughout and the job
// learns from every rank's experience. The pool's wait for environments counts as data wait in
// the utilization report.
//
// The job stops once the mean return of the last 100 episodes finished (on any rank) reaches
// --target, or after --total_steps environment steps over all ranks. Main process, every
// --print_every updates and at the end:
//
//   ppo: update=U env_steps=S episodes=E mean_return_last100=R env_sps=X pool_sps=P
//
// env_steps and episodes are the job's (every rank's); env_sps is the job's environment steps per
// second of training (rollouts and updates); pool_sps is the main process's pool alone: its
// environment steps per second of waiting in pool.step().
//   ppo: reached mean_return_last100=R >= 475 at env_steps=S of 500000 (U updates, T s)
//
// (or "ppo: not reached ..." and exit status 1). Options and results: docs/rl.md.
#include <torch/nn/init.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/sequential.h>
#include <torch/nn/modules/activation.h>
#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>
#include <torch/serialize.h>
#include <ATen/ops/randperm.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <string>
#include <utility>
#include <vector>

#include "xlaunch/accelerator.h"
#include "xlaunch/lr_scheduler.h"
#include "xlaunch/rl/env_pool.h"

namespace {

struct Options {
  std::string env_id = "CartPole-v1";
  int64_t num_envs = 4;         // per rank
  int64_t num_steps = 32;       // per environment per rollout
  int64_t total_steps = 500000; // environment steps over all ranks
  double target = 475;          // stop once the last 100 episodes' mean return reaches it
  double lr = 1e-3;
  int update_epochs = 20;
  int64_t num_minibatches = 1;
  double gamma = 0.98, gae_lambda = 0.8, clip_coef = 0.2, ent_coef = 0.0, vf_coef = 0.5;
  double max_grad_norm = 0.5;
  uint64_t seed = 1;
  int num_threads = 0;          // the pool's threads (0: its default, this rank's share of the cores)
  std::string backend = "threads";  // threads: EnvPool's threads; tensor: TensorEnv (docs/rl.md)
  int64_t print_every = 10;     // updates between progress lines
  std::string project_dir;      // "": the config's project_dir, else runs/ppo_cartpole
};

torch::nn::Linear layer(int64_t in, int64_t out, double gain) {
  torch::nn::Linear l(in, out);
  torch::NoGradGuard no_grad;
  torch::nn::init::orthogonal_(l->weight, gain);
  torch::nn::init::constant_(l->bias, 0.0);
  return l;
}

// CleanRL's agent: separate actor and critic MLPs (64-64, tanh), orthogonal initialisation.
struct AgentImpl : torch::nn::Module {
  AgentImpl(int64_t obs, int64_t actions) {
    const double g = std::sqrt(2.0);
    critic = register_module("critic", torch::nn::Sequential(layer(obs, 64, g), torch::nn::Tanh(), layer(64, 64, g),
                                                             torch::nn::Tanh(), layer(64, 1, 1.0)));
    actor = register_module("actor", torch::nn::Sequential(layer(obs, 64, g), torch::nn::Tanh(), layer(64, 64, g),
                                                           torch::nn::Tanh(), layer(64, actions, 0.01)));
  }
  // (action logits, value) for a batch of observations.
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& obs) {
    return {actor->forward(obs), critic->forward(obs).squeeze(-1)};
  }
  torch::nn::Sequential critic{nullptr}, actor{nullptr};
};
TORCH_MODULE(Agent);

// The returns of the episodes this rank finished, newest last, each with the job's environment
// steps when it ended (this rank's steps times the ranks: they advance in lockstep), so the ranks'
// windows merge into the job's last 100 episodes.
struct EpisodeWindow {
  void add(double ret, double job_steps) {
    items.emplace_back(job_steps, ret);
    if (items.size() > kSize) items.pop_front();
  }
  std::vector<double> flat() const {
    std::vector<double> v;
    for (const auto& [s, r] : items) v.insert(v.end(), {s, r});
    return v;
  }
  static constexpr size_t kSize = 100;
  std::deque<std::pair<double, double>> items;
};

// The job's episodes so far, and the mean return of its last 100 (NaN before any) over every rank's
// window. Collective: every rank gets the same answer, so all stop together.
struct JobEpisodes {
  int64_t count = 0;
  double mean_last100 = std::nan("");
  size_t in_window = 0;
};
JobEpisodes job_episodes(xlaunch::Accelerator& acc, const EpisodeWindow& mine, int64_t my_count) {
  std::vector<double> sent = mine.flat();
  sent.push_back(static_cast<double>(my_count));  // last: this rank's episodes so far
  JobEpisodes job;
  std::vector<std::pair<double, double>> all;
  for (const auto& v : acc.gather_object(sent)) {
    job.count += static_cast<int64_t>(v.back());
    for (size_t i = 0; i + 2 < v.size(); i += 2) all.emplace_back(v[i], v[i + 1]);
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  job.in_window = std::min(all.size(), EpisodeWindow::kSize);
  double sum = 0;
  for (size_t i = 0; i < job.in_window; ++i) sum += all[i].second;
  if (job.in_window) job.mean_last100 = sum / static_cast<double>(job.in_window);
  return job;
}

int train(const Options& o) {
  auto options = xlaunch::AcceleratorOptions::from_env();
  if (options.project_dir.empty()) options.project_dir = o.project_dir.empty() ? "runs/ppo_cartpole" : o.project_dir;
  xlaunch::Accelerator acc(options);
  acc.set_seed(o.seed);
  const int64_t world = acc.num_processes();

  xlaunch::rl::EnvPoolOptions po;
  po.env_id = o.env_id;
  po.num_envs = o.num_envs;
  po.num_threads = o.num_threads;
  po.seed = o.seed * 1000003ULL + static_cast<uint64_t>(acc.process_index());  // each rank its own episodes
  po.device = acc.device();
  po.autoreset = xlaunch::rl::Autoreset::SameStep;  // the final observation bootstraps a truncated episode
  if (o.backend == "tensor") po.backend = xlaunch::rl::EnvBackend::Tensor;
  xlaunch::rl::EnvPool pool(po);
  const auto& spec = pool.spec();
  if (spec.action_space.kind != xlaunch::rl::Space::Kind::Discrete) {
    acc.print("ppo_cartpole: ", spec.id, " has a continuous action space (", spec.action_space.describe(),
              "); this example's policy is categorical: choose a Discrete environment");
    return 2;
  }
  const int64_t obs_dim = spec.observation_space.numel();

  Agent net(obs_dim, spec.action_space.n);
  auto agent = acc.prepare(net);
  torch::optim::Adam adam(agent->parameters(), torch::optim::AdamOptions(o.lr).eps(1e-5));
  auto& opt = acc.prepare(adam);
  const int64_t batch = o.num_envs * o.num_steps;  // per rank
  const int64_t minibatch = batch / o.num_minibatches;
  const int64_t num_updates = o.total_steps / (batch * world);
  if (minibatch < 1 || num_updates < 1) {
    acc.print("ppo_cartpole: --total_steps ", o.total_steps, " allows no update of ", batch * world,
              " steps with --num_minibatches ", o.num_minibatches, ": raise --total_steps or lower --num_envs/--num_steps");
    return 2;
  }
  xlaunch::ScheduleOptions schedule;
  schedule.total_steps = num_updates * o.update_epochs * o.num_minibatches;
  auto linear = xlaunch::get_scheduler("linear", adam, schedule);
  auto& sched = acc.prepare(*linear);
  acc.init_trackers("ppo_cartpole", {{"env_id", o.env_id},
                                      {"num_envs_per_rank", o.num_envs},
                                      {"num_steps", o.num_steps},
                                      {"processes", static_cast<int64_t>(world)},
                                      {"lr", o.lr},
                                      {"seed", static_cast<double>(o.seed)}});

  const auto dev = acc.device();
  const auto f32 = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  auto obs_buf = torch::zeros({o.num_steps, o.num_envs, obs_dim}, f32);
  auto act_buf = torch::zeros({o.num_steps, o.num_envs}, f32.dtype(torch::kLong));
  auto logp_buf = torch::zeros({o.num_steps, o.num_envs}, f32);
  auto rew_buf = torch::zeros({o.num_steps, o.num_envs}, f32);
  auto done_buf = torch::zeros({o.num_steps, o.num_envs}, f32);
  auto val_buf = torch::zeros({o.num_steps, o.num_envs}, f32);
  // --backend tensor: the episodes that ended at each step of the rollout, kept on the device.
  const bool tensor = o.backend == "tensor";
  auto ep_ret_buf = torch::zeros({o.num_steps, o.num_envs}, f32);
  auto ep_len_buf = torch::zeros({o.num_steps, o.num_envs}, f32.dtype(torch::kLong));

  EpisodeWindow window;
  int64_t episodes = 0;
  auto next_obs = pool.reset().obs;
  const auto start = std::chrono::steady_clock::now();
  double env_seconds = 0;
  JobEpisodes job;
  int64_t update = 0;
  bool reached = false;
  while (update < num_updates && !reached) {
    ++update;
    // Rollout: the policy samples an action per environment; the pool steps them all.
    for (int64_t t = 0; t < o.num_steps; ++t) {
      obs_buf[t].copy_(next_obs);
      torch::Tensor action;
      {
        torch::NoGradGuard no_grad;
        auto [logits, value] = agent(next_obs);
        const auto logp = torch::log_softmax(logits, -1);
        action = torch::multinomial(logp.exp(), 1).squeeze(-1);
        logp_buf[t].copy_(logp.gather(-1, action.unsqueeze(-1)).squeeze(-1));
        val_buf[t].copy_(value);
      }
      act_buf[t].copy_(action);
      const auto t0 = std::chrono::steady_clock::now();
      auto b = pool.step(action);
      env_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      auto reward = b.reward;
      const auto truncated = b.truncated;
      // Bootstrap a cut-off episode from its last observation. The pool's host list says whether any
      // ended (no sync); the tensor backend always computes it, masked, rather than ask the device.
      if (tensor || !b.episodes.empty()) {
        torch::NoGradGuard no_grad;
        // Only a cut-off episode: one that also terminated on that step has no value to come.
        const auto cut = truncated.logical_and(b.terminated.logical_not()).to(torch::kFloat32);
        reward = reward + o.gamma * agent(b.final_obs).second * cut;
      }
      rew_buf[t].copy_(reward);
      done_buf[t].copy_(b.terminated.logical_or(truncated).to(torch::kFloat32));
      next_obs = b.obs;
      if (tensor) {
        ep_ret_buf[t].copy_(b.episode_return);
        ep_len_buf[t].copy_(b.episode_length);
        continue;
      }
      const double job_steps = static_cast<double>(pool.env_steps() * world);
      for (const auto& ep : b.episodes) {
        window.add(ep.ret, job_steps);
        ++episodes;
      }
    }
    if (tensor) {  // the rollout's one read of its episodes, for the log: step by step, in environment order
      const auto len_host = ep_len_buf.cpu(), ret_host = ep_ret_buf.cpu();
      const auto lens = len_host.accessor<int64_t, 2>();
      const auto rets = ret_host.accessor<float, 2>();
      const int64_t before = pool.env_steps() - o.num_steps * o.num_envs;
      for (int64_t t = 0; t < o.num_steps; ++t)
        for (int64_t i = 0; i < o.num_envs; ++i) {
          if (lens[t][i] == 0) continue;
          window.add(rets[t][i], static_cast<double>((before + (t + 1) * o.num_envs) * world));
          ++episodes;
        }
    }
    // GAE(lambda): done_buf[t] says obs t+1 starts a new episode.
    torch::Tensor advantages = torch::zeros_like(rew_buf), returns;
    {
      torch::NoGradGuard no_grad;
      auto next_value = agent(next_obs).second;
      auto last = torch::zeros({o.num_envs}, f32);
      for (int64_t t = o.num_steps - 1; t >= 0; --t) {
        const auto nonterminal = 1.0 - done_buf[t];
        const auto next_v = t == o.num_steps - 1 ? next_value : val_buf[t + 1];
        const auto delta = rew_buf[t] + o.gamma * next_v * nonterminal - val_buf[t];
        last = delta + o.gamma * o.gae_lambda * nonterminal * last;
        advantages[t].copy_(last);
      }
      returns = advantages + val_buf;
    }
    // PPO's update: minibatch epochs over this rank's rollout; backward averages over the ranks.
    const auto b_obs = obs_buf.reshape({batch, obs_dim});
    const auto b_act = act_buf.reshape({batch});
    const auto b_logp = logp_buf.reshape({batch});
    const auto b_adv = advantages.reshape({batch});
    const auto b_ret = returns.reshape({batch});
    const auto b_val = val_buf.reshape({batch});
    for (int epoch = 0; epoch < o.update_epochs; ++epoch) {
      const auto order = torch::randperm(batch, torch::TensorOptions().dtype(torch::kLong).device(dev));
      for (int64_t s = 0; s + minibatch <= batch; s += minibatch) {
        const auto idx = order.slice(0, s, s + minibatch);
        auto [logits, value] = agent(b_obs.index_select(0, idx));
        const auto logp_all = torch::log_softmax(logits, -1);
        const auto logp = logp_all.gather(-1, b_act.index_select(0, idx).unsqueeze(-1)).squeeze(-1);
        const auto ratio = (logp - b_logp.index_select(0, idx)).exp();
        auto adv = b_adv.index_select(0, idx);
        adv = (adv - adv.mean()) / (adv.std() + 1e-8);
        const auto pg_loss = torch::max(-adv * ratio, -adv * ratio.clamp(1 - o.clip_coef, 1 + o.clip_coef)).mean();
        const auto ret = b_ret.index_select(0, idx);
        const auto old_v = b_val.index_select(0, idx);
        const auto v_clipped = old_v + (value - old_v).clamp(-o.clip_coef, o.clip_coef);
        const auto v_loss = 0.5 * torch::max((value - ret).pow(2), (v_clipped - ret).pow(2)).mean();
        const auto entropy = -(logp_all.exp() * logp_all).sum(-1).mean();
        const auto loss = pg_loss - o.ent_coef * entropy + o.vf_coef * v_loss;
        opt.zero_grad();
        acc.backward(loss);
        acc.clip_grad_norm_(o.max_grad_norm);
        opt.step();
        sched.step();
      }
    }
    job = job_episodes(acc, window, episodes);
    reached = job.in_window >= EpisodeWindow::kSize && job.mean_last100 >= o.target;
    const double job_steps = static_cast<double>(pool.env_steps() * world);
    const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double env_sps = job_steps / std::max(wall, 1e-9);
    const double pool_sps = static_cast<double>(pool.env_steps()) / std::max(env_seconds, 1e-9);
    acc.log({{"charts/mean_return_last100", std::isnan(job.mean_last100) ? 0.0 : job.mean_last100},
             {"charts/env_sps", env_sps}, {"charts/pool_sps", pool_sps}},
            static_cast<int64_t>(job_steps));
    if (reached || update % o.print_every == 0 || update == num_updates) {
      char line[256];
      std::snprintf(line, sizeof line, "ppo: update=%lld env_steps=%.0f episodes=%lld mean_return_last100=%.1f env_sps=%.0f pool_sps=%.0f",
                    static_cast<long long>(update), job_steps, static_cast<long long>(job.count), job.mean_last100, env_sps,
                    pool_sps);
      acc.print(line);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  char line[256];
  std::snprintf(line, sizeof line, "ppo: %s mean_return_last100=%.1f %s %.0f at env_steps=%lld of %lld (%lld updates, %.1f s)",
                reached ? "reached" : "not reached", job.mean_last100, reached ? ">=" : "<", o.target,
                static_cast<long long>(pool.env_steps() * world), static_cast<long long>(o.total_steps),
                static_cast<long long>(update), seconds);
  acc.print(line);
  acc.end_training();
  return reached ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"PPO on CartPole-v1 with an environment pool per rank (docs/rl.md)"};
  app.add_option("--env_id", o.env_id, "a registered environment with a Discrete action space");
  app.add_option("--num_envs", o.num_envs, "environments per rank")->check(CLI::PositiveNumber);
  app.add_option("--num_steps", o.num_steps, "steps per environment per rollout")->check(CLI::PositiveNumber);
  app.add_option("--total_steps", o.total_steps, "environment steps over all ranks")->check(CLI::PositiveNumber);
  app.add_option("--target", o.target, "stop once the last 100 episodes' mean return reaches this");
  app.add_option("--lr", o.lr, "Adam's learning rate, annealed linearly to 0");
  app.add_option("--update_epochs", o.update_epochs)->check(CLI::PositiveNumber);
  app.add_option("--num_minibatches", o.num_minibatches)->check(CLI::PositiveNumber);
  app.add_option("--gamma", o.gamma);
  app.add_option("--gae_lambda", o.gae_lambda);
  app.add_option("--clip_coef", o.clip_coef);
  app.add_option("--ent_coef", o.ent_coef);
  app.add_option("--vf_coef", o.vf_coef);
  app.add_option("--max_grad_norm", o.max_grad_norm);
  app.add_option("--seed", o.seed);
  app.add_option("--num_threads", o.num_threads, "the pool's threads per rank (0: this rank's share of the cores)");
  app.add_option("--backend", o.backend, "threads (the pool's threads) or tensor (every environment as tensors)")
      ->check(CLI::IsMember({"threads", "tensor"}));
  app.add_option("--print_every", o.print_every, "updates between progress lines")->check(CLI::PositiveNumber);
  app.add_option("--project_dir", o.project_dir);
  CLI11_PARSE(app, argc, argv);
  return train(o);
}
