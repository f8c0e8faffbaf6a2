"""The environments alone, with random actions: each env's step time (the x axis of 'env
complexity') and its throughput at several env counts (the grey lines of the env-scaling
chart). Measured on first use and cached as JSON beside the report, so a committed report
never measures again."""

import importlib.util
import json
import math
import time
from pathlib import Path

import numpy as np

from .output import console

# the 12 environments benchback-rl measured
BENCHBACK_RL_ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "DiscountingChain-bsuite", "MemoryChain-bsuite",
                     "UmbrellaChain-bsuite", "BernoulliBandit-misc", "GaussianBandit-misc", "Asterix-MinAtar",
                     "Breakout-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar")


def measure_env_step(env_id: str, num_envs: int, steps: int) -> float:
    """Seconds per step of num_envs envs (auto-reset included), best of 5, compile excluded."""
    import gymnax
    import jax

    env, params = gymnax.make(env_id)
    n = env.action_space(params).n

    @jax.jit
    def run(key):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

        def step(carry, key):
            state, total = carry
            act_key, step_key = jax.random.split(key)
            action = jax.random.randint(act_key, (num_envs,), 0, n)
            obs, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(step_key, num_envs), state, action, params)
            return (state, total + reward.sum() + obs.sum()), None

        # Everything the step computes reaches the output: otherwise XLA drops what it can
        # (MountainCar's reward is a constant -1, and its whole physics was dead code).
        return jax.lax.scan(step, (state, 0.0), jax.random.split(key, steps))[0]

    jax.block_until_ready(run(jax.random.key(0)))
    best = math.inf
    for i in range(5):
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.key(i + 1)))
        best = min(best, time.perf_counter() - start)
    return best / steps


def env_times(out: Path, env_ids, num_envs=32, steps=2000, force=False) -> dict[str, float]:
    """Step times from OUT/envtime.json, measuring (and caching) the envs it lacks."""
    cache_file = out / "envtime.json"
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    missing = [e for e in env_ids if force or e not in cache]
    for env_id in missing:
        console.print(f"measuring the step time of {env_id} ...")
        cache[env_id] = measure_env_step(env_id, num_envs, steps)
    if missing:
        out.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(cache, indent=2, sort_keys=True))
    return {e: cache[e] for e in env_ids}


def complexity(times: dict[str, float]) -> dict[str, float]:
    fastest = min(times.values())
    return {e: t / fastest for e, t in times.items()}


def load_script(script: str):
    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), Path(__file__).parent.parent / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def measure_env_throughput(env_id: str, kind: str, num_envs: int, steps: int = 64) -> float:
    """Env steps per second with random actions and nothing else: Gymnax (one jitted lax.scan),
    Gymnasium's sync vector env (the *_gymnasium scripts' default), or its NumPy-vectorized
    CartPole (their --vectorization vector)."""
    if kind == "gymnax":
        return num_envs / measure_env_step(env_id, num_envs, steps)
    import gymnasium as gym

    twin = load_script("ppo_torch_gymnasium.py")
    if kind == "gymnasium":
        envs = twin.make_env(env_id, num_envs)
    else:
        envs = gym.make_vec(twin.TWINS[env_id][0], num_envs, vectorization_mode="vector_entry_point")
    rng = np.random.default_rng(0)
    actions = rng.integers(0, envs.single_action_space.n, (steps, num_envs))
    envs.reset(seed=0)
    for a in actions[:8]:
        envs.step(a)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        for a in actions:
            envs.step(a)
        best = min(best, time.perf_counter() - start)
    envs.close()
    return num_envs * steps / best


def env_throughputs(out: Path, env_ids, counts) -> dict[str, float]:
    """{"env|kind|n": steps per second} from OUT/envscale.json, measuring (and caching) what it lacks."""
    cache_file = out / "envscale.json"
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    kinds = lambda env: ("gymnax", "gymnasium") + (("gymnasium-numpy",) if env == "CartPole-v1" else ())
    wanted = [(e, k, n) for e in env_ids for k in kinds(e) for n in counts]
    missing = [w for w in wanted if "|".join(map(str, w)) not in cache]
    for env_id, kind, n in missing:
        console.print(f"measuring the throughput of {kind} {env_id} with {n} envs ...")
        cache["|".join((env_id, kind, str(n)))] = measure_env_throughput(env_id, kind, n)
    if missing:
        cache_file.write_text(json.dumps(cache, indent=2, sort_keys=True))
    return cache
