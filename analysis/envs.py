"""The environments alone, with random actions: each env's step time (the x axis of 'env
complexity'). Measured on first use and cached as JSON beside the report, so a committed
report never measures again. (The env-scaling chart's env-alone lines are runs of
env_alone.py that bench.sh makes, like every other run.)"""

import json
import math
import time
from pathlib import Path

from .output import console

# the 12 environments benchback-rl measured
BENCHBACK_RL_ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "DiscountingChain-bsuite", "MemoryChain-bsuite",
                     "UmbrellaChain-bsuite", "BernoulliBandit-misc", "GaussianBandit-misc", "Asterix-MinAtar",
                     "Breakout-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar")


def measure_env_step(env_id: str, num_envs: int, steps: int) -> float:
    """Seconds per step of num_envs envs (resets included), best of 5, compile excluded: Gymnax's
    own auto-resetting step, and for Craftax the scripts' (ppo_linen.py's env helpers: Craftax's
    own auto-reset makes a new world every step, which no script pays)."""
    import jax

    if env_id.startswith("Craftax"):
        from env_alone import script

        m = script("ppo_linen.py")
        env, params = m.make_env(env_id)
        reset = lambda key: m.env_reset(key, env, params, num_envs)[1]

        def step(state, key, action):
            state, out = m.env_step(state, action, env, params, num_envs)
            return state, out.reward, out.obs
    else:
        import gymnax

        env, params = gymnax.make(env_id)
        reset = lambda key: jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)[1]

        def step(state, key, action):
            obs, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(key, num_envs), state, action, params)
            return state, reward, obs
    n = env.action_space(params).n

    @jax.jit
    def run(key):
        def body(carry, key):
            state, total = carry
            act_key, step_key = jax.random.split(key)
            state, reward, obs = step(state, step_key, jax.random.randint(act_key, (num_envs,), 0, n))
            return (state, total + reward.sum() + obs.sum()), None

        # Everything the step computes reaches the output: otherwise XLA drops what it can
        # (MountainCar's reward is a constant -1, and its whole physics was dead code).
        return jax.lax.scan(body, (reset(key), 0.0), jax.random.split(key, steps))[0]

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
    fastest = min(times.values(), default=1.0)
    return {e: t / fastest for e, t in times.items()}

