"""The environments alone: each rollout's env steps with random actions and no policy (benchback).

What the env-scaling experiment draws as the env-alone lines, measured the way the scripts
measure their rollouts: a fresh process run by bench.sh, the scripts' own env helpers
(`make_env`/`env_reset`/`env_step` of ppo_linen.py for Gymnax, of ppo_torch_gymnasium.py for
the CPU twins and MuJoCo), num_steps steps of num_envs envs per iteration, each iteration timed and
logged as time/rollout, iteration 0 (compilation, warm-up) left out by the analysis. Random actions:
uniform over a Discrete space, uniform in a Box's bounds. --backend mjx steps HalfCheetah-v5's model
(Gymnasium's XML) in MuJoCo's JAX port, MJX, which no PPO script uses: what physics in JAX costs here.
The PyTorch side, with ppo_torch.py's helpers: --backend torch steps its env in torch (--torch-env) call
by call, torch-compile the same step compiled (fullgraph; CUDA graphs on a GPU), and gymnax-dlpack the
Gymnax env as ppo_torch.py steps it without --torch-env: a jitted JAX call per step, each torch action
handed to JAX and each observation back through DLPack.

    python env_alone.py --backend vector --env-id CartPole-v1 --num-envs 512
    python env_alone.py --backend mjx --env-id HalfCheetah-v5
    python env_alone.py --backend torch-compile --env-id Acrobot-v1 --num-envs 4096
"""

import time

START_TIME = time.time()

import importlib.util
import json
import os
import sys
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import numpy as np
import tyro
from tensorboard.summary import Writer

ROOT = Path(__file__).resolve().parent


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """Gymnax environment id (its CPU twin for the Gymnasium backends)"""
    backend: Literal["gymnax", "sync", "async", "vector", "envpool", "mjx", "torch", "torch-compile", "gymnax-dlpack"] = "sync"
    """gymnax: vmapped Gymnax in one jitted lax.scan per rollout; sync, async, vector, envpool: the CPU twin, stepped as --vectorization steps it; mjx: HalfCheetah-v5 in MJX, vmapped, one jitted lax.scan; torch, torch-compile: the env in torch, a call per step, eager or compiled; gymnax-dlpack: a jitted Gymnax call per step, actions and observations through DLPack"""
    num_envs: int = 32
    """parallel environments"""
    num_steps: int = 128
    """steps per environment in one rollout"""
    num_iterations: int = 4
    """rollouts, each timed"""
    seed: int = 1
    """seeds the environments and the random actions"""
    log_dir: str = "runs"
    """parent directory of the run directories"""


