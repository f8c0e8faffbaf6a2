"""PPO with PyTorch and torch.compile, on Gymnasium environments stepped on the CPU (benchback).

ppo_torch_gymnasium.py with ppo_torch_compile.py's changes, so `diff
ppo_torch_gymnasium.py ppo_torch_compile_gymnasium.py` shows what compiling changes
and `diff ppo_torch_compile.py ppo_torch_compile_gymnasium.py` what a CPU environment
changes: GAE, the policy step and each minibatch's whole step are compiled (the scope
the study measured fastest on its CPU), the learning rate is a tensor written in place,
and on CUDA the compiled steps replay as CUDA graphs. The envs step on the host as
--vectorization says (Gymnasium's loop, its NumPy CartPole, EnvPool's C++ threads).

    python ppo_torch_compile_gymnasium.py --env-id HalfCheetah-v5 --vectorization envpool
    python ppo_torch_compile_gymnasium.py --compile-mode none   # exactly ppo_torch_gymnasium.py
"""

# %% imports
import time

START_TIME = time.time()  # harness: before the heavy imports, so the startup time counts them

import math
import os
from dataclasses import dataclass, replace
from typing import Annotated, Literal, NamedTuple

import gymnasium as gym
import numpy as np
import torch
import torch.nn as nn
import tyro
from minatar.gym import register_envs as register_minatar_envs
from rich.progress import Progress
from tensorboard.summary import Writer  # numpy-only event writer: no torch, no TensorFlow


# %% Args
# the defaults an action space picks: the seed README's for discrete actions, CleanRL's continuous script's
# (ppo_continuous_action.py) for continuous ones (why: docs/method.md, "Continuous actions")
DEFAULTS = {False: dict(num_minibatches=8, learning_rate=2.5e-4, ent_coef=0.01),
            True: dict(num_minibatches=32, learning_rate=3e-4, ent_coef=0.0)}
BY_SPACE = {name: tyro.conf.arg(help_behavior_hint=f"(default: {DEFAULTS[False][name]}, or {DEFAULTS[True][name]} "
                                 "for continuous actions)") for name in DEFAULTS[False]}  # what --help says


@dataclass
class Args:
    env_id: str = "CartPole-v1"
    """a Gymnax environment id, whose Gymnasium twin (same dynamics) runs, or a MuJoCo task: HalfCheetah-v5, Hopper-v5, Walker2d-v5, or with --vectorization envpool an Atari game: Breakout-v5, Pong-v5"""
    vectorization: Literal["sync", "async", "vector", "envpool"] = "sync"
    """how the envs step: sync (a Python loop over Gymnasium envs), async (a worker process per env), vector (Gymnasium's NumPy-vectorized env), envpool (C++ threads)"""
    model: Literal["small", "medium", "large", "cnn"] = "small"
    """hidden layers of actor and critic: small=(64,64), medium=(256,)*3, large=(1024,)*6; cnn: a CNN both heads
    share, for image observations (MinAtar's network on its 10x10 grids, the Nature CNN on 84x84 frames)"""
    num_envs: int = 32
    """parallel environments"""
    num_steps: int = 256
    """steps per environment in one rollout (batch = num_envs * num_steps)"""
    num_minibatches: Annotated[int | None, BY_SPACE["num_minibatches"]] = None
    """minibatches per epoch"""
    update_epochs: int = 10
    """passes over the batch per update"""
    num_iterations: int = 100
    """iterations, each one rollout and one update"""
    learning_rate: Annotated[float | None, BY_SPACE["learning_rate"]] = None
    """Adam learning rate, decayed linearly to 0 over all optimizer steps"""
    gamma: float = 0.99
    """discount factor"""
    gae_lambda: float = 0.95
    """lambda of generalized advantage estimation"""
    clip_coef: float = 0.2
    """surrogate (and value) clipping coefficient"""
    clip_vloss: bool = True
    """clip the value loss as PPO's original code does"""
    ent_coef: Annotated[float | None, BY_SPACE["ent_coef"]] = None
    """entropy bonus coefficient"""
    vf_coef: float = 0.5
    """value loss coefficient"""
    max_grad_norm: float = 0.5
    """global gradient norm clip"""
    adam_eps: float = 1e-5
    """Adam epsilon"""
    adam_betas: tuple[float, float] = (0.9, 0.999)
    """Adam betas"""
    normalize: bool = True
    """continuous actions: normalize observations and scale rewards by running statistics (CleanRL's wrappers)"""
    bootstrap_truncation: bool = True
    """on a truncated (time-limit) step add gamma * V(final observation) to the reward"""
    seed: int = 1
    """one seed drives init, environments, actions and shuffling"""
    sync_timing: bool = False  # harness
    """block around rollout and update to time them (time/rollout, time/update)"""
    compile_mode: Literal["auto", "default", "reduce-overhead", "max-autotune", "none"] = "auto"
    """torch.compile mode: auto is reduce-overhead (CUDA graphs) on CUDA and default on CPU; none is eager"""
    compile_scope: Literal["auto", "grads", "grads+policy", "update", "update+policy"] = "auto"
    """besides GAE: grads (loss, gradients, clip), update (+ Adam), +policy (+ the policy step); auto: update+policy"""


