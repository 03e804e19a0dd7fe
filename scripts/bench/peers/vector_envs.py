"""Environment steps per second of the Python peers of xlaunch's EnvPool (scripts/bench/envpool.sh).

  python3 vector_envs.py --system envpool|gym_sync|gym_async|gym_vector --env CartPole-v1 \
      --num_envs 64 --mode sync|async --num_threads 2 --seconds 1

- envpool: EnvPool's own pool (envpool.make, gymnasium API) with num_threads threads; sync steps
  all num_envs at once, async uses batch_size = num_envs // 2 with recv()/send() (EnvPool's async
  loop from its documentation).
- gym_sync / gym_async: Gymnasium's SyncVectorEnv / AsyncVectorEnv (one subprocess per
  environment, the default context) over gymnasium.make(env). They have no asynchronous batches:
  --mode is ignored.
- gym_vector: Gymnasium 1.x's own numpy-vectorised environment, gymnasium.make_vec(env, num_envs,
  vectorization_mode="vector_entry_point") (CartPole-v1 has one; an environment without a
  vector_entry_point exits with an error saying so). --mode is ignored.

Every system is warmed up as bench_envpool is: min(1, seconds / 5) seconds of steps, not counted,
then the steps of --seconds seconds are.

Actions are drawn uniformly from the action space in advance (64 batches, cycled), so the policy
costs nothing. Prints `peer=SYSTEM env=E num_envs=N mode=M sps=X` (environment steps per second).
"""
import argparse
import time

import numpy as np


def actions_for(space, batch, rng):
    if hasattr(space, "n"):
        return [rng.integers(0, space.n, size=batch).astype(np.int32) for _ in range(64)]
    low, high = space.low, space.high
    return [rng.uniform(low, high, size=(batch,) + space.shape).astype(np.float32) for _ in range(64)]


def timed(step, seconds):
    """Steps per second of step() over `seconds`, after an uncounted warm-up as bench_envpool's."""
    warm = time.perf_counter()
    while time.perf_counter() - warm < min(1.0, seconds / 5):
        step()
    steps, start = 0, time.perf_counter()
    while True:
        for _ in range(50):
            steps += step()
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return steps / elapsed


def envpool_sps(a, rng):
    import envpool
    batch = a.num_envs if a.mode == "sync" else max(1, a.num_envs // 2)
    env = envpool.make(a.env, env_type="gymnasium", num_envs=a.num_envs, batch_size=batch,
                       num_threads=a.num_threads, seed=a.seed)
    acts = actions_for(env.action_space, batch, rng)
    i = [0]
    if a.mode == "sync":
        env.reset()

        def step():
            env.step(acts[i[0] % 64])
            i[0] += 1
            return a.num_envs
    else:
        env.async_reset()

        def step():
            info = env.recv()[-1]
            env.send(acts[i[0] % 64], info["env_id"])
            i[0] += 1
            return batch
    sps = timed(step, a.seconds)
    env.close()
    return sps


def gym_sps(a, rng, make):
    env = make()
    env.reset(seed=a.seed)
    acts = actions_for(env.single_action_space, a.num_envs, rng)
    i = [0]

    def step():
        env.step(acts[i[0] % 64])
        i[0] += 1
        return a.num_envs
    sps = timed(step, a.seconds)
    env.close()
    return sps


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--system", required=True, choices=["envpool", "gym_sync", "gym_async", "gym_vector"])
    p.add_argument("--env", required=True)
    p.add_argument("--num_envs", type=int, required=True)
    p.add_argument("--mode", choices=["sync", "async"], default="sync")
    p.add_argument("--num_threads", type=int, default=2)
    p.add_argument("--seconds", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    if a.system == "envpool":
        sps = envpool_sps(a, rng)
    elif a.system == "gym_vector":
        import gymnasium as gym
        if gym.spec(a.env).vector_entry_point is None:
            raise SystemExit(f"vector_envs.py: {a.env} has no vector_entry_point (no numpy-vectorised version)")
        sps = gym_sps(a, rng, lambda: gym.make_vec(a.env, num_envs=a.num_envs, vectorization_mode="vector_entry_point"))
    else:
        import gymnasium as gym
        vector = gym.vector.SyncVectorEnv if a.system == "gym_sync" else gym.vector.AsyncVectorEnv
        sps = gym_sps(a, rng, lambda: vector([lambda: gym.make(a.env) for _ in range(a.num_envs)]))
    print(f"peer={a.system} env={a.env} num_envs={a.num_envs} mode={a.mode} sps={sps:.0f}")


if __name__ == "__main__":
    main()
