#!/usr/bin/env python3
"""Records Gymnasium 1.4's own trajectories of the classic-control set, for gym_equivalence_test.

usage: gym_trace.py OUT.json [STEPS]   (default 10000 steps of each environment)

Each environment is gymnasium.make(id), with its TimeLimit, stepped STEPS times and reset whenever
an episode terminates or is truncated. The trace holds, per environment, Gymnasium's spaces and
max_episode_steps, and per episode the initial state (env.unwrapped.state), the first observation,
and per step the action, observation, reward, terminated, truncated and the state after it. Floats are written by the
json module (repr), so every finite double and float32 value reads back exactly.

Actions are seeded: even episodes draw them at random from the action space; odd ones follow a
simple controller (90% of its steps) that reaches the ends random actions rarely reach: CartPole
balanced to its time limit, Acrobot and MountainCar driven to their goals. Pendulum's torques are
drawn from [-2.5, 2.5], past the action space's [-2, 2], so the environment's clipping is replayed;
MountainCarContinuous's from [-1.5, 1.5] (even episodes), or pushed along the velocity to the goal.

After those STEPS, a few short episodes per environment start from chosen edge states (put into
env.unwrapped.state after a reset) that the random and controlled episodes never reach: Acrobot's
and MountainCar's velocity bounds, MountainCar's left wall, Pendulum's speed limit; they are
counted apart, as "edge_steps".

Fails (does not skip) when gymnasium 1.4 is missing: scripts/install-deps.sh --test.
"""
import json
import sys

from gym_peer import floats, gymnasium, np

SEED = 27
ENV_IDS = ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0"]
BOX = {"Pendulum-v1", "MountainCarContinuous-v0"}  # one float32 action


def controller(env_id, state, rng):
    """The odd episodes' action from the physical state (10% of steps random)."""
    if rng.random() < 0.1:
        return None
    if env_id == "CartPole-v1":  # push under the falling pole
        x, x_dot, theta, theta_dot = state
        return int(theta + 0.5 * theta_dot + 0.05 * x + 0.1 * x_dot > 0)
    if env_id == "Acrobot-v1":  # pump energy: torque along the second joint's velocity
        return 2 if state[3] > 0 else 0
    if env_id == "MountainCar-v0":  # pump energy: push along the velocity
        return 2 if state[1] > 0 else 0
    return None


def action_for(env, env_id, episode, rng):
    if env_id == "Pendulum-v1":
        return rng.uniform(-2.5, 2.5, size=(1,)).astype(np.float32)
    if env_id == "MountainCarContinuous-v0":  # odd episodes pump energy to the goal; the rest past [-1, 1]
        if episode % 2 and rng.random() >= 0.1:
            return np.array([1.0 if env.unwrapped.state[1] > 0 else -1.0], dtype=np.float32)
        return rng.uniform(-1.5, 1.5, size=(1,)).astype(np.float32)
    a = controller(env_id, env.unwrapped.state, rng) if episode % 2 else None
    return int(rng.integers(env.action_space.n)) if a is None else a


def space(s):
    """A space's bounds; JSON has no infinity, so an unbounded element is "inf" or "-inf"."""
    if isinstance(s, gymnasium.spaces.Discrete):
        return {"n": int(s.n)}
    bound = lambda v: float(v) if np.isfinite(v) else ("inf" if v > 0 else "-inf")
    return {"low": [bound(v) for v in s.low.ravel()], "high": [bound(v) for v in s.high.ravel()]}


# Per environment: (initial state, the action every step takes).
EDGES = {
    "CartPole-v1": [([0.0, 0.0, 0.2, 0.5], 1)],  # falls at once
    "Acrobot-v1": [([0.0, 0.0, 12.4, 28.0], 2), ([0.3, -0.2, -12.4, -28.0], 0)],  # past 4*pi and 9*pi
    "MountainCar-v0": [([-0.5, 0.0699], 2), ([-1.15, -0.065], 0)],  # max_speed; the left wall
    "Pendulum-v1": [([np.pi, 7.9], 2.0), ([-np.pi, -7.9], -2.5)],  # theta_dot clipped at 8
    "MountainCarContinuous-v0": [([-1.15, -0.065], -1.0), ([0.40, 0.05], 1.0)],  # the left wall; the goal
}
EDGE_STEPS = 40


def edge_episodes(env_id):
    env = gymnasium.make(env_id)
    episodes, steps = [], 0
    for state, action in EDGES[env_id]:
        env.reset(seed=SEED)
        env.unwrapped.state = np.array(state, dtype=np.float64)
        u = env.unwrapped
        obs = u._get_ob() if env_id == "Acrobot-v1" else u._get_obs() if env_id == "Pendulum-v1" else \
            np.array(state, dtype=np.float32)
        episode = {"initial_state": floats(u.state), "reset_observation": floats(obs), "actions": [],
                   "observations": [], "rewards": [], "terminated": [], "truncated": [], "states": []}
        for _ in range(EDGE_STEPS):
            a = np.array([action], dtype=np.float32) if env_id in BOX else action
            obs, reward, terminated, truncated, _ = env.step(a)
            episode["actions"].append(float(a[0]) if env_id in BOX else int(a))
            episode["observations"].append(floats(obs))
            episode["rewards"].append(float(reward))
            episode["terminated"].append(bool(terminated))
            episode["truncated"].append(bool(truncated))
            episode["states"].append(floats(env.unwrapped.state))
            steps += 1
            if terminated or truncated:
                break
        episodes.append(episode)
    env.close()
    return episodes, steps


def trace(env_id, steps):
    env = gymnasium.make(env_id)
    rng = np.random.default_rng(SEED)
    out = {"id": env_id, "max_episode_steps": env.spec.max_episode_steps,
           "observation_space": space(env.observation_space), "action_space": space(env.action_space),
           "episodes": []}
    episode = None
    for t in range(steps):
        if episode is None:
            obs, _ = env.reset(seed=SEED if t == 0 else None)
            episode = {"initial_state": floats(env.unwrapped.state), "reset_observation": floats(obs),
                       "actions": [], "observations": [], "rewards": [], "terminated": [], "truncated": [],
                       "states": []}
            out["episodes"].append(episode)
        action = action_for(env, env_id, len(out["episodes"]) - 1, rng)
        obs, reward, terminated, truncated, _ = env.step(action)
        episode["actions"].append(floats(action)[0] if env_id in BOX else int(action))
        episode["observations"].append(floats(obs))
        episode["rewards"].append(float(reward))
        episode["terminated"].append(bool(terminated))
        episode["truncated"].append(bool(truncated))
        episode["states"].append(floats(env.unwrapped.state))
        if terminated or truncated:
            episode = None
    env.close()
    edges, out["edge_steps"] = edge_episodes(env_id)
    out["episodes"] += edges
    ends = [(e["terminated"][-1], e["truncated"][-1]) for e in out["episodes"]]
    print(f"{env_id}: {steps} steps, {len(ends)} episodes, {sum(te for te, _ in ends)} terminated, "
          f"{sum(tr for _, tr in ends)} truncated")
    return out


def main():
    if len(sys.argv) not in (2, 3):
        sys.exit(__doc__)
    steps = int(sys.argv[2]) if len(sys.argv) == 3 else 10000
    result = {"gymnasium": gymnasium.__version__, "numpy": np.__version__, "steps": steps,
              "envs": [trace(env_id, steps) for env_id in ENV_IDS]}
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, allow_nan=False)


if __name__ == "__main__":
    main()