MODELS = {"small": (64, 64), "medium": (256, 256, 256), "large": (1024,) * 6, "cnn": ()}  # cnn: one-layer heads
# --model cnn's torso: (filters, kernel size, stride) per convolution, the dense layer's width and the input's
# scale; MinAtar's own network for its small grids, the Nature CNN of CleanRL's ppo_atari_envpool.py for frames
CNNS = {"minatar": dict(convs=((16, 3, 1),), dense=128, scale=1.0),
        "nature": dict(convs=((32, 8, 4), (64, 4, 2), (64, 3, 1)), dense=512, scale=1 / 255)}


def variant_name(args: Args) -> str:
    mode = "" if args.compile_mode == "auto" else f"-{args.compile_mode}"
    scope = "" if args.compile_scope == "auto" or args.compile_mode == "none" else f"-{args.compile_scope}"
    return "torch_compile_gymnasium" + ("" if args.vectorization == "sync" else f"-{args.vectorization}") + mode + scope


def resolved(args: Args, device) -> Args:
    """auto on this device: on CUDA CUDA graphs, on a CPU mode default; the scope measured fastest
    (docs/results.md), all of it. run.json records what ran."""
    mode = {"auto": "reduce-overhead" if device.type == "cuda" else "default"}.get(args.compile_mode, args.compile_mode)
    return replace(args, compile_mode=mode, compile_scope=args.compile_scope.replace("auto", "update+policy"))


# %% environment helpers
MINATAR = dict(sticky_action_prob=0.0)  # Gymnax's MinAtar ports have no sticky actions
TWINS = {  # each Gymnax id's twin on the CPU: the same dynamics, action set and time limit
    "CartPole-v1": ("CartPole-v1", {}),
    "Acrobot-v1": ("Acrobot-v1", {}),
    "MountainCar-v0": ("MountainCar-v0", {}),
    "Asterix-MinAtar": ("MinAtar/Asterix-v1", dict(MINATAR, max_episode_steps=1000)),  # v1: the minimal action set
    "Breakout-MinAtar": ("MinAtar/Breakout-v1", dict(MINATAR, max_episode_steps=1000)),
    "Freeway-MinAtar": ("MinAtar/Freeway-v1", dict(MINATAR, max_episode_steps=2500)),
    "Seaquest-MinAtar": ("MinAtar/Seaquest-v1", dict(MINATAR, max_episode_steps=1000)),
    "SpaceInvaders-MinAtar": ("MinAtar/SpaceInvaders-v1", dict(MINATAR, max_episode_steps=1000)),
    "Pendulum-v1": ("Pendulum-v1", {}),
    "MountainCarContinuous-v0": ("MountainCarContinuous-v0", {}),
    # MuJoCo's tasks with flat observations: no Gymnax twin, each runs as itself
    "HalfCheetah-v5": ("HalfCheetah-v5", {}),
    "Hopper-v5": ("Hopper-v5", {}),
    "Walker2d-v5": ("Walker2d-v5", {}),
}
# Atari through EnvPool (its ROMs are in its wheel), as CleanRL's ppo_atari_envpool.py: EnvPool's 84x84 grey
# frames, 4 stacked, 4 frames a step; a lost life ends an episode for learning, rewards clipped to their sign,
# while the episode statistics count whole games and their scores (env_step)
ATARI = ("Breakout-v5", "Pong-v5")
TWINS |= {game: (game, dict(episodic_life=True, reward_clip=True)) for game in ATARI}
GYMNASIUM = tuple(env for env in TWINS if env not in ATARI)
VECTORIZATIONS = {  # each way to step the envs, and the twins it offers
    "sync": GYMNASIUM,  # Gymnasium's SyncVectorEnv: one env after another
    "async": GYMNASIUM,  # Gymnasium's AsyncVectorEnv: a worker process per env, for expensive envs
    "vector": ("CartPole-v1",),  # Gymnasium's NumPy-vectorized envs: one array operation for all of them
    "envpool": ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0",
                "HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", *ATARI),  # EnvPool's C++ envs (its MinAtar has none)
}
SAME_STEP = gym.vector.AutoresetMode.SAME_STEP


def make_env(env_id: str, num_envs: int, vectorization: str = "sync", seed: int = 0):
    """The Gymnasium twin of a Gymnax env as a vector env, or exit 2. Gymnasium's sync and async vector
    envs reset an env in the step its episode ends; the others reset it on the next step (see env_step)."""
    if env_id not in TWINS:
        fail(f"env_id {env_id!r} is not a Gymnasium env this script runs; it runs {', '.join(TWINS)} "
             "(for a Gymnax env, the script without _gymnasium)")
    if env_id not in VECTORIZATIONS[vectorization]:
        fail(f"--vectorization {vectorization} offers {', '.join(VECTORIZATIONS[vectorization])}, not {env_id!r}")
    twin, kwargs = TWINS[env_id]
    if vectorization == "envpool":
        import envpool  # a second of imports: only when asked for

        return envpool.make_gymnasium(twin, num_envs=num_envs, seed=seed, **kwargs)  # env i: seed + i
    if twin.startswith("MinAtar/") and twin not in gym.registry:
        register_minatar_envs()
    if vectorization == "vector":
        return gym.make_vec(twin, num_envs, vectorization_mode="vector_entry_point", **kwargs)
    # copy=False: the batched observation is not copied, flatten_obs makes the one copy we keep; the
    # async workers are forked before any framework starts its threads (main makes the envs first)
    return gym.make_vec(twin, num_envs, vectorization_mode=vectorization, **kwargs,
                        vector_kwargs={"autoreset_mode": SAME_STEP, "copy": False})


