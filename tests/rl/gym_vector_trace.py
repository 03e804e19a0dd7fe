#!/usr/bin/env python3
"""Records Gymnasium 1.4's SyncVectorEnv of CartPole-v1, for gym_equivalence_test's GymVector tests:
automatic reset and time limits of a vector of environments, in both autoreset modes.

usage: gym_vector_trace.py OUT.json

N = 8 environments, 1,200 steps per mode (NextStep, SameStep), seeded. Even environments act at
random; odd ones balance the pole (90% of their steps), so episodes both terminate and reach the
500-step limit. Per mode: every environment's initial states in the order its episodes start
(env.unwrapped.state right after each reset, automatic ones included), and per step the actions,
observations, rewards, terminated, truncated, (SameStep) the final observations of the rows that
ended (zeros elsewhere), and every environment's state after the step.

Fails (does not skip) when gymnasium 1.4 is missing: scripts/install-deps.sh --test.
"""
import json
import sys

from gym_peer import floats, gymnasium, np
from gymnasium.vector import AutoresetMode, SyncVectorEnv

N, STEPS, SEED = 8, 1200, 41


def record(mode):
    envs = SyncVectorEnv([lambda: gymnasium.make("CartPole-v1") for _ in range(N)], autoreset_mode=mode)
    rng = np.random.default_rng(SEED)
    obs, _ = envs.reset(seed=SEED)
    initial = [[floats(envs.envs[i].unwrapped.state)] for i in range(N)]
    out = {"mode": "NextStep" if mode == AutoresetMode.NEXT_STEP else "SameStep", "reset_obs": floats(obs),
           "actions": [], "obs": [], "rewards": [], "terminated": [], "truncated": [], "final_obs": [],
           "states": []}
    done = np.zeros(N, dtype=bool)
    for _ in range(STEPS):
        actions = rng.integers(0, 2, size=N)
        for i in range(1, N, 2):
            x, x_dot, theta, theta_dot = envs.envs[i].unwrapped.state
            if rng.random() >= 0.1:
                actions[i] = int(theta + 0.5 * theta_dot + 0.05 * x + 0.1 * x_dot > 0)
        obs, reward, terminated, truncated, info = envs.step(actions)
        now_done = terminated | truncated
        # Which environments started an episode in this step: NextStep, those that ended in the
        # last one; SameStep, those that end in this one.
        started = done if mode == AutoresetMode.NEXT_STEP else now_done
        for i in np.nonzero(started)[0]:
            initial[i].append(floats(envs.envs[i].unwrapped.state))
        done = now_done
        final = np.zeros((N, 4))
        if mode == AutoresetMode.SAME_STEP and "final_obs" in info:
            for i in np.nonzero(info["_final_obs"])[0]:
                final[i] = info["final_obs"][i]
        out["actions"].append([int(a) for a in actions])
        out["obs"].append(floats(obs))
        out["rewards"].append(floats(reward))
        out["terminated"].append([bool(v) for v in terminated])
        out["truncated"].append([bool(v) for v in truncated])
        out["final_obs"].append(floats(final))
        out["states"].append([floats(e.unwrapped.state) for e in envs.envs])
    envs.close()
    out["initial_states"] = initial
    ends = sum(int(np.sum(t)) for t in out["terminated"]), sum(int(np.sum(t)) for t in out["truncated"])
    print(f"{out['mode']}: {N} environments, {STEPS} steps, {ends[0]} terminated, {ends[1]} truncated")
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    result = {"gymnasium": gymnasium.__version__, "num_envs": N, "steps": STEPS,
              "modes": [record(AutoresetMode.NEXT_STEP), record(AutoresetMode.SAME_STEP)]}
    with open(sys.argv[1], "w") as f:
        json.dump(result, f, allow_nan=False)


if __name__ == "__main__":
    main()
