"""DQN with PyTorch and torch.compile, CUDA graphs on GPU (benchback).

dqn_torch.py with the fewest changes that make it fast, LeanRL's way: the greedy action, the TD loss with
its gradients, and Adam's step compiled, each one graph with no break, and with --torch-env the env's
step too; Adam's rate a tensor and its step count on the device (capturable), as CUDA graphs need
(docs/offpolicy.md).

    python dqn_torch_compile.py --env-id CartPole-v1
    python dqn_torch_compile.py --torch-env            # the env in torch, its step compiled too
    python dqn_torch_compile.py --compile-mode none    # eager: dqn_torch.py, its target moved by one lerp
"""

# %% imports
import time

START_TIME = time.time()  # harness: before the heavy imports, so the startup time counts them

import inspect
import math
import os
from dataclasses import dataclass
from functools import partial
from typing import Literal, NamedTuple

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")  # leave GPU memory to torch
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import torch
import torch.nn as nn
import tyro
from gymnax.environments import spaces
from rich.progress import Progress
from tensorboard.summary import Writer  # numpy-only event writer: no torch, no TensorFlow


# %% Args
@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """Gymnax environment id (discrete actions, Box observations)"""
    model: Literal["small", "cnn"] = "small"
    """the Q-network: small=CleanRL's (120, 84) MLP; cnn: MinAtar's network (16 3x3 filters, 128 units)"""
    total_timesteps: int = 500_000
    """env steps of the whole run, over all envs"""
    learning_rate: float = 2.5e-4
    """Adam learning rate"""
    num_envs: int = 1
    """parallel environments"""
    buffer_size: int = 10_000
    """transitions the replay buffer holds"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 1.0
    """target network update rate (1: a copy)"""
    target_network_frequency: int = 500
    """env steps between target network updates"""
    batch_size: int = 128
    """transitions sampled from the buffer per update"""
    start_e: float = 1.0
    """starting epsilon of the exploration"""
    end_e: float = 0.05
    """final epsilon of the exploration"""
    exploration_fraction: float = 0.5
    """fraction of total-timesteps over which epsilon goes from start-e to end-e"""
    learning_starts: int = 10_000
    """env steps before the first update"""
    train_frequency: int = 10
    """env steps between updates"""
    log_frequency: int = 1_000
    """env steps per iteration: what a run logs, times and shows at once"""
    seed: int = 1
    """one seed drives init, environments, exploration and sampling"""
    buffer: Literal["device", "host"] = "device"
    """where the replay buffer lives: tensors on torch's device, or NumPy arrays on the host (CleanRL's)"""
    torch_env: bool = False
    """step the env written in torch (Gymnax's formulas: CartPole-v1, Acrobot-v1, MountainCar-v0) instead of Gymnax's"""
    compile_mode: Literal["auto", "default", "reduce-overhead", "max-autotune", "none"] = "auto"
    """torch.compile mode: auto is reduce-overhead (CUDA graphs) on CUDA and default on CPU; none is eager"""


MODELS = {"small": (120, 84), "cnn": ()}  # hidden widths after the torso; cnn: the CNN, then the Q-values
CNN_LAYOUT = dict(convs=((16, 3, 1),), dense=128)  # MinAtar's network: (filters, kernel size, stride), dense width


def variant_name(args: Args) -> str:
    mode = "" if args.compile_mode == "auto" else f"-{args.compile_mode}"
    env = "-torchenv" if args.torch_env else ""
    return "dqn_torch_compile" + mode + env + ("-host" if args.buffer == "host" else "")


# %% environment helpers
def unsupported(env, env_params) -> str | None:
    """Why this DQN (discrete actions, Box observations) cannot run the env, or None."""
    if not isinstance(space := env.action_space(env_params), spaces.Discrete):
        return f"{type(space).__name__} actions (DQN takes Discrete actions)"
    if not isinstance(space := env.observation_space(env_params), spaces.Box):
        return f"{type(space).__name__} observations (this DQN needs Box observations)"
    return None


def supported_env_ids() -> list[str]:
    return [e for e in gymnax.registered_envs if e != "MNISTBandit-bsuite" and not unsupported(*gymnax.make(e))]


def make_env(env_id: str):
    """The Gymnax env and its params, or exit 2 if DQN cannot run it (it needs discrete actions)."""
    if env_id not in gymnax.registered_envs or env_id == "MNISTBandit-bsuite":
        fail(f"env_id {env_id!r} is not a Gymnax env id this DQN runs; supported: {', '.join(supported_env_ids())}")
    env, env_params = gymnax.make(env_id)
    if why := unsupported(env, env_params):
        fail(f"env_id {env_id!r} has {why}; supported: {', '.join(supported_env_ids())}")
    return env, env_params


class EnvState(NamedTuple):
    key: jax.Array  # the environments' own random stream
    env: object  # the Gymnax state of every env
    episode_return: jax.Array
    episode_length: jax.Array


class EnvStep(NamedTuple):
    obs: jax.Array  # after auto-reset
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: jax.Array  # before auto-reset: the next observation a transition stores
    episode_return: jax.Array  # return of the episode that ended here, else 0
    episode_length: jax.Array


def flatten_obs(obs, num_envs):
    return obs.reshape(num_envs, -1).astype(jnp.float32)  # MinAtar grids -> vectors


def env_reset(key, env, env_params, num_envs):
    key, reset_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), env_params)
    state = jax.tree.map(lambda x: x.astype(x.dtype), state)  # weak types made strong: one compilation
    return flatten_obs(obs, num_envs), EnvState(key, state, jnp.zeros(num_envs), jnp.zeros(num_envs))


def env_step(state: EnvState, action, env, env_params, num_envs):
    """Steps every env (auto-reset) and keeps the episode statistics on device."""
    key, step_key = jax.random.split(state.key)
    obs, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        jax.random.split(step_key, num_envs), state.env, action, env_params)
    reward, done = reward.astype(jnp.float32), terminated | truncated
    episode_return, episode_length = state.episode_return + reward, state.episode_length + 1
    step = EnvStep(flatten_obs(obs, num_envs), reward, terminated, truncated,
                   flatten_obs(info["final_observation"], num_envs),
                   jnp.where(done, episode_return, 0.0), jnp.where(done, episode_length, 0.0))
    return EnvState(key, env_state, jnp.where(done, 0.0, episode_return), jnp.where(done, 0.0, episode_length)), step


def make_torch_env(env_id: str, device):
    """--torch-env: the Gymnax env written in torch (torch_envs.py, a module beside this script) and its params."""
    try:
        import torch_envs  # only here: a copy of this script without it runs on Gymnax
    except ModuleNotFoundError as e:
        if e.name != "torch_envs":
            raise
        fail("--torch-env needs torch_envs.py (benchback's envs written in torch) beside this script")
    env, env_params = make_env(env_id)
    if env_id not in torch_envs.ENVS:
        twins = [e for e in torch_envs.ENVS if e in supported_env_ids()]
        fail(f"--torch-env has no torch twin of {env_id!r}; it has {', '.join(twins)}")
    return torch_envs.TorchEnv.make(env_id, env, env_params, device), env_params


# %% model
def layer_init(layer: nn.Module, scale: float) -> nn.Module:
    nn.init.orthogonal_(layer.weight, scale)
    nn.init.zeros_(layer.bias)
    return layer


class QNetwork(nn.Module):
    """The Q-values of every action: an MLP with ReLU (CleanRL's), or with --model cnn MinAtar's CNN then
    one layer. Orthogonal weights (gain sqrt 2, the output's 1) and zero biases, as the PPO scripts'."""

    def __init__(self, obs_shape: tuple[int, ...], hidden: tuple[int, ...], num_actions: int, cnn: bool):
        super().__init__()
        self.image_shape, self.num_actions, layers = (obs_shape if cnn else None), num_actions, []
        if cnn:
            (h, w, channels) = obs_shape
            for filters, size, stride in CNN_LAYOUT["convs"]:
                layers += [layer_init(nn.Conv2d(channels, filters, size, stride), np.sqrt(2)), nn.ReLU()]
                h, w, channels = (h - size) // stride + 1, (w - size) // stride + 1, filters
            layers += [nn.Flatten(), layer_init(nn.Linear(h * w * channels, CNN_LAYOUT["dense"]), np.sqrt(2)), nn.ReLU()]
            in_dim = CNN_LAYOUT["dense"]
        else:
            in_dim = math.prod(obs_shape)
        for width in hidden:
            layers += [layer_init(nn.Linear(in_dim, width), np.sqrt(2)), nn.ReLU()]
            in_dim = width
        self.net = nn.Sequential(*layers, layer_init(nn.Linear(in_dim, num_actions), 1.0))

    def forward(self, x):
        if self.image_shape is not None:  # NCHW, the layout torch's Conv2d takes
            x = x.reshape(-1, *self.image_shape).movedim(-1, 1)
        return self.net(x)


def make_networks(obs_shape, num_actions, args: Args, device):
    q_network = QNetwork(obs_shape, MODELS[args.model], num_actions, args.model == "cnn").to(device)
    target_network = QNetwork(obs_shape, MODELS[args.model], num_actions, args.model == "cnn").to(device)
    target_network.load_state_dict(q_network.state_dict())
    # a tensor learning rate; compiled, the multi-tensor Adam fuses into the update and keeps its step count on
    # the device (capturable), as CUDA graphs need; eager, CleanRL's Adam of dqn_torch.py
    kind = dict(foreach=True, capturable=True) if args.compile_mode != "none" else {}
    optimizer = torch.optim.Adam(q_network.parameters(), lr=torch.tensor(args.learning_rate, device=device), **kind)
    return q_network, target_network, optimizer


# saving and loading: torch's own format, with what it fits
MODEL_FILE, SAVED_BY = "model.pt", "dqn_torch_compile.py"  # only this script loads what it saved


def save_model(run_dir: str, q_network, target_network, optimizer, args: Args) -> str:
    meta = {"script": SAVED_BY, "model": args.model, "env_id": args.env_id}
    torch.save({"meta": meta, "q_network": q_network.state_dict(), "target_network": target_network.state_dict(),
                "optimizer": optimizer.state_dict()}, os.path.join(run_dir, MODEL_FILE))
    return MODEL_FILE


def read_model(path: str, args: Args) -> dict:
    """What a model was saved with, or exit 2 saying why this run cannot start from it."""
    return read_saved(path, lambda f: torch.load(f, map_location="cpu", weights_only=True),
                      model=args.model, env_id=args.env_id)


# %% replay buffer
class Buffer:
    """A ring of transitions: CleanRL's (SB3's) layout, the true last observation of a truncated episode as
    its next observation; as tensors on torch's device, or (host) as NumPy arrays sampled by NumPy, each
    batch handed to the device (CleanRL's). A sample draws from the written rows only."""

    def __init__(self, capacity: int, obs_dim: int, device, host: bool, seed: int):
        self.device, self.host, self.pos, self.size = device, host, 0, 0
        self.rng = np.random.default_rng(seed) if host else None
        make = ((lambda *shape, dtype=np.float32: np.zeros((capacity, *shape), dtype)) if host else
                (lambda *shape, dtype=torch.float32: torch.zeros((capacity, *shape), dtype=dtype, device=device)))
        integer, boolean = (np.int32, np.bool_) if host else (torch.int32, torch.bool)
        self.stores = (make(obs_dim), make(obs_dim), make(dtype=integer), make(), make(dtype=boolean))

    def add(self, *transition):
        """One row per env (obs, next_obs, action, reward, terminated), overwriting the oldest once full."""
        capacity, n = len(self.stores[0]), len(transition[0])
        rows = (np.arange(self.pos, self.pos + n) if self.host else  # made on the device: no copy to it per step
                torch.arange(self.pos, self.pos + n, device=self.device)) % capacity
        for store, x in zip(self.stores, transition):
            store[rows] = x.cpu().numpy() if self.host else x
        self.pos, self.size = (self.pos + n) % capacity, min(self.size + n, capacity)

    def sample(self, batch_size: int):
        if self.host:
            rows = self.rng.integers(0, self.size, batch_size)
            return tuple(torch.from_numpy(store[rows]).to(self.device) for store in self.stores)
        rows = torch.randint(0, self.size, (batch_size,), device=self.device)
        return tuple(store[rows] for store in self.stores)


# %% the TD loss and update
def td_grads(q_network, target_network, batch, gamma: float):
    """The squared TD error's gradients, the target from the target network, not bootstrapped through a
    termination (a truncation's next observation is the true last one, so it is)."""
    obs, next_obs, action, reward, terminated = batch
    with torch.no_grad():
        target = reward + (~terminated).float() * gamma * target_network(next_obs).max(-1).values
    q = q_network(obs).gather(-1, action.long()[:, None])[:, 0]
    loss = ((q - target) ** 2).mean()
    loss.backward()
    return loss.detach(), q.detach().mean()


@torch.no_grad()
def adam_step(optimizer: torch.optim.Adam):
    """optimizer.step() without the graph breaks torch.optim makes on purpose (pytorch#104053): its body, under
    no_grad as step runs it, compiles as one graph."""
    inspect.unwrap(torch.optim.Adam.step)(optimizer)


def td_update(q_network, target_network, optimizer, batch, gamma: float):
    """One Adam step on the TD error (the gradients apart: compiled in one frame with zero_grad and step,
    torch 2.13 left the weights as they were)."""
    optimizer.zero_grad()
    stats = td_grads(q_network, target_network, batch, gamma)
    adam_step(optimizer)
    return stats


def epsilon_at(global_step: int, args: Args) -> float:
    """CleanRL's linear schedule: start-e to end-e over exploration-fraction of the run, then end-e."""
    slope = (args.end_e - args.start_e) / (args.exploration_fraction * args.total_timesteps)
    return max(slope * global_step + args.start_e, args.end_e)


# %% training loop
class Runner(NamedTuple):
    env_state: EnvState
    obs: torch.Tensor
    global_step: int  # env steps so far, over all envs: CleanRL's global_step


@jax.jit
def stack_jax(steps: list[EnvStep]) -> EnvStep:
    return jax.tree.map(lambda *xs: jnp.stack(xs), *steps)  # one call for the whole iteration


def stack_steps(steps: list[EnvStep]) -> EnvStep:
    """The iteration's env steps as one: Gymnax's JAX arrays in one call, the torch env's tensors by torch."""
    return EnvStep(*map(torch.stack, zip(*steps))) if isinstance(steps[0].obs, torch.Tensor) else stack_jax(steps)


def to_jax(action: torch.Tensor):
    """torch -> JAX without a copy: DLPack on a GPU; on a CPU a NumPy view, which jit takes for less."""
    return jnp.from_dlpack(action) if action.is_cuda else action.numpy()


def tensor(x) -> torch.Tensor:
    """JAX -> torch without a copy (DLPack); the env in torch's tensors as they are, with no DLPack round trip."""
    return x if isinstance(x, torch.Tensor) else torch.from_dlpack(x)


@torch.no_grad()
def greedy(q_network, obs):
    return q_network(obs).argmax(-1)


@torch.no_grad()
def act(q_network, obs, epsilon):
    """Each env's action: a uniform one with probability epsilon, else the greedy one (int32, JAX's). A step where
    every env explores skips the network, as CleanRL's, for one host read."""
    explore = torch.rand(len(obs), device=obs.device) < epsilon
    action = torch.randint(0, q_network.num_actions, (len(obs),), device=obs.device)
    if explore.all():
        return action.int()
    return torch.where(explore, action, greedy(q_network, obs)).int()


def iteration(q_network, target_network, optimizer, buffer: Buffer, runner: Runner, env_step_fn, args: Args):
    """log_frequency env steps: act, step, store, and on CleanRL's steps train and copy the target."""
    steps, losses, qs = [], [], []
    for _ in range(args.log_frequency // args.num_envs):
        t = runner.global_step
        torch.compiler.cudagraph_mark_step_begin()  # a new CUDA-graph step: earlier outputs may be reused
        with region("policy_step", args.profile):  # harness
            action = act(q_network, runner.obs, epsilon_at(t, args))
        with region("env_step", args.profile):  # harness
            env_state, out = env_step_fn(runner.env_state, action)
        with region("buffer", args.profile):  # harness
            buffer.add(runner.obs, tensor(out.final_obs), action, tensor(out.reward), tensor(out.terminated))
        # CleanRL trains where global_step > learning-starts is a multiple of train-frequency; with n envs a vector
        # step covers global steps t..t+n-1 (one of them a multiple of k where (-t) % k < n)
        learning = t > args.learning_starts
        with region("update", args.profile):  # harness
            if learning and (-t) % args.train_frequency < args.num_envs:
                torch.compiler.cudagraph_mark_step_begin()
                loss, q = td_update(q_network, target_network, optimizer, buffer.sample(args.batch_size), args.gamma)
                losses.append(loss.clone()), qs.append(q.clone())  # kept past the graph's next replay
        with region("update", args.profile):  # harness
            if learning and (-t) % args.target_network_frequency < args.num_envs:
                with torch.no_grad():  # every parameter in one in-place lerp (at tau 1, exactly a copy)
                    torch._foreach_lerp_(list(target_network.parameters()), list(q_network.parameters()), args.tau)
        runner = Runner(env_state, tensor(out.obs), t + args.num_envs)
        steps.append(out)
    out = stack_steps(steps)
    updates = len(losses)
    stats = {"episodes": (out.terminated | out.truncated).sum(), "episodic_return_sum": out.episode_return.sum(),
             "episodic_length_sum": out.episode_length.sum(), "updates": updates,
             "td_loss": torch.stack(losses).mean() if losses else 0.0, "q_values": torch.stack(qs).mean() if qs else 0.0,
             "epsilon": epsilon_at(runner.global_step - args.num_envs, args)}
    return runner, stats


def evaluate(q_network, key, env, env_params, num_episodes: int, epsilon: float, seed: int) -> np.ndarray:
    """One episode on each of num_episodes fresh envs at epsilon (CleanRL's evaluation), exploring from the
    seed's own stream (training's draws do not move it): their returns."""
    returns, done, device = np.zeros(num_episodes), np.zeros(num_episodes, bool), next(q_network.parameters()).device
    host = lambda x: torch.from_dlpack(x).cpu().numpy()  # a JAX array or a tensor, on any device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):  # training's stream left as is
        torch.manual_seed(seed)
        if hasattr(env, "dynamics"):  # its fresh states drawn by torch's generator, not from the key
            obs, env_state = env.reset(num_episodes)
            step = partial(env.step, env_params=env_params)
        else:
            obs, env_state = env_reset(key, env, env_params, num_episodes)
            jax_step = jax.jit(partial(env_step, env=env, env_params=env_params, num_envs=num_episodes))
            step = lambda state, action: jax_step(state, to_jax(action))
        while not done.all():  # a loop on the host: evaluation is not timed
            env_state, out = step(env_state, act(q_network, torch.from_dlpack(obs), epsilon))
            ended = host(out.terminated | out.truncated) & ~done  # each env's first episode only
            returns[ended] = host(out.episode_return)[ended]
            done, obs = done | ended, out.obs
    return returns


def compile_hot_paths(mode: str):
    """torch.compile the greedy action, the TD loss with its gradients, and Adam's step where they are called,
    LeanRL style, each one graph (fullgraph: a graph break is an error); exploring's draws stay eager, beside the
    host read that skips the network."""
    global greedy, td_grads, adam_step
    torch._dynamo.config.trace_autograd_ops = True  # loss.backward() joins the compiled graph
    greedy, td_grads, adam_step = (torch.compile(f, mode=mode, fullgraph=True) for f in (greedy, td_grads, adam_step))


def torch_device() -> torch.device:
    """The device JAX steps the environments on, so that DLPack hands arrays over without a copy."""
    return torch.device("cuda") if jax.default_backend() == "gpu" else torch.device("cpu")


def train(args: Args, env, env_params, writer, saved: dict | None = None):
    """Returns the trained Q-network, its target and the optimizer. writer: TensorBoard's (the benchmark's
    RunLog, which also times and records the run)."""
    # drives init, exploration and the device buffer's sampling; JAX the environments (--torch-env: torch)
    torch.manual_seed(args.seed)
    device, obs_shape = torch_device(), env.observation_space(env_params).shape
    mode = {"auto": "reduce-overhead" if device.type == "cuda" else "default"}.get(args.compile_mode, args.compile_mode)
    if args.compile_mode != "none":
        compile_hot_paths(mode)
    if not args.torch_env:  # the environments' reset as one compiled call, compiled without optimizing it: it runs once
        reset = jax.jit(lambda seed: env_reset(jax.random.key(seed), env, env_params, args.num_envs))
        obs, env_state = reset.lower(args.seed).compile({"xla_backend_optimization_level": 0})(args.seed)
    q_network, target_network, optimizer = make_networks(obs_shape, env.action_space(env_params).n, args, device)
    if saved is not None:  # harness: the weights, the target and Adam's state; the buffer starts empty
        q_network.load_state_dict(saved["q_network"]), target_network.load_state_dict(saved["target_network"])
        optimizer.load_state_dict(saved["optimizer"])
    buffer = Buffer(args.buffer_size, math.prod(obs_shape), device, args.buffer == "host", args.seed)
    if args.torch_env:  # reset after the weights are drawn: a seed's weights are the same with either env
        obs, env_state = env.reset(args.num_envs)
        env_step_fn = partial(env.step, env_params=env_params)
        if args.compile_mode != "none":  # the env's step compiled too: the policy's and the env's, two graphs a step
            compiled_step = torch.compile(env_step_fn, mode=mode, fullgraph=True)
            keep = partial(jax.tree.map, torch.clone) if mode == "reduce-overhead" else lambda x: x  # past a replay
            env_step_fn = lambda state, action: keep(compiled_step(state, action))
    else:
        jax_step = jax.jit(partial(env_step, env=env, env_params=env_params, num_envs=args.num_envs), donate_argnums=0)
        env_step_fn = lambda state, action: jax_step(state, to_jax(action))  # torch's action handed to JAX
    runner = Runner(env_state, torch.from_dlpack(obs), 0)
    # torch needs each env step's result at once: on the CPU, JAX then does better to run a call in
    # the calling thread than to hand it to a worker thread (async dispatch)
    jax.config.update("jax_cpu_enable_async_dispatch", False)
    num_iterations = args.total_timesteps // args.log_frequency
    with Progress() as progress:
        compiling = args.compile_mode != "none" or not args.torch_env
        first = "iteration 0" + (", compiling" if compiling else "")
        task = progress.add_task(first, total=num_iterations)
        for i in range(num_iterations):
            t0 = time.perf_counter()
            with region("iteration", args.profile):  # harness
                runner, stats = iteration(q_network, target_network, optimizer, buffer, runner, env_step_fn, args)
            stats = {k: float(v) for k, v in stats.items()}  # the host fetch, which waits for the iteration
            seconds, global_step = time.perf_counter() - t0, (i + 1) * args.log_frequency
            if stats["episodes"]:
                writer.add_scalar("charts/episodic_return", stats["episodic_return_sum"] / stats["episodes"], global_step)
                writer.add_scalar("charts/episodic_length", stats["episodic_length_sum"] / stats["episodes"], global_step)
            writer.add_scalar("charts/SPS", args.log_frequency / seconds, global_step)
            writer.add_scalar("charts/epsilon", stats["epsilon"], global_step)
            if stats["updates"]:  # the losses of the iteration's updates: none before learning starts
                writer.add_scalar("losses/td_loss", stats["td_loss"], global_step)
                writer.add_scalar("losses/q_values", stats["q_values"], global_step)
            writer.iteration(i, {"iteration": seconds}, stats)  # harness: time/, memory/, the final return, --profile
            progress.update(task, advance=1, description=f"{global_step:,} steps, SPS {args.log_frequency / seconds:,.0f}")
    return q_network, target_network, optimizer


def traced(args: Args) -> range:  # harness
    """--profile's iterations (from 0): the last two, after at least one that compiles."""
    iterations = args.total_timesteps // args.log_frequency
    return range(iterations - 2, iterations)


def invalid(args: Args) -> str | None:  # harness
    """Why these arguments cannot run, beyond each one's range (check_args asks first), or None."""
    if args.compile_mode == "reduce-overhead" and torch_device().type != "cuda":
        return "--compile-mode reduce-overhead replays CUDA graphs, and torch has no CUDA device here: use default"
    if args.log_frequency % args.num_envs or args.total_timesteps % args.log_frequency:
        return (f"log_frequency={args.log_frequency} must be a multiple of num_envs={args.num_envs} and divide "
                f"total_timesteps={args.total_timesteps}")
    if args.train_frequency < args.num_envs or args.target_network_frequency < args.num_envs:
        return (f"train_frequency={args.train_frequency} and target_network_frequency={args.target_network_frequency} "
                f"must be at least num_envs={args.num_envs}: one vector step makes at most one update")
    if args.batch_size > args.buffer_size:
        return f"batch_size={args.batch_size} is larger than buffer_size={args.buffer_size}"
    if args.total_timesteps and args.learning_starts >= args.total_timesteps:
        return (f"learning_starts={args.learning_starts} is not before the run's end (total_timesteps="
                f"{args.total_timesteps}): it would never learn")
    if args.profile and args.total_timesteps // args.log_frequency < 3:  # the first iteration compiles
        return (f"--profile traces the last two iterations after a first: total_timesteps must be at least "
                f"3 * log_frequency = {3 * args.log_frequency}, got {args.total_timesteps}")
    return None


# %% main
def main():
    args = tyro.cli(RunArgs)  # plain: args = tyro.cli(Args)
    check_args(args)  # harness: bad input exits 2 before anything is written
    env, env_params = make_torch_env(args.env_id, torch_device()) if args.torch_env else make_env(args.env_id)
    if args.model == "cnn" and len(shape := env.observation_space(env_params).shape) != 3:
        fail(f"--model cnn needs image observations (height, width, channels); {args.env_id}'s have shape {shape}")
    saved = read_model(args.load_model, args) if args.load_model else None  # harness
    writer = start_run(args, variant_name(args), torch_device())  # plain: writer = Writer(f"runs/{args.env_id}__{variant_name(args)}__{args.seed}__{int(time.time())}")
    with writer:  # harness: summary.json, the saved model and the evaluation; an interrupted run keeps its logs
        q_network, target_network, optimizer = train(args, env, env_params, writer, saved)  # plain: train(args, env, env_params, writer)
        writer.finish(save=lambda run_dir: save_model(run_dir, q_network, target_network, optimizer, args),  # harness
                      # evaluation's fresh envs: the seed key folded with 4, a stream training does not draw from
                      evaluate=lambda: evaluate(q_network, jax.random.fold_in(jax.random.key(args.seed), 4), env,
                                                env_params, args.eval_episodes, args.end_e, args.seed))
    # plain: writer.close()


# %% harness
# The benchmark's own part, one text in every script (tests/test_shape.py holds it): the run's arguments, their
# checks, the run's record (run.json: arguments, machine, versions, threads), the TensorBoard writer and
# --track, --profile's named ranges, summary.json, the saved model and the evaluation. `python plain.py SCRIPT`
# prints the script without it (README, "Copying a script into your project").
import cProfile
import importlib.util
import json
import math
import os
import platform
import resource
import signal
import sys
from contextlib import nullcontext
from dataclasses import asdict
from importlib import metadata

TORCH, JAX = globals().get("torch"), globals().get("jax")  # the frameworks this script imports (one, or both)


@dataclass
class RunArgs(Args):
    """The algorithm's arguments (Args, above) and the benchmark's own: tyro.cli(RunArgs) reads both."""
    matmul_precision: Literal["float32", "tf32"] = "float32"
    """float32 matmuls on a GPU, set alike in every framework: full float32, or TF32 tensor cores"""
    log_dir: str = "runs"
    """parent directory of the run directories"""
    save_model: bool = False
    """at the end, save the networks and the optimizers' state (the script's save_model()) into the run directory"""
    load_model: str | None = None
    """start from a model this script saved (its file, or the run directory holding it) instead of fresh weights"""
    eval_episodes: int = 0
    """after training, run this many episodes on fresh envs, acting as the script's evaluate() does (eval/...)"""
    profile: bool = False
    """trace the iterations the script's traced() names into the run directory: the framework's ops (torch's in
    trace.json.gz, JAX's compiled programs in plugins/profile/: Perfetto opens both) and Python's side (python.prof,
    snakeviz opens it); docs/profiling.md"""
    progress_seconds: float = 30.0
    """where stdout is no terminal (a log file, a job scheduler): seconds between progress lines (0: each iteration)"""
    track: Literal["mlflow", "wandb"] | None = None
    """also log the run to MLflow (a store in the run directory, or MLFLOW_TRACKING_URI's) or Weights & Biases
    (synced from TensorBoard, as CleanRL's --track; WANDB_MODE=offline honoured); docs/tracking.md"""


def fail(message: str):
    """Bad input: one line on stderr, exit code 2, nothing written."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


RANGES = {  # every numeric argument's valid values (of any script's Args), checked before anything is written
    "a positive integer": (("num_envs", "num_steps", "num_minibatches", "update_epochs", "num_agents", "buffer_size",
                            "batch_size", "train_frequency", "target_network_frequency", "policy_frequency",
                            "log_frequency"), lambda x: x > 0),
    "an integer >= 0": (("num_iterations", "total_timesteps", "learning_starts", "eval_episodes"), lambda x: x >= 0),
    "> 0": (("learning_rate", "policy_lr", "q_lr", "clip_coef", "max_grad_norm", "adam_eps"),
            lambda x: 0 < x < math.inf),
    ">= 0": (("ent_coef", "vf_coef", "alpha", "policy_noise", "exploration_noise", "noise_clip",
              "progress_seconds"),
             lambda x: 0 <= x < math.inf),
    "in [0, 1]": (("gamma", "gae_lambda", "tau", "start_e", "end_e"), lambda x: 0 <= x <= 1),
    "in (0, 1]": (("exploration_fraction",), lambda x: 0 < x <= 1),
    "in [0, 2**31 - 1], what every framework's generator takes": (("seed",), lambda x: 0 <= x < 2**31),
    "two values in [0, 1)": (("adam_betas",), lambda x: all(0 <= beta < 1 for beta in x)),
}


def check_args(args):
    """Each numeric argument in its range (None: the action space's default, set later), --track's package,
    then what the algorithm's invalid(args) finds."""
    for expected, (names, valid) in RANGES.items():
        for name in names:
            if getattr(args, name, None) is not None and not valid(getattr(args, name)):
                fail(f"{name} must be {expected}, got {getattr(args, name)}")
    if args.track and importlib.util.find_spec(args.track) is None:  # imported only when asked for
        fail(f"--track {args.track} needs the {TRACKERS[args.track]} package: pip install {TRACKERS[args.track]}")
    if why := invalid(args):  # the algorithm's own rules (the reading part's invalid())
        fail(why)


PACKAGES = ("jax", "jaxlib", "flax", "optax", "equinox", "gymnax", "craftax", "gymnasium", "minatar", "mujoco",
            "envpool", "torch")


THREAD_VARIABLES = ("XLA_FLAGS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY")  # what sets each runtime's threads


def machine() -> dict:
    """What a time depends on besides the code: the versions, the CPU, its load as the run starts, the threads."""
    try:
        with open("/proc/cpuinfo") as f:  # Linux: the first processor's block
            cpu = dict(map(str.strip, line.split(":", 1)) for line in f.read().split("\n\n")[0].splitlines()
                       if ":" in line)
    except OSError:
        cpu = {}
    threads = {name: os.environ.get(name) for name in THREAD_VARIABLES}
    if TORCH is not None:
        threads |= {"torch_intra_op": TORCH.get_num_threads(), "torch_inter_op": TORCH.get_num_interop_threads(),
                    "torch_backend": TORCH.__config__.parallel_info().rsplit(": ", 1)[-1].strip(),
                    "torch_cpu_capability": TORCH.backends.cpu.get_cpu_capability()}
    installed = {dist.metadata["Name"].lower(): dist.version for dist in metadata.distributions()}
    return {"versions": {"python": platform.python_version(), **{pkg: installed.get(pkg) for pkg in PACKAGES}},
            "cpu": cpu.get("model name", platform.processor()),
            "cpu_family_model": [cpu.get("cpu family"), cpu.get("model")],
            "cpu_flags": [f for f in ("avx2", "avx512f", "amx_tile") if f in cpu.get("flags", "").split()],
            "cpu_mhz": float(cpu["cpu MHz"]) if "cpu MHz" in cpu else None, "cores": os.cpu_count(),
            "affinity": sorted(os.sched_getaffinity(0)), "load_average": os.getloadavg(),
            "session": os.environ.get("BENCHBACK_SESSION"), "threads": threads}  # session: one bench.sh sitting


def make_run_dir(args: Args, variant: str, device: str, precision: dict, **record) -> str:
    """A new directory per run, never reused: the unix time in ms, bumped on a clash. record: more of run.json."""
    stamp = int(time.time() * 1000)
    while True:
        run_dir = os.path.join(args.log_dir, f"{args.env_id}__{variant}__{args.model}__s{args.seed}__{stamp}")
        try:
            os.makedirs(run_dir)
            break
        except FileExistsError:
            stamp += 1
        except OSError as e:  # --log-dir is a file, or a place we may not write: bad input like any other
            fail(f"cannot create a run directory in --log-dir {args.log_dir!r}: {e.strerror}")
    with open(os.path.join(run_dir, "run.json"), "w") as f:
        json.dump({"args": asdict(args), "variant": variant, "matmul_precision": precision,
                   **record, "device": device, **machine(), "start_time": START_TIME}, f, indent=2)
    return run_dir


TRACKERS = {"mlflow": "mlflow-skinny", "wandb": "wandb"}  # --track's module, and the package that brings it


class MLflowWriter(Writer):
    """TensorBoard's writer that also hands each step's scalars to MLflow: one call per step, at each flush."""

    def __init__(self, run_dir: str, mlflow):
        super().__init__(run_dir)
        self.mlflow, self.pending = mlflow, {}

    def add_scalar(self, tag, data, step, **kwargs):
        super().add_scalar(tag, data, step, **kwargs)
        self.pending.setdefault(int(step), {})[tag] = float(data)

    def flush(self):
        super().flush()
        for step in sorted(self.pending):
            self.mlflow.log_metrics(self.pending.pop(step), step=step)

    def close(self):
        self.flush()
        super().close()


def make_writer(args: Args, variant: str, run_dir: str) -> Writer:
    """The run's TensorBoard writer; with --track, the run opened in W&B or MLflow too (docs/tracking.md)."""
    params, name = {**asdict(args), "variant": variant}, os.path.basename(run_dir)
    if args.track == "wandb":  # before the writer, whose event file W&B follows (CleanRL's --track)
        import wandb
        # its files beside the run directories: inside one, W&B would read their copy of the events too
        wandb.init(project="benchback", name=name, config=params, dir=args.log_dir, sync_tensorboard=True)
    elif args.track == "mlflow":
        import mlflow
        if "MLFLOW_TRACKING_URI" not in os.environ:  # else the user's server or store: MLflow reads the variable
            mlflow.set_tracking_uri(f"sqlite:///{os.path.abspath(run_dir)}/mlflow.db")  # a store in the run directory
            mlflow.create_experiment("benchback", os.path.abspath(os.path.join(run_dir, "mlflow")))
        mlflow.set_experiment("benchback")
        mlflow.start_run(run_name=name)
        mlflow.log_params(params)
        return MLflowWriter(run_dir, mlflow)
    return Writer(run_dir)


def end_tracking(args: Args, run_dir: str, summary: dict | None):
    """With --track: the saved model to MLflow, and the tracker's run ended (failed without a summary)."""
    if args.track == "mlflow":
        import mlflow
        if summary and summary["saved_model"]:
            mlflow.log_artifact(os.path.join(run_dir, summary["saved_model"]))
        mlflow.end_run("FINISHED" if summary else "FAILED")
    elif args.track == "wandb":
        import wandb
        wandb.finish(exit_code=0 if summary else 1)


def region(name: str, on: bool):
    """A named range in --profile's trace; when not profiling, nothing (record_function costs µs even then)."""
    if not on:
        return nullcontext()
    return TORCH.profiler.record_function(name) if TORCH else JAX.profiler.TraceAnnotation(name)


def set_matmul_precision(precision: str) -> dict:
    """The same float32 matmuls in every framework the script imports: on a GPU, JAX's default would be TF32,
    torch's full float32."""
    set_by = {}
    if JAX is not None:
        JAX.config.update("jax_default_matmul_precision", {"float32": "float32", "tf32": "tensorfloat32"}[precision])
        set_by["jax"] = JAX.config.jax_default_matmul_precision
    if TORCH is not None:
        TORCH.set_float32_matmul_precision({"float32": "highest", "tf32": "high"}[precision])
        TORCH.backends.cudnn.allow_tf32 = precision == "tf32"  # convolutions: cuDNN's default is TF32
        set_by["torch"] = TORCH.get_float32_matmul_precision()
    return set_by


def peak_device_mb():
    """On a GPU, the peaks of the allocators the script uses, summed: torch's and JAX's; on a CPU, None."""
    jax_stats = (JAX.devices()[0].memory_stats() or {}) if JAX is not None else {}  # {} on a CPU
    torch_cuda = TORCH is not None and TORCH.cuda.is_initialized()
    if not torch_cuda and "peak_bytes_in_use" not in jax_stats:
        return None
    return ((TORCH.cuda.max_memory_allocated() if torch_cuda else 0) + jax_stats.get("peak_bytes_in_use", 0)) / 2**20


def read_saved(path: str, read, **this_run):
    """--load-model's model: its file (or the run directory holding MODEL_FILE) as read(file) reads it, a dict with
    the "meta" it was saved with; or exit 2 saying why this run cannot start from it: unreadable, not a whole
    model, saved by another script (SAVED_BY) or with other this_run values (its model, env id, ...)."""
    path = os.path.join(path, MODEL_FILE) if os.path.isdir(path) else path
    try:
        with open(path, "rb") as f:
            saved = read(f)
        meta = saved["meta"]
    except (FileNotFoundError, PermissionError, IsADirectoryError) as e:
        fail(f"--load-model {path}: {e.strerror}")
    except Exception:  # truncated, or not a saved model: the readers raise many kinds
        fail(f"--load-model {path} is not a whole model saved by {SAVED_BY}")
    for key, value in {"script": SAVED_BY, **this_run}.items():
        if meta.get(key, False) != value:
            fail(f"--load-model {path} was saved with {key} {meta.get(key)!r}; this run has {value!r}")
    return saved


ALGORITHM = SAVED_BY.split("_")[0]  # each script's name starts with its algorithm: ppo, dqn, td3, sac


def total_steps(args) -> int:
    """The env steps a run takes, its step axis's end: total_timesteps, or num_iterations rollouts of
    num_envs * num_steps (each agent's, in an agent script)."""
    if hasattr(args, "total_timesteps"):
        return args.total_timesteps
    return args.num_iterations * args.num_envs * args.num_steps


def against_target(env_id: str, model: str, final: float | None) -> str:
    """Whether a final return reached the study's target for this algorithm, env and model (results/targets.json,
    beside the scripts, which analyze.py writes from the committed learning runs): did the run learn as the
    study's did? Or why it cannot say."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results", "targets.json")
    target = json.load(open(path)).get(ALGORITHM, {}).get(env_id, {}).get(model) if os.path.exists(path) else None
    if target is None:
        return f"; the study has no target for {ALGORITHM.upper()} on {env_id} with the {model} model to judge it by"
    reached = "reached: it learned" if final is not None and final >= target["target"] else "not reached"
    return (f"; the study's target for {env_id}, {model} model ({target['share']:.0%} of the way to its best final "
            f"return in {target['steps']:,} env steps), {target['target']:g}: {reached}")


def stop_on(signum, frame):
    """SIGTERM (a scheduler's time limit, kill): stop as Ctrl-C does, so that the run says where it stopped."""
    raise KeyboardInterrupt(signal.Signals(signum).name)


def start_run(args, variant: str, device, **record) -> "RunLog":
    """The run's directory and record, and its writer: TensorBoard's, which the run's log wraps.
    device: JAX's device kind, or the torch.device a torch script trains on."""
    precision = set_matmul_precision(args.matmul_precision)
    if TORCH is not None and isinstance(device, TORCH.device):
        if device.type == "cpu" and TORCH.cuda.is_available():  # torch follows JAX, and this jaxlib has no GPU
            print("warning: torch sees a GPU, but JAX runs on the CPU (a CPU-only jaxlib?), so this run trains on "
                  "the CPU; install JAX's CUDA plugin to train on the GPU (docs/benchmark.md)", file=sys.stderr)
        device = TORCH.cuda.get_device_name() if device.type == "cuda" else "cpu"
    run_dir = make_run_dir(args, variant, device, precision, **record)
    return RunLog(make_writer(args, variant, run_dir), args, variant, run_dir)


class RunLog:
    """The writer the algorithm logs to: TensorBoard's, and what the benchmark keeps besides. Each iteration
    (iteration(), after the algorithm's own scalars) adds its times (time/...) and memory (memory/...), keeps its
    episodes for the final return, flushes, and starts or ends --profile's trace at the iterations traced(args)
    names; where stdout is no terminal (rich draws no bar there), a line after the first iteration (compilation
    included) and every --progress-seconds. As a context: finish() writes summary.json's figures, the saved model
    and the evaluation; leaving closes the writer and ends --track, and writes summary.json last; an interrupted
    run (an error, Ctrl-C, SIGTERM) says at which step it stopped, and keeps its logs without a summary.json."""

    def __init__(self, writer: Writer, args, variant: str, run_dir: str):
        self.writer, self.args, self.variant, self.run_dir = writer, args, variant, run_dir
        self.python = cProfile.Profile()  # --profile: the Python side of the traced iterations
        self.traced = traced(args)  # --profile's iterations (from 0)
        self.episodes = []  # (count, return sum) per iteration: numbers, or arrays of one entry per agent
        self.step, self.summary = 0, None
        self.lines = not sys.stdout.isatty()  # progress as plain lines
        self.started = self.reported = time.time()
        self.first = None  # (time, step) at the end of the first iteration, which compiles
        if self.lines:
            print(f"{run_dir}: {total_steps(args):,} env steps to run; the first iteration includes compilation",
                  flush=True)

    def add_scalar(self, tag: str, value, step: int):
        self.writer.add_scalar(tag, value, step)
        self.step = step  # the iteration's step, for what iteration() adds

    def iteration(self, iteration: int, times: dict, stats: dict):
        for name, seconds in times.items():
            self.writer.add_scalar(f"time/{name}", seconds, self.step)
        self.episodes.append((np.asarray(stats["episodes"]), np.asarray(stats["episodic_return_sum"], dtype=float)))
        self.writer.add_scalar("memory/peak_rss_mb", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, self.step)
        if (device_mb := peak_device_mb()) is not None:  # None: the framework does not report it (a CPU)
            self.writer.add_scalar("memory/peak_device_mb", device_mb, self.step)
        self.writer.flush()  # an interrupted run keeps every finished iteration
        now = time.time()
        if self.first is None:
            self.first = now, self.step
            if self.lines:
                print(f"step {self.step:,}: first iteration done, compilation included, "
                      f"{now - self.started:.1f} s", flush=True)
        elif self.lines and now - self.reported >= self.args.progress_seconds:
            self.reported = now
            print(self.progress(now), flush=True)
        if self.args.profile and iteration + 1 in (self.traced.start, self.traced.stop):
            self.trace(start=iteration + 1 == self.traced.start)

    def trace(self, start: bool):
        """--profile: starts or ends the trace of the iterations traced(args) names (docs/profiling.md)."""
        if start:
            if TORCH is not None:  # the CPU's ops, and the GPU's kernels where there is one
                self.tracer = TORCH.profiler.profile()
                self.tracer.start()
            else:
                JAX.profiler.start_trace(self.run_dir, create_perfetto_trace=True)
            self.python.enable()
        else:
            self.python.disable()
            if TORCH is not None:
                self.tracer.stop()
                self.tracer.export_chrome_trace(os.path.join(self.run_dir, "trace.json.gz"))
            else:
                JAX.profiler.stop_trace()
            self.python.dump_stats(os.path.join(self.run_dir, "python.prof"))

    def progress(self, now: float) -> str:
        """Where the run is: its step, the recent return, the rate since compilation, the time left at it."""
        rate = (self.step - self.first[1]) / max(now - self.first[0], 1e-9)
        left = (total_steps(self.args) - self.step) / rate if rate else math.inf
        return (f"step {self.step:,} of {total_steps(self.args):,}: {self.returns()}, {rate:,.0f} steps/s, "
                f"{left / 60:,.1f} min left at this rate")

    def returns(self, final: bool = False) -> str:
        """The mean return of the episodes that ended in the last 10 iterations, in words."""
        if (mean := self.final_return()) is None:
            return "no episode ended in the last 10 iterations" if final else "no episode ended yet"
        return f"{'final ' if final else ''}return {mean:,.2f} (the episodes of the last 10 iterations)"

    def finish(self, save, evaluate):
        """After the timed part: summary.json's figures, the model save(run_dir) saved with --save-model, and
        --eval-episodes' returns, evaluate()."""
        self.summary = {"time/total": time.time() - START_TIME, "charts/episodic_return_final": self.final_return()}
        self.summary["saved_model"] = save(self.run_dir) if self.args.save_model else None
        self.summary |= self.evaluation(evaluate() if self.args.eval_episodes else [])

    def __enter__(self):
        return self

    def __exit__(self, error, value, _):
        self.writer.close()
        end_tracking(self.args, self.run_dir, None if error else self.summary)
        if error:  # an interrupted run keeps what it logged, and has no summary.json
            stopped = issubclass(error, KeyboardInterrupt)  # Ctrl-C, or SIGTERM (stop_on)
            why = (value.args[0] if value.args else "Ctrl-C") if stopped else error.__name__
            print(f"{self.run_dir}: stopped by {why} at step {self.step:,} of {total_steps(self.args):,}; the logs "
                  "of the finished iterations are kept, no summary.json", flush=True)
            if stopped:  # said: no traceback, and the exit code the signal's default would give
                sys.exit(143 if why == "SIGTERM" else 130)
            return
        with open(os.path.join(self.run_dir, "summary.json"), "w") as f:  # written last: marks the run complete
            json.dump(self.summary, f, indent=2)
        final = self.summary["charts/episodic_return_final"]
        evaluation = f"; evaluation {self.summary['eval/episodic_return']:,.1f}" if self.args.eval_episodes else ""
        target = against_target(self.args.env_id, self.args.model, final)
        print(f"{self.run_dir}: {self.returns(final=True)}{evaluation}{target}")

    def evaluation(self, returns) -> dict:
        """eval/episodic_return: each evaluation episode's return (step = episode), or with an agent axis each
        agent's under eval/episodic_return/agent<i>; summary.json's mean and every return."""
        returns = np.asarray(returns, dtype=float)
        for agent, agent_returns in enumerate(returns if returns.ndim == 2 else [returns]):
            tag = f"eval/episodic_return/agent{agent}" if returns.ndim == 2 else "eval/episodic_return"
            for episode, episodic_return in enumerate(agent_returns):
                self.writer.add_scalar(tag, episodic_return, episode)
        return {"eval/episodic_return": float(returns.mean()) if returns.size else None,
                "eval/episodic_returns": returns.tolist() if returns.size else None}

    def final_returns(self) -> list:
        """Each agent's mean return of the episodes that ended in the last 10 iterations (None: none ended)."""
        if not self.episodes:
            return [None] * getattr(self.args, "num_agents", 1)
        count, total = (np.sum(x, 0) for x in zip(*self.episodes[-10:]))
        return [float(s / n) if n else None for s, n in zip(np.atleast_1d(total), np.atleast_1d(count))]

    def final_return(self):
        """The mean return of the episodes that ended in the last 10 iterations (of the agents, the mean of each's)."""
        returns = [r for r in self.final_returns() if r is not None]
        return float(np.mean(returns)) if returns else None


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, stop_on)  # a scheduler's time limit: the run says where it stopped
    main()