def continuous(envs) -> bool:
    return isinstance(envs.single_action_space, gym.spaces.Box)


def normalizes(args: Args, envs) -> bool:
    return args.normalize and continuous(envs)


class Running(NamedTuple):
    """A running mean and variance (Gymnasium's RunningMeanStd), merged batch by batch."""
    mean: np.ndarray
    var: np.ndarray
    count: float

    def update(self, x):
        delta, n = x.mean(0) - self.mean, x.shape[0]
        total = self.count + n
        var = (self.var * self.count + x.var(0) * n + delta**2 * self.count * n / total) / total
        return Running(self.mean + delta * n / total, var, total)


class Normalizer(NamedTuple):
    """CleanRL's NormalizeObservation and NormalizeReward (each clipped to +-10), over every env at once."""
    obs: Running
    reward: Running  # of the discounted returns, whose standard deviation scales the reward
    discounted: np.ndarray  # each env's discounted return so far

    @classmethod
    def start(cls, obs_dim, num_envs, saved: dict | None = None):
        """Fresh statistics (mean 0, variance 1, count 1e-4, as Gymnasium's), or those a model was saved with."""
        fresh = {"obs": Running(np.zeros(obs_dim), np.ones(obs_dim), 1e-4), "reward": Running(np.zeros(()), np.ones(()), 1e-4)}
        stats = {k: Running(*(np.asarray(saved[k][f], np.float64) for f in Running._fields)) for k in fresh} if saved else fresh
        return cls(stats["obs"], stats["reward"], np.zeros(num_envs))

    def observe(self, obs, learn=True):
        """The statistics take the observations in first, then scale them; learn=False: frozen."""
        stats = self.obs.update(obs) if learn else self.obs
        return self._replace(obs=stats), np.clip((obs - stats.mean) / np.sqrt(stats.var + 1e-8), -10, 10).astype(np.float32)

    def scale(self, reward, terminated, gamma):
        discounted = np.where(terminated, 0.0, self.discounted * gamma) + reward  # cut by a termination only, as Gymnasium's
        stats = self.reward.update(discounted)
        return (self._replace(reward=stats, discounted=discounted),
                np.clip(reward / np.sqrt(stats.var + 1e-8), -10, 10).astype(np.float32))


class EnvState(NamedTuple):
    episode_return: np.ndarray
    episode_length: np.ndarray
    resetting: np.ndarray  # next-step autoreset: the envs whose next step is a reset, not a transition
    norm: Normalizer | None  # None: raw observations and rewards


class EnvStep(NamedTuple):
    obs: np.ndarray  # after auto-reset
    reward: np.ndarray
    terminated: np.ndarray
    truncated: np.ndarray
    valid: np.ndarray  # 0 for a next-step autoreset's reset step: the loss gives it no weight
    final_obs: np.ndarray  # before auto-reset, only of the envs that bootstrap (truncated, not terminated)
    episode_return: np.ndarray  # return of the episode that ended here, else 0
    episode_length: np.ndarray


def frames(envs) -> bool:
    """EnvPool's Atari envs, whose observations are stacked frames (stack, h, w)."""
    return "stack_num" in getattr(envs, "config", {})


def observation_shape(envs) -> tuple[int, ...]:
    """One observation's shape as flatten_obs hands it over: images as (h, w, channels)."""
    shape = envs.single_observation_space.shape
    return (*shape[1:], shape[0]) if frames(envs) else shape


def flatten_obs(obs, envs):
    """A float32 row per observation (a copy): MinAtar's grids as they come, Atari's frames moved to
    (h, w, stack) in the same copy, the image layout every script's CNN takes."""
    return (np.moveaxis(obs, 1, -1) if frames(envs) else obs).astype(np.float32, order="C").reshape(len(obs), -1)


def env_reset(envs, seed, norm: Normalizer | None = None, learn=True):
    seeded = "seed" in getattr(envs, "config", {})  # EnvPool's envs were seeded by make_env
    obs, _ = envs.reset() if seeded else envs.reset(seed=seed)  # env i is seeded with seed + i
    zeros, obs = np.zeros(envs.num_envs, np.float32), flatten_obs(obs, envs)
    if norm is not None:
        norm, obs = norm.observe(obs, learn)
    return obs, EnvState(zeros, zeros, np.zeros(envs.num_envs, bool), norm)