def script(name: str):
    """One of the PPO scripts as a module: its env helpers are what is measured."""
    spec = importlib.util.spec_from_file_location(name.removesuffix(".py"), ROOT / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def gymnax_rollouts(m, args: Args):
    """Rollout times: one jitted scan of ppo_linen.py's env_step with uniform random actions."""
    import jax

    env, env_params = m.make_env(args.env_id)
    space = env.action_space(env_params)

    @jax.jit
    def rollout(state, key):
        def step(state, key):
            action = (jax.random.uniform(key, (args.num_envs, *space.shape), minval=space.low, maxval=space.high)
                      if m.continuous(env, env_params) else jax.random.randint(key, (args.num_envs,), 0, space.n))
            return m.env_step(state, action, env, env_params, args.num_envs)

        state, out = jax.lax.scan(step, state, jax.random.split(key, args.num_steps))
        return state, out.reward.sum() + out.obs.sum()  # everything computed reaches the output

    _, state = m.env_reset(jax.random.key(args.seed), env, env_params, args.num_envs)
    key = jax.random.key(args.seed + 1)
    while True:
        key, rollout_key = jax.random.split(key)
        start = time.perf_counter()
        state, total = jax.block_until_ready(rollout(state, rollout_key))
        yield time.perf_counter() - start


def cpu_rollouts(m, args: Args):
    """Rollout times: ppo_torch_gymnasium.py's host loop of env_step with uniform random actions."""
    envs = m.make_env(args.env_id, args.num_envs, args.backend, args.seed)
    _, state = m.env_reset(envs, args.seed)
    rng, space = np.random.default_rng(args.seed), envs.single_action_space
    while True:
        shape = (args.num_steps, args.num_envs, *space.shape)
        actions = (rng.uniform(space.low, space.high, shape).astype(np.float32) if m.continuous(envs)
                   else rng.integers(0, space.n, shape, dtype=np.int32))
        start = time.perf_counter()
        for action in actions:
            state, _ = m.env_step(envs, state, action)
        yield time.perf_counter() - start


def mjx_rollouts(m, args: Args):
    """Rollout times: the MuJoCo model of a Gymnasium env (its XML, its frame skip) stepped by MJX,
    vmapped over the envs, num_steps env steps as one jitted lax.scan; no resets (HalfCheetah has none)."""
    if args.env_id != "HalfCheetah-v5":
        print(f"error: --backend mjx offers HalfCheetah-v5, not {args.env_id!r}", file=sys.stderr)
        sys.exit(2)
    import gymnasium as gym
    import jax
    from mujoco import mjx  # physics in JAX: imported here only

    cpu_env = gym.make(args.env_id).unwrapped
    model, frame_skip = mjx.put_model(cpu_env.model), cpu_env.frame_skip
    low, high = cpu_env.action_space.low, cpu_env.action_space.high
    physics_step = jax.vmap(mjx.step, in_axes=(None, 0))

    @jax.jit
    def rollout(data, key):
        def step(data, key):
            ctrl = jax.random.uniform(key, data.ctrl.shape, minval=low, maxval=high)  # the action space's bounds
            data = jax.lax.fori_loop(0, frame_skip, lambda _, d: physics_step(model, d), data.replace(ctrl=ctrl))
            return data, data.qpos.sum() + data.qvel.sum()  # what an observation reads

        data, out = jax.lax.scan(step, data, jax.random.split(key, args.num_steps))
        return data, out.sum()

    data = jax.vmap(lambda _: mjx.make_data(model))(np.arange(args.num_envs))
    key = jax.random.key(args.seed)
    while True:
        key, rollout_key = jax.random.split(key)
        start = time.perf_counter()
        data, total = jax.block_until_ready(rollout(data, rollout_key))
        yield time.perf_counter() - start


def torch_actions(space, args: Args, device):
    """A rollout's uniform random actions as torch tensors, (num_steps, num_envs, ...), drawn up front."""
    import torch

    if hasattr(space, "n"):
        return torch.randint(0, space.n, (args.num_steps, args.num_envs), dtype=torch.int32, device=device)
    low, high = float(space.low), float(space.high)
    return low + (high - low) * torch.rand(args.num_steps, args.num_envs, *space.shape, device=device)


def torch_rollouts(m, args: Args):
    """Rollout times: the env in torch's step (torch_envs.py, ppo_torch.py --torch-env), one call per step; torch-compile
    compiles it as ppo_torch_compile.py compiles it (fullgraph; on CUDA, CUDA graphs, whose outputs
    are copied before the next replay)."""
    import jax
    import torch

    device = m.torch_device()
    env, env_params = m.make_torch_env(args.env_id, device)
    torch.manual_seed(args.seed)
    _, state = env.reset(args.num_envs)
    step = partial(env.step, env_params=env_params)
    keep = lambda outputs: outputs
    if args.backend == "torch-compile":
        step = torch.compile(step, mode="reduce-overhead" if device.type == "cuda" else "default", fullgraph=True)
        if device.type == "cuda":
            keep = partial(jax.tree.map, torch.clone)
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    while True:
        actions = torch_actions(env.action_space(env_params), args, device)
        start = time.perf_counter()
        for action in actions:
            torch.compiler.cudagraph_mark_step_begin()
            state, out = keep(step(state, action))
        sync()
        yield time.perf_counter() - start


def dlpack_rollouts(m, args: Args):
    """Rollout times: the Gymnax env as ppo_torch.py steps it: its jitted env_step per step, each torch
    action handed to JAX (m.to_jax), each observation back through DLPack, the steps stacked at the end."""
    import jax
    import torch

    env, env_params = m.make_env(args.env_id)
    step = jax.jit(partial(m.env_step, env=env, env_params=env_params, num_envs=args.num_envs), donate_argnums=0)
    jax.config.update("jax_cpu_enable_async_dispatch", False)  # as ppo_torch.py runs it
    _, state = m.env_reset(jax.random.key(args.seed), env, env_params, args.num_envs)
    device = m.torch_device()
    torch.manual_seed(args.seed)
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    while True:
        actions = torch_actions(env.action_space(env_params), args, device)
        start = time.perf_counter()
        steps = []
        for action in actions:
            state, out = step(state, m.to_jax(action))
            steps.append(out)
            torch.from_dlpack(out.obs)  # what the policy would read next
        m.stack_steps(steps)
        sync()
        yield time.perf_counter() - start


ROLLOUTS = {"gymnax": gymnax_rollouts, "mjx": mjx_rollouts, "torch": torch_rollouts, "torch-compile": torch_rollouts,
            "gymnax-dlpack": dlpack_rollouts}  # the others: cpu_rollouts
TORCH = ("torch", "torch-compile", "gymnax-dlpack")  # with ppo_torch.py's helpers


def device_name(m, args: Args) -> str:
    """Where the env stepped, in the scripts' words: the GPU's name, or cpu."""
    if args.backend in TORCH and m.torch_device().type == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return "cpu"


def main():
    args = tyro.cli(Args)
    for name in ("num_envs", "num_steps", "num_iterations"):
        if getattr(args, name) < 1:
            print(f"error: {name} must be a positive integer, got {getattr(args, name)}", file=sys.stderr)
            sys.exit(2)
    m = script("ppo_torch.py" if args.backend in TORCH else "ppo_linen.py" if args.backend in ROLLOUTS
               else "ppo_torch_gymnasium.py")
    rollouts = ROLLOUTS.get(args.backend, cpu_rollouts)(m, args)
    times = [next(rollouts)]  # an env the backend does not offer exits 2 here, before anything is written
    variant = f"env-{args.backend}"
    run_dir = os.path.join(args.log_dir, f"{args.env_id}__{variant}__none__s{args.seed}__{int(time.time() * 1000)}")
    os.makedirs(run_dir)
    info = {"args": {**asdict(args), "sync_timing": True, "model": "none"}, "variant": variant,
            "device": device_name(m, args), **m.machine(), "start_time": START_TIME}  # the machine, versions included
    Path(run_dir, "run.json").write_text(json.dumps(info, indent=2))
    times += [next(rollouts) for _ in range(args.num_iterations - 1)]
    writer = Writer(run_dir)
    for i, seconds in enumerate(times):
        for tag in ("time/iteration", "time/rollout"):
            writer.add_scalar(tag, seconds, (i + 1) * args.num_envs * args.num_steps)
    writer.close()
    summary = {"time/total": time.time() - START_TIME,  # what ran is in run.json, as the scripts'
               "env_steps_per_second": args.num_envs * args.num_steps / float(np.mean(times[1:] or times))}
    Path(run_dir, "summary.json").write_text(json.dumps(summary, indent=2))
    print(f"{run_dir}: {summary['env_steps_per_second']:,.0f} env steps per second")


if __name__ == "__main__":
    main()