def env_step(envs, state: EnvState, action, gamma=None):
    """Steps every env and keeps the episode statistics (of the raw rewards), on the host. A same-step
    autoreset hands the final observations over in info; a next-step one returns them as the observation
    and spends the env's next step on the reset, which the batch then masks out. gamma: the discount of
    the returns that scale the rewards; None: the statistics stay frozen."""
    if continuous(envs):  # the env gets the sampled action clipped to its bounds
        action = np.clip(action, envs.single_action_space.low, envs.single_action_space.high)
    obs, reward, terminated, truncated, info = envs.step(action)
    obs, reward, done = flatten_obs(obs, envs), reward.astype(np.float32), terminated | truncated
    bootstrap = truncated & ~terminated  # only these need the value of their final observation
    if envs.metadata["autoreset_mode"] == SAME_STEP:
        final_obs = flatten_obs(np.stack(info["final_obs"][bootstrap]), envs) if bootstrap.any() else obs[:0]
        resetting = np.zeros_like(done)
    else:
        final_obs, resetting = obs[bootstrap], done
    valid = (~state.resetting).astype(np.float32)
    # Atari's statistics (CleanRL's): a game's score before clipping, until the game ends with its last life
    score, ended = (info["reward"], info["terminated"].astype(bool) | truncated) if frames(envs) else (reward, done)
    episode_return = state.episode_return + score  # a reset step's is 0
    episode_length = state.episode_length + valid
    norm = state.norm  # (a next-step autoreset's reset step joins the statistics, as in Gymnasium's wrappers)
    if norm is not None:
        norm, obs = norm.observe(obs, learn=gamma is not None)
        final_obs = norm.observe(final_obs, learn=False)[1]  # scaled as this step's observations, not learned from
        if gamma is not None:
            norm, reward = norm.scale(reward, terminated, gamma)
    step = EnvStep(obs, reward, terminated, truncated, valid, final_obs,
                   np.where(ended, episode_return, 0.0), np.where(ended, episode_length, 0.0))
    state = EnvState(np.where(ended, 0.0, episode_return), np.where(ended, 0.0, episode_length), resetting, norm)
    return state, step


# %% model
def layer_init(layer: nn.Module, scale: float) -> nn.Module:
    nn.init.orthogonal_(layer.weight, scale)
    nn.init.zeros_(layer.bias)
    return layer


def mlp(in_dim: int, hidden: tuple[int, ...], out_dim: int, out_scale: float) -> nn.Sequential:
    layers = []
    for width in hidden:
        layers += [layer_init(nn.Linear(in_dim, width), np.sqrt(2)), nn.Tanh()]
        in_dim = width
    return nn.Sequential(*layers, layer_init(nn.Linear(in_dim, out_dim), out_scale))


class CNN(nn.Module):
    """--model cnn's torso: VALID convolutions, then a dense layer, ReLU each (CleanRL's Atari network)."""

    def __init__(self, image_shape: tuple[int, int, int], convs, dense: int, scale: float):
        super().__init__()
        self.image_shape, self.scale = image_shape, scale  # (h, w, channels): each flat observation is one such image
        (h, w, channels), layers = image_shape, []
        for filters, size, stride in convs:
            layers += [layer_init(nn.Conv2d(channels, filters, size, stride), np.sqrt(2)), nn.ReLU()]
            h, w, channels = (h - size) // stride + 1, (w - size) // stride + 1, filters
        self.net = nn.Sequential(*layers, nn.Flatten(), layer_init(nn.Linear(h * w * channels, dense), np.sqrt(2)),
                                 nn.ReLU())

    def forward(self, x):
        images = x.reshape(-1, *self.image_shape).movedim(-1, 1) * self.scale  # NCHW, the layout torch's Conv2d takes
        return self.net(images).unflatten(0, x.shape[:-1])  # the batch's leading axes again (even of no rows)


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs with tanh, or with --model cnn one layer each on a CNN they share;
    returns (policy, value). The actor gives a categorical's logits, or a Gaussian's mean whose log-std
    is a parameter of its own (CleanRL's continuous head)."""

    def __init__(self, obs_shape: tuple[int, ...], hidden: tuple[int, ...], num_actions: int, continuous: bool,
                 cnn: dict | None = None):
        super().__init__()
        self.cnn = CNN(obs_shape, **cnn) if cnn else None
        in_dim = cnn["dense"] if cnn else math.prod(obs_shape)
        self.actor = mlp(in_dim, hidden, num_actions, 0.01)
        self.critic = mlp(in_dim, hidden, 1, 1.0)
        self.actor_logstd = nn.Parameter(torch.zeros(num_actions)) if continuous else None  # state-independent

    def forward(self, obs):
        features = self.features(obs)  # once for both heads
        return self.head(self.actor(features)), self.critic(features)[..., 0]

    def features(self, obs):
        return obs if self.cnn is None else self.cnn(obs)

    def policy(self, obs):
        return self.head(self.actor(self.features(obs)))

    def head(self, out):
        """The policy from the actor's output: (logits, None), or (mean, log-std) broadcast to the mean's shape."""
        return out, None if self.actor_logstd is None else self.actor_logstd.expand_as(out)

    def value(self, obs):
        return self.critic(self.features(obs))[..., 0]


def noise(shape, continuous: bool, device):
    """A rollout's sampling noise in one op: standard normal for a Gaussian, Gumbel for logits."""
    return torch.randn(shape, device=device) if continuous else -torch.empty(shape, device=device).exponential_().log()


def sample(policy, noise):
    """An action from the policy and its noise: Gumbel-max for logits (as jax.random.categorical: no
    multinomial, no validation sync), mean + std * noise for a Gaussian, not clipped (env_step clips)."""
    out, logstd = policy
    return torch.argmax(out + noise, dim=-1).int() if logstd is None else out + logstd.exp() * noise


def greedy(policy):
    out, logstd = policy
    return out.argmax(-1).int() if logstd is None else out


def logprob_entropy(policy, actions):
    """Each action's log-probability and the policy's entropy (a Gaussian's: summed over action dimensions)."""
    out, logstd = policy
    if logstd is None:
        logp = torch.log_softmax(out, -1)
        return logp.gather(-1, actions[..., None].long())[..., 0], -(logp.exp() * logp).sum(-1)
    normal = torch.distributions.Normal(out, logstd.exp(), validate_args=False)  # validation would sync
    return normal.log_prob(actions).sum(-1), normal.entropy().sum(-1)


def make_agent(obs_shape, num_actions, continuous: bool, args: Args, device):
    layout = "nature" if min(obs_shape[:2]) >= 36 else "minatar"  # 36: the smallest frame the Nature CNN takes
    cnn = CNNS[layout] if args.model == "cnn" else None
    agent = ActorCritic(obs_shape, MODELS[args.model], num_actions, continuous, cnn).to(device)
    # a tensor learning rate, written in place: changing it never recompiles. Compiled (scope update),
    # the multi-tensor Adam fuses into the update and keeps its step count on the device, as CUDA
    # graphs need (capturable); eager, the fused Adam of ppo_torch.py
    compiled = args.compile_mode != "none" and args.compile_scope.startswith("update")
    kind = dict(foreach=True, capturable=True) if compiled else dict(fused=True)
    optimizer = torch.optim.Adam(agent.parameters(), lr=torch.tensor(args.learning_rate, device=device),
                                 betas=args.adam_betas, eps=args.adam_eps, **kind)
    return agent, optimizer

# saving and loading: one torch.save of both state dicts, with what they fit
MODEL_FILE, SAVED_BY = "model.pt", "ppo_torch_compile_gymnasium.py"  # only this script loads what it saved


def save_model(run_dir: str, agent: ActorCritic, optimizer, norm: Normalizer | None, args: Args) -> str:
    """The actor-critic's weights, the optimizer's state and the normalization's statistics (as tensors),
    which a later run can start from (and an evaluation needs)."""
    meta = {"script": SAVED_BY, "model": args.model, "env_id": args.env_id, "normalize": norm is not None}
    saved = {"meta": meta, "agent": agent.state_dict(), "optimizer": optimizer.state_dict()}
    if norm is not None:
        saved["normalizer"] = {part: {f: torch.as_tensor(np.asarray(v)) for f, v in getattr(norm, part)._asdict().items()}
                               for part in ("obs", "reward")}
    torch.save(saved, os.path.join(run_dir, MODEL_FILE))
    return MODEL_FILE


def read_model(path: str, args: Args, normalize: bool = False) -> dict:
    """The state dicts a model was saved with (and its normalizer's statistics), or exit 2 saying why this
    run cannot start from it. normalize: whether this run normalizes."""
    return read_saved(path, lambda f: torch.load(f, map_location="cpu", weights_only=True),
                      model=args.model, env_id=args.env_id, normalize=normalize)


def restore(agent: ActorCritic, optimizer, saved: dict):
    """The saved weights and optimizer state, in place; this run's learning-rate schedule starts again."""
    agent.load_state_dict(saved["agent"])
    learning_rate = optimizer.param_groups[0]["lr"]
    optimizer.load_state_dict(saved["optimizer"])
    optimizer.param_groups[0]["lr"] = learning_rate  # the rate this run's schedule sets, not the saved one


# %% rollout
class Runner(NamedTuple):
    env_state: EnvState
    obs: torch.Tensor


class Batch(NamedTuple):
    obs: torch.Tensor
    actions: torch.Tensor
    logprobs: torch.Tensor
    values: torch.Tensor
    advantages: torch.Tensor
    returns: torch.Tensor
    valid: torch.Tensor  # 1, or 0 for a reset step (next-step autoreset)


def stack_steps(steps: list[EnvStep], device) -> EnvStep:
    """One copy per field: (num_steps, num_envs, ...), the final observations one step after another."""
    join = lambda name, x: np.concatenate(x) if name == "final_obs" else np.stack(x)
    return EnvStep(*(torch.from_numpy(join(name, x)).to(device) for name, x in zip(EnvStep._fields, zip(*steps))))


def act(agent: ActorCritic, obs, noise):
    """An action and the actor's output."""
    policy = agent.policy(obs)  # acting needs only the actor
    return sample(policy, noise), policy[0]


def outlive(outputs):
    """A rollout step's outputs as they are; under CUDA graphs, copies that outlive the next replay."""
    return outputs


@torch.no_grad()
def rollout(agent: ActorCritic, runner: Runner, envs, args: Args):
    """num_steps steps of every env, then GAE: the batch to learn from."""
    env_state, obs = runner
    shape = (args.num_steps, args.num_envs, agent.actor[-1].out_features)  # the whole rollout's noise in one op
    noises = noise(shape, agent.actor_logstd is not None, obs.device)
    observations, actions, outputs, steps = [], [], [], []
    for t in range(args.num_steps):
        torch.compiler.cudagraph_mark_step_begin()  # a new CUDA-graph step: earlier outputs may be reused
        with region("policy_step", args.profile):  # harness
            action, output = outlive(act(agent, obs, noises[t]))
        with region("env_step", args.profile):  # harness
            env_state, out = env_step(envs, env_state, action.cpu().numpy(), args.gamma)  # the env steps on the host
        observations.append(obs), actions.append(action), outputs.append(output), steps.append(out)
        obs = torch.from_numpy(out.obs).to(obs.device)
    out = stack_steps(steps, obs.device)
    obs_t, actions, outputs = torch.stack(observations), torch.stack(actions), torch.stack(outputs)
    # the parameters are fixed during the rollout: values and log-probs in one batched pass each
    logprobs = logprob_entropy(agent.head(outputs), actions)[0]
    values = agent.value(obs_t)
    last_value = agent.value(obs)
    final_values = None
    if args.bootstrap_truncation:  # the critic sees only the final observations a truncation bootstraps from
        final_values = torch.zeros_like(values)
        final_values[out.truncated & ~out.terminated] = agent.value(out.final_obs)
    torch.compiler.cudagraph_mark_step_begin()
    advantages, returns = (x.clone() for x in compute_gae(values, out.reward, out.terminated, out.truncated,
                                                          last_value, final_values, args.gamma, args.gae_lambda))
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # (num_steps, num_envs, ...) -> (batch, ...)
    batch = Batch(flat(obs_t), flat(actions), flat(logprobs), flat(values), flat(advantages), flat(returns),
                  flat(out.valid))
    stats = {
        "episodes": (out.episode_length > 0).sum().float(),  # Atari's: games
        "transitions": out.valid.sum(),  # steps but a next-step autoreset's reset steps
        "episodic_return_sum": out.episode_return.sum(),
        "episodic_length_sum": out.episode_length.sum(),
        "explained_variance": 1 - (returns - values).var(correction=0) / returns.var(correction=0),
    }
    return Runner(env_state, obs), batch, stats


def evaluate(agent: ActorCritic, norm: Normalizer | None, args: Args, num_episodes: int, seed: int) -> np.ndarray:
    """One episode on each of num_episodes fresh envs with the greedy policy (observations normalized
    by training's final statistics, frozen): their returns."""
    envs = make_env(args.env_id, num_episodes, args.vectorization, seed)
    obs, env_state = env_reset(envs, seed, norm, learn=False)
    device = next(agent.parameters()).device
    returns, done = np.zeros(num_episodes), np.zeros(num_episodes, bool)
    while not done.all():
        with torch.no_grad():
            action = greedy(agent.policy(torch.from_numpy(obs).to(device)))
        env_state, out = env_step(envs, env_state, action.cpu().numpy())
        ended = (out.episode_length > 0) & ~done  # each env's first episode (Atari's: game) only
        returns[ended] = out.episode_return[ended]
        done, obs = done | ended, out.obs
    envs.close()
    return returns


# %% GAE
def compute_gae(values, rewards, terminated, truncated, last_value, final_values, gamma, gae_lambda):
    """GAE over (num_steps, num_envs) tensors in log2(num_steps) vectorized steps.

    A trace stops at terminated or truncated. A truncated, not terminated, step
    bootstraps through the time limit: its reward gets gamma * V(final observation).
    The recurrence advantage[t] = delta[t] + decay[t] * advantage[t+1] is solved by
    doubling (a Hillis-Steele scan): after the step of span s, advantage[t] sums the
    next 2s deltas, each discounted by the decays in between. Eager torch pays per
    op: 8 steps of 4 ops for 256 steps, not a 256-step Python loop.
    """
    if final_values is not None:
        rewards = rewards + gamma * final_values * (truncated & ~terminated)
    next_values = torch.cat([values[1:], last_value[None]])
    nonterminal = 1.0 - (terminated | truncated).float()
    advantages = rewards + gamma * next_values * nonterminal - values  # the deltas
    decay = gamma * gae_lambda * nonterminal
    later = lambda x, span: torch.cat([x[span:], torch.zeros_like(x[:span])])  # x[t + span], 0 past the end
    span = 1
    while span < len(values):
        advantages = advantages + decay * later(advantages, span)
        decay = decay * later(decay, span)
        span *= 2
    return advantages, advantages + values


# %% loss and update
def ppo_loss(agent: ActorCritic, mb: Batch, args: Args):
    policy, value = agent(mb.obs)
    # every mean is over the transitions: a reset step (next-step autoreset) weighs nothing
    weight = mb.valid / mb.valid.sum().clamp(min=1)
    mean = lambda x: (x * weight).sum()
    logprob, entropy = logprob_entropy(policy, mb.actions)
    entropy = mean(entropy)
    logratio = logprob - mb.logprobs
    ratio = logratio.exp()
    # population std, as jnp.std
    centered = mb.advantages - mean(mb.advantages)
    advantages = centered / (mean(centered**2).sqrt() + 1e-8)
    pg_loss = mean(torch.max(-advantages * ratio,
                             -advantages * torch.clamp(ratio, 1 - args.clip_coef, 1 + args.clip_coef)))
    v_loss = (value - mb.returns) ** 2
    if args.clip_vloss:
        v_clipped = mb.values + torch.clamp(value - mb.values, -args.clip_coef, args.clip_coef)
        v_loss = torch.max(v_loss, (v_clipped - mb.returns) ** 2)
    v_loss = 0.5 * mean(v_loss)
    loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss
    stats = {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy,
        "approx_kl": mean((ratio - 1) - logratio),
        "clipfrac": mean(((ratio - 1).abs() > args.clip_coef).float()),
    }
    return loss, stats


def clipped_grads(agent: ActorCritic, mb: Batch, args: Args):
    """The loss's gradients, clipped to the global norm: everything of a minibatch step but Adam's."""
    loss, stats = ppo_loss(agent, mb, args)
    loss.backward()
    nn.utils.clip_grad_norm_(agent.parameters(), args.max_grad_norm)
    return torch.stack(list(stats.values())).detach()  # for logging only: no gradient flows from it


def minibatch_step(agent: ActorCritic, optimizer, mb: Batch, args: Args):
    """One optimizer step: loss, gradients, global-norm clip, Adam."""
    optimizer.zero_grad()
    stats = clipped_grads(agent, mb, args)
    optimizer.step()
    return stats


def update(agent: ActorCritic, optimizer, batch: Batch, iteration: int, args: Args):
    """update_epochs epochs of num_minibatches shuffled minibatches."""
    batch_size = args.num_envs * args.num_steps
    minibatch_size = batch_size // args.num_minibatches
    total_steps = args.num_iterations * args.update_epochs * args.num_minibatches
    step = iteration * args.update_epochs * args.num_minibatches  # known on the host: no sync for the LR
    stats = []
    for _ in range(args.update_epochs):
        perm = torch.randperm(batch_size, device=batch.obs.device)
        shuffled = Batch(*(x[perm] for x in batch))  # one gather per epoch; minibatches are views
        for start in range(0, batch_size, minibatch_size):
            mb = Batch(*(x[start:start + minibatch_size] for x in shuffled))
            optimizer.param_groups[0]["lr"].fill_(args.learning_rate * (1 - step / total_steps))  # in place
            torch.compiler.cudagraph_mark_step_begin()
            with region("minibatch_step", args.profile):  # harness
                stats.append(minibatch_step(agent, optimizer, mb, args).clone())
            step += 1
    names = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac")
    return dict(zip(names, torch.stack(stats).mean(0)))


# %% training loop with logging
def compile_hot_paths(mode: str, scope: str):
    """torch.compile GAE, the gradients or the whole minibatch step, and with +policy the policy step,
    where they are called, LeanRL style; fullgraph where torch allows it, so a graph break is an error."""
    global act, outlive, compute_gae, clipped_grads, minibatch_step
    torch._dynamo.config.trace_autograd_ops = True  # loss.backward() joins the compiled graph
    compute_gae = torch.compile(compute_gae, mode=mode, fullgraph=True)
    if scope.endswith("+policy"):
        act = torch.compile(act, mode=mode, fullgraph=True)
    if mode == "reduce-overhead":  # the policy step's action and output
        outlive = lambda outputs: tuple(x.clone() for x in outputs)
    if scope.startswith("update"):  # torch.optim's zero_grad and step break the graph on purpose (no_grad)
        minibatch_step = torch.compile(minibatch_step, mode=mode)
    else:
        clipped_grads = torch.compile(clipped_grads, mode=mode, fullgraph=True)


def torch_device() -> torch.device:
    """The GPU if there is one, as in CleanRL: the environments step on the host either way."""
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


LOSSES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance")


def train(args: Args, envs, writer, saved: dict | None = None):
    """Returns the trained agent, its optimizer and the normalization's statistics (None: not normalized).
    writer: TensorBoard's (the benchmark's run log, which also times and records the run)."""
    torch.manual_seed(args.seed)  # drives init, actions and shuffling; the same seed seeds the environments
    device = torch_device()
    args = resolved(args, device)
    obs_shape, space = observation_shape(envs), envs.single_action_space
    norm = Normalizer.start(math.prod(obs_shape), args.num_envs, saved.get("normalizer") if saved else None) if normalizes(args, envs) else None
    obs, env_state = env_reset(envs, args.seed, norm)
    num_actions = space.shape[0] if continuous(envs) else space.n  # a Gaussian's dimensions, or logits
    agent, optimizer = make_agent(obs_shape, num_actions, continuous(envs), args, device)
    if saved is not None:  # harness
        restore(agent, optimizer, saved)
    runner = Runner(env_state, torch.from_numpy(obs).to(device))
    sync = torch.cuda.synchronize if device.type == "cuda" else lambda: None
    if args.compile_mode != "none":
        compile_hot_paths(args.compile_mode, args.compile_scope)

    with Progress() as progress:
        task = progress.add_task("iteration 0" + (", compiling" if args.compile_mode != "none" else ""),
                                 total=args.num_iterations)
        for iteration in range(args.num_iterations):
            t0 = time.perf_counter()
            with region("rollout", args.profile):  # harness
                runner, batch, rollout_stats = rollout(agent, runner, envs, args)
            if args.sync_timing:  # harness
                sync()
                t1 = time.perf_counter()
            with region("update", args.profile):  # harness
                update_stats = update(agent, optimizer, batch, iteration, args)
            if args.sync_timing:  # harness
                sync()
                t2 = time.perf_counter()
            # the rate of Adam's last step: a tensor here, fetched with the rest
            stats = {**rollout_stats, **update_stats, "learning_rate": optimizer.param_groups[0]["lr"]}
            stats = dict(zip(stats, torch.stack(list(stats.values())).tolist()))  # the one host fetch
            seconds, global_step = time.perf_counter() - t0, (iteration + 1) * args.num_envs * args.num_steps
            if stats["episodes"]:
                writer.add_scalar("charts/episodic_return", stats["episodic_return_sum"] / stats["episodes"], global_step)
                writer.add_scalar("charts/episodic_length", stats["episodic_length_sum"] / stats["episodes"], global_step)
            writer.add_scalar("charts/SPS", stats["transitions"] / seconds, global_step)  # a reset step is no env step
            writer.add_scalar("charts/learning_rate", stats["learning_rate"], global_step)  # of Adam's last step
            for name in LOSSES:
                writer.add_scalar(f"losses/{name}", stats[name], global_step)
            times = {"iteration": seconds} | ({"rollout": t1 - t0, "update": t2 - t1} if args.sync_timing else {})  # harness
            writer.iteration(iteration, times, stats)  # harness: time/, memory/, the final return, --profile
            progress.update(task, advance=1, description=f"{global_step:,} steps, SPS {stats['transitions'] / seconds:,.0f}")
    return agent, optimizer, runner.env_state.norm


def traced(args: Args) -> range:  # harness
    """--profile's iterations (from 0): the first compiles, the second warms up."""
    return range(2, 4)


def invalid(args: Args) -> str | None:  # harness
    """Why these arguments cannot run, beyond each one's range (check_args asks first), or None."""
    if args.profile and args.num_iterations < traced(args).stop:
        return (f"--profile traces iterations {traced(args).start + 1} to {traced(args).stop}: "
                f"num_iterations must be at least {traced(args).stop}, got {args.num_iterations}")
    return None


# %% main
def with_defaults(args: Args, continuous_actions: bool) -> Args:
    """Each value left unset takes its action space's default (run.json records what ran)."""
    args = replace(args, **{k: v for k, v in DEFAULTS[continuous_actions].items() if getattr(args, k) is None})
    if (args.num_envs * args.num_steps) % args.num_minibatches:
        fail(f"num_minibatches={args.num_minibatches} must divide the batch "
             f"num_envs*num_steps={args.num_envs * args.num_steps}")
    return args


def main():
    args = tyro.cli(RunArgs)  # plain: args = tyro.cli(Args)
    check_args(args)  # harness: bad input exits 2 before anything is written
    envs = make_env(args.env_id, args.num_envs, args.vectorization, args.seed)
    args = with_defaults(args, continuous(envs))
    if args.model == "cnn" and len(shape := observation_shape(envs)) != 3:
        fail(f"--model cnn needs image observations (height, width, channels); {args.env_id}'s have shape {shape}")
    saved = read_model(args.load_model, args, normalizes(args, envs)) if args.load_model else None  # harness
    env = {"id": TWINS[args.env_id][0], "vectorization": args.vectorization,  # harness: run.json's env, as it reports itself
           "autoreset": envs.metadata["autoreset_mode"].value}
    writer = start_run(resolved(args, torch_device()), variant_name(args), torch_device(), env=env)  # plain: writer = Writer(f"runs/{args.env_id}__{variant_name(args)}__{args.seed}__{int(time.time())}")
    with writer:  # harness: summary.json, the saved model and the evaluation; an interrupted run keeps its logs
        agent, optimizer, norm = train(args, envs, writer, saved)  # plain: train(args, envs, writer)
        writer.finish(save=lambda run_dir: save_model(run_dir, agent, optimizer, norm, args),  # harness
                      # evaluation's fresh envs, seeded after the training envs' seeds
                      evaluate=lambda: evaluate(agent, norm, args, args.eval_episodes, args.seed + args.num_envs))
        envs.close()
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
