"""PPO with Flax Linen + optax, jax.jit, on Gymnasium environments stepped on the CPU (benchback).

ppo_linen.py with the environments of CleanRL's everyday setup: Gymnasium's
(MinAtar's for the MinAtar games), NumPy on the host, stepped by a vector env
(--vectorization: Gymnasium's Python loop over the envs, Gymnasium's NumPy-vectorized
CartPole, or EnvPool's C++ threads). The rollout can no longer be one lax.scan:
it is a Python loop of a jitted policy step and a host env step, then one jitted
call turns the trajectory into the batch (values, log-probs, GAE). The update is
ppo_linen.py's, with its means over transitions only (a reset step weighs nothing).
`diff ppo_linen.py ppo_linen_gymnasium.py` shows what a CPU environment changes.

    python ppo_linen_gymnasium.py --env-id Acrobot-v1 --model large
    python ppo_linen_gymnasium.py --vectorization envpool
    python ppo_linen_gymnasium.py --no-jit   # the same functions without jax.jit
"""

# %% imports
import time

START_TIME = time.time()  # harness: before the heavy imports, so the startup time counts them

import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Annotated, Literal, NamedTuple

import flax.linen as nn
import gymnasium as gym
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from flax import serialization
from flax.training.train_state import TrainState
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
    jit: bool = True
    """wrap the policy step, the batch and the update in jax.jit (--no-jit: benchback-rl's "none")"""


MODELS = {"small": (64, 64), "medium": (256, 256, 256), "large": (1024,) * 6, "cnn": ()}  # cnn: one-layer heads
# --model cnn's torso: (filters, kernel size, stride) per convolution, the dense layer's width and the input's
# scale; MinAtar's own network for its small grids, the Nature CNN of CleanRL's ppo_atari_envpool.py for frames
CNNS = {"minatar": dict(convs=((16, 3, 1),), dense=128, scale=1.0),
        "nature": dict(convs=((32, 8, 4), (64, 4, 2), (64, 3, 1)), dense=512, scale=1 / 255)}


def variant_name(args: Args) -> str:
    vectorization = "" if args.vectorization == "sync" else f"-{args.vectorization}"
    return f"linen_gymnasium{vectorization}" + ("" if args.jit else "-nojit")


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
class MLP(nn.Module):
    hidden: tuple[int, ...]
    out_dim: int
    out_scale: float  # orthogonal gain of the output layer

    @nn.compact
    def __call__(self, x):
        zeros = nn.initializers.zeros
        for width in self.hidden:
            x = nn.tanh(nn.Dense(width, kernel_init=nn.initializers.orthogonal(np.sqrt(2)), bias_init=zeros)(x))
        return nn.Dense(self.out_dim, kernel_init=nn.initializers.orthogonal(self.out_scale), bias_init=zeros)(x)


def conv_general_dilated(lhs, rhs, window_strides, padding, **kwargs):
    """nn.Conv's convolution (NHWC images, HWIO kernel, VALID). On a CPU, XLA runs a convolution's kernel
    gradient inside a loop (our minibatch scan) on a slow path (jax-ml/jax#12868; tests/benchmark_conv.py):
    there, the same convolution as its patches (strided slices) times the kernel, whose gradient is a
    matrix product. Elsewhere, XLA's own."""
    if jax.default_backend() != "cpu":
        return jax.lax.conv_general_dilated(lhs, rhs, window_strides, padding, **kwargs)
    if padding != "VALID" or kwargs.get("feature_group_count", 1) != 1 or any(
            d is not None and set(d) != {1} for d in (kwargs.get("lhs_dilation"), kwargs.get("rhs_dilation"))):
        raise NotImplementedError("the patches compute a VALID convolution, undilated and ungrouped, only")
    (kh, kw, _, filters), (sh, sw) = rhs.shape, window_strides
    h, w = (lhs.shape[-3] - kh) // sh + 1, (lhs.shape[-2] - kw) // sw + 1
    patches = jnp.concatenate([lhs[..., i:i + sh * (h - 1) + 1:sh, j:j + sw * (w - 1) + 1:sw, :]
                               for i in range(kh) for j in range(kw)], -1)  # (kh, kw, channel): HWIO's order
    return patches @ rhs.reshape(-1, filters)


class CNN(nn.Module):
    """--model cnn's torso: VALID convolutions, then a dense layer, ReLU each (CleanRL's Atari network)."""

    image_shape: tuple[int, int, int]  # (h, w, channels): each flat observation is one such image
    convs: tuple[tuple[int, int, int], ...]
    dense: int
    scale: float

    @nn.compact
    def __call__(self, x):
        init = dict(kernel_init=nn.initializers.orthogonal(np.sqrt(2)), bias_init=nn.initializers.zeros)
        x = x.reshape(*x.shape[:-1], *self.image_shape) * self.scale  # NHWC, the layout Flax's Conv takes
        for filters, size, stride in self.convs:
            x = nn.relu(nn.Conv(filters, (size, size), strides=stride, padding="VALID",
                                conv_general_dilated=conv_general_dilated, **init)(x))
        return nn.relu(nn.Dense(self.dense, **init)(x.reshape(*x.shape[:-3], -1)))


class ActorCritic(nn.Module):
    """Separate actor and critic MLPs with tanh, or with --model cnn one layer each on a CNN they share;
    returns (policy, value). The actor gives a categorical's logits, or a Gaussian's mean whose log-std
    is a parameter of its own (CleanRL's continuous head)."""

    hidden: tuple[int, ...]
    num_actions: int  # logits, or action dimensions
    continuous: bool = False
    cnn: CNN | None = None

    def setup(self):
        self.actor = MLP(self.hidden, self.num_actions, 0.01)
        self.critic = MLP(self.hidden, 1, 1.0)
        self.actor_logstd = (self.param("actor_logstd", nn.initializers.zeros, (self.num_actions,))
                             if self.continuous else None)  # state-independent

    def __call__(self, obs):
        features = self.features(obs)  # once for both heads
        return self.head(self.actor(features)), self.critic(features)[..., 0]

    def features(self, obs):
        return obs if self.cnn is None else self.cnn(obs)

    def head(self, out):
        """(logits, None), or (mean, log-std) broadcast to the mean's shape."""
        return out, None if self.actor_logstd is None else jnp.broadcast_to(self.actor_logstd, out.shape)

    def policy(self, obs):
        return self.head(self.actor(self.features(obs)))

    def value(self, obs):
        return self.critic(self.features(obs))[..., 0]


def sample(key, policy):
    """An action drawn from the policy; a Gaussian's is not clipped here (env_step clips what the env gets)."""
    out, logstd = policy
    if logstd is None:
        return jax.random.categorical(key, out).astype(jnp.int32)
    return out + jnp.exp(logstd) * jax.random.normal(key, out.shape)


def greedy(policy):
    out, logstd = policy
    return jnp.argmax(out, -1).astype(jnp.int32) if logstd is None else out


def logprob_entropy(policy, actions):
    """Each action's log-probability and the policy's entropy (a Gaussian's: summed over action dimensions)."""
    out, logstd = policy
    if logstd is None:
        logp = jax.nn.log_softmax(out)
        return jnp.take_along_axis(logp, actions[..., None], axis=-1)[..., 0], -(jnp.exp(logp) * logp).sum(-1)
    logprob = jax.scipy.stats.norm.logpdf(actions, out, jnp.exp(logstd)).sum(-1)
    return logprob, (0.5 + 0.5 * jnp.log(2 * jnp.pi) + logstd).sum(-1)


def make_train_state(key, obs_shape, num_actions, continuous: bool, args: Args) -> TrainState:
    cnn = CNN(obs_shape, **CNNS["nature" if min(obs_shape[:2]) >= 36 else "minatar"]) if args.model == "cnn" else None
    model = ActorCritic(MODELS[args.model], num_actions, continuous, cnn)
    params = model.init(key, jnp.zeros((1, math.prod(obs_shape)), jnp.float32))
    total_steps = args.num_iterations * args.update_epochs * args.num_minibatches
    tx = optax.chain(  # inject_hyperparams: the rate of each step is kept in the optimizer state, for logging
        optax.clip_by_global_norm(args.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(learning_rate=optax.linear_schedule(args.learning_rate, 0.0, total_steps),
                                             b1=args.adam_betas[0], b2=args.adam_betas[1], eps=args.adam_eps),
    )
    return TrainState.create(apply_fn=model.apply, params=params, tx=tx)


# saving and loading: Flax's msgpack of the train state, with what it fits
MODEL_FILE, SAVED_BY = "model.msgpack", "ppo_linen_gymnasium.py"  # only this script loads what it saved


def save_model(run_dir: str, train_state: TrainState, norm: Normalizer | None, args: Args) -> str:
    """The actor-critic's weights, the optimizer's state and the normalization's statistics, which a
    later run can start from (and an evaluation needs)."""
    meta = {"script": SAVED_BY, "model": args.model, "env_id": args.env_id, "normalize": norm is not None}
    saved = {"meta": meta, "state": serialization.to_state_dict(train_state)}
    if norm is not None:
        saved["normalizer"] = {"obs": norm.obs._asdict(), "reward": norm.reward._asdict()}
    with open(os.path.join(run_dir, MODEL_FILE), "wb") as f:
        f.write(serialization.msgpack_serialize(saved))
    return MODEL_FILE


def read_model(path: str, args: Args, normalize: bool = False) -> dict:
    """What a model was saved with (its state, and its normalizer if it has one), or exit 2 saying why
    this run cannot start from it. normalize: whether this run normalizes."""
    return read_saved(path, lambda f: serialization.msgpack_restore(f.read()),
                      model=args.model, env_id=args.env_id, normalize=normalize)


def restore(train_state: TrainState, saved: dict) -> TrainState:
    """The saved weights and Adam's state (moments, step count); the schedule is this run's, from its start."""
    loaded = serialization.from_state_dict(train_state, jax.tree.map(jnp.asarray, saved["state"]))
    clip, schedule = train_state.opt_state  # fresh: inject_hyperparams counts the schedule's steps from 0
    return loaded.replace(opt_state=(clip, schedule._replace(inner_state=loaded.opt_state[1].inner_state)))


# %% rollout
class Runner(NamedTuple):
    key: jax.Array
    env_state: EnvState
    obs: np.ndarray


class Batch(NamedTuple):
    obs: jax.Array
    actions: jax.Array
    logprobs: jax.Array
    values: jax.Array
    advantages: jax.Array
    returns: jax.Array
    valid: jax.Array  # 1, or 0 for a reset step (next-step autoreset)


def policy_step(params, obs, key, apply_fn):
    """The policy and a sampled action for every env: one jitted call per rollout step."""
    key, action_key = jax.random.split(key)
    policy = apply_fn(params, obs, method=ActorCritic.policy)  # acting needs only the actor
    return sample(action_key, policy), policy, key


def learn_batch(train_state: TrainState, obs, actions, policy, out: EnvStep, final_index, last_obs, args: Args):
    """The trajectory the host collected -> values, log-probs and GAE: the batch to learn from."""
    apply = partial(train_state.apply_fn, train_state.params)
    # the parameters are fixed during the rollout: values and log-probs in one batched pass each
    logprobs = logprob_entropy(policy, actions)[0]
    values = apply(obs, method=ActorCritic.value)
    last_value = apply(last_obs, method=ActorCritic.value)
    final_values = None
    if args.bootstrap_truncation:  # the critic sees only the final observations a truncation bootstraps from
        final_values = jnp.zeros(values.size).at[final_index].set(
            apply(out.final_obs, method=ActorCritic.value), mode="drop").reshape(values.shape)  # padding: dropped
    advantages, returns = compute_gae(values, out.reward, out.terminated, out.truncated, last_value,
                                      final_values, args.gamma, args.gae_lambda)
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # (num_steps, num_envs, ...) -> (batch, ...)
    batch = Batch(flat(obs), flat(actions), flat(logprobs), flat(values), flat(advantages), flat(returns),
                  flat(jnp.asarray(out.valid)))
    stats = {
        "episodes": (out.episode_length > 0).sum(),  # Atari's: games
        "transitions": out.valid.sum(),  # steps but a next-step autoreset's reset steps
        "episodic_return_sum": out.episode_return.sum(),
        "episodic_length_sum": out.episode_length.sum(),
        "explained_variance": 1 - jnp.var(returns - values) / jnp.var(returns),
    }
    return batch, stats


def rollout(train_state: TrainState, runner: Runner, envs, policy_fn, batch_fn, args: Args):
    """num_steps steps of every env, each a jitted policy step and an env step on the host, then GAE."""
    key, env_state, obs = runner
    observations, actions, policies, steps = [], [], [], []
    for t in range(args.num_steps):
        with region("policy_step", args.profile):  # harness
            action, policy, key = policy_fn(train_state.params, obs, key)
        with region("env_step", args.profile):  # harness
            env_state, out = env_step(envs, env_state, np.asarray(action), args.gamma)  # the env steps on the host
        observations.append(obs), actions.append(action), policies.append(policy), steps.append(out)
        obs = out.obs
    join = lambda name, x: np.concatenate(x) if name == "final_obs" else np.stack(x)
    out = EnvStep(*(join(name, x) for name, x in zip(EnvStep._fields, zip(*steps))))
    # the final observations padded to a multiple of num_envs (at most one truncation per env is
    # the usual case): few shapes, so batch_fn compiles once; the padding's index is out of range
    final_index = np.flatnonzero(out.truncated & ~out.terminated)
    size = max(1, -(-len(final_index) // args.num_envs)) * args.num_envs
    out = out._replace(final_obs=np.concatenate([out.final_obs, np.zeros((size - len(final_index), obs.shape[1]),
                                                                         np.float32)]))
    final_index = np.pad(final_index, (0, size - len(final_index)), constant_values=out.reward.size)
    obs_t = jnp.asarray(np.stack(observations))  # the trajectory to the device, in one transfer
    policy = jax.tree.map(lambda *xs: jnp.stack(xs), *policies)
    batch, stats = batch_fn(train_state, obs_t, jnp.stack(actions), policy, out, final_index, obs)
    return Runner(key, env_state, obs), batch, stats


def evaluate(train_state: TrainState, norm: Normalizer | None, args: Args, num_episodes: int, seed: int) -> np.ndarray:
    """One episode on each of num_episodes fresh envs with the greedy policy (observations normalized
    by training's final statistics, frozen): their returns."""
    envs = make_env(args.env_id, num_episodes, args.vectorization, seed)
    obs, env_state = env_reset(envs, seed, norm, learn=False)
    act = jax.jit(lambda params, obs: greedy(train_state.apply_fn(params, obs, method=ActorCritic.policy)))
    returns, done = np.zeros(num_episodes), np.zeros(num_episodes, bool)
    while not done.all():
        env_state, out = env_step(envs, env_state, np.asarray(act(train_state.params, obs)))
        ended = (out.episode_length > 0) & ~done  # each env's first episode (Atari's: game) only
        returns[ended] = out.episode_return[ended]
        done, obs = done | ended, out.obs
    envs.close()
    return returns


# %% GAE
def compute_gae(values, rewards, terminated, truncated, last_value, final_values, gamma, gae_lambda):
    """GAE as a reverse scan over (num_steps, num_envs) arrays.

    A trace stops at terminated or truncated. A truncated, not terminated, step
    bootstraps through the time limit: its reward gets gamma * V(final observation).
    """
    if final_values is not None:
        rewards = rewards + gamma * final_values * (truncated & ~terminated)
    next_values = jnp.concatenate([values[1:], last_value[None]])
    nonterminal = 1.0 - (terminated | truncated)
    deltas = rewards + gamma * next_values * nonterminal - values

    def step(advantage, x):
        delta, nonterminal = x
        advantage = delta + gamma * gae_lambda * nonterminal * advantage
        return advantage, advantage

    _, advantages = jax.lax.scan(step, jnp.zeros_like(last_value), (deltas, nonterminal), reverse=True)
    return advantages, advantages + values


# %% loss and update
def ppo_loss(params, apply_fn, mb: Batch, args: Args):
    policy, value = apply_fn(params, mb.obs)
    # every mean is over the transitions: a reset step (next-step autoreset) weighs nothing
    weight = mb.valid / jnp.maximum(mb.valid.sum(), 1)
    mean = lambda x: (x * weight).sum()
    logprob, entropy = logprob_entropy(policy, mb.actions)
    entropy = mean(entropy)
    logratio = logprob - mb.logprobs
    ratio = jnp.exp(logratio)
    centered = mb.advantages - mean(mb.advantages)
    advantages = centered / (jnp.sqrt(mean(centered**2)) + 1e-8)
    pg_loss = mean(jnp.maximum(-advantages * ratio,
                               -advantages * jnp.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)))
    v_loss = (value - mb.returns) ** 2
    if args.clip_vloss:
        v_clipped = mb.values + jnp.clip(value - mb.values, -args.clip_coef, args.clip_coef)
        v_loss = jnp.maximum(v_loss, (v_clipped - mb.returns) ** 2)
    v_loss = 0.5 * mean(v_loss)
    loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss
    stats = {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy,
        "approx_kl": mean((ratio - 1) - logratio),
        "clipfrac": mean(jnp.abs(ratio - 1) > args.clip_coef),
    }
    return loss, stats


@jax.named_scope("minibatch_step")  # a name in the compiled program (--profile)
def minibatch_step(train_state: TrainState, mb: Batch, args: Args):
    """One optimizer step: loss, gradients, global-norm clip, Adam."""
    grads, stats = jax.grad(ppo_loss, has_aux=True)(train_state.params, train_state.apply_fn, mb, args)
    return train_state.apply_gradients(grads=grads), stats


def update(train_state: TrainState, batch: Batch, shuffle_key, args: Args):
    """update_epochs epochs of num_minibatches shuffled minibatches, as nested lax.scans."""
    batch_size = args.num_envs * args.num_steps

    def epoch(train_state, key):
        perm = jax.random.permutation(key, batch_size)
        shuffled = jax.tree.map(lambda x: x[perm].reshape(args.num_minibatches, -1, *x.shape[1:]), batch)
        return jax.lax.scan(partial(minibatch_step, args=args), train_state, shuffled)

    # a fresh shuffle key per update without a host round trip: fold in this run's optimizer steps (the
    # schedule's count, which a loaded run starts again, as it starts its env stream from its seed)
    keys = jax.random.split(jax.random.fold_in(shuffle_key, train_state.opt_state[1].count), args.update_epochs)
    train_state, stats = jax.lax.scan(epoch, train_state, keys)
    learning_rate = train_state.opt_state[1].hyperparams["learning_rate"]  # what Adam used in the last step
    return train_state, {**jax.tree.map(jnp.mean, stats), "learning_rate": learning_rate}


# %% training loop with logging
LOSSES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance")


def train(args: Args, envs, writer, saved: dict | None = None):
    """Returns the trained train state and the normalization's statistics (None: not normalized).
    writer: TensorBoard's (the benchmark's RunLog, which also times and records the run)."""
    obs_shape, space = observation_shape(envs), envs.single_action_space
    norm = Normalizer.start(math.prod(obs_shape), args.num_envs, saved.get("normalizer") if saved else None) if normalizes(args, envs) else None
    obs, env_state = env_reset(envs, args.seed, norm)  # the seed seeds the environments too
    num_actions = space.shape[0] if continuous(envs) else space.n  # a Gaussian's dimensions, or logits

    def setup(seed):
        # the same keys as ppo_linen.py, so the same initial weights; its env key is unused here
        init_key, _, runner_key, shuffle_key = jax.random.split(jax.random.key(seed), 4)
        train_state = make_train_state(init_key, obs_shape, num_actions, continuous(envs), args)
        return train_state, runner_key, shuffle_key

    # the initial weights as one compiled call, not dozens of op-by-op compilations; it runs once,
    # so XLA compiles it without optimizing it, in half the time
    once = jax.jit(setup).lower(args.seed).compile({"xla_backend_optimization_level": 0})
    train_state, runner_key, shuffle_key = once(args.seed)
    if saved is not None:  # harness
        train_state = restore(train_state, saved)
    runner = Runner(runner_key, env_state, obs)
    policy_fn = partial(policy_step, apply_fn=train_state.apply_fn)
    batch_fn = partial(learn_batch, args=args)
    update_fn = partial(update, shuffle_key=shuffle_key, args=args)
    if args.jit:  # the update consumes the train state: XLA reuses its buffers
        policy_fn, batch_fn = jax.jit(policy_fn), jax.jit(batch_fn)
        update_fn = jax.jit(update_fn, donate_argnums=0)
    # the host needs each policy step's action at once: on the CPU, JAX then does better to run a
    # call in the calling thread than to hand it to a worker thread (async dispatch)
    jax.config.update("jax_cpu_enable_async_dispatch", False)

    with Progress() as progress:
        task = progress.add_task("iteration 0, compiling", total=args.num_iterations)
        for iteration in range(args.num_iterations):
            t0 = time.perf_counter()
            with region("rollout", args.profile):  # harness
                runner, batch, rollout_stats = rollout(train_state, runner, envs, policy_fn, batch_fn, args)
            if args.sync_timing:  # harness
                jax.block_until_ready(batch)
                t1 = time.perf_counter()
            with region("update", args.profile):  # harness
                train_state, update_stats = update_fn(train_state, batch)
            if args.sync_timing:  # harness
                jax.block_until_ready(train_state)
                t2 = time.perf_counter()
            stats = jax.device_get({**rollout_stats, **update_stats})  # the one host fetch
            seconds, global_step = time.perf_counter() - t0, (iteration + 1) * args.num_envs * args.num_steps
            if stats["episodes"]:
                writer.add_scalar("charts/episodic_return", stats["episodic_return_sum"] / stats["episodes"], global_step)
                writer.add_scalar("charts/episodic_length", stats["episodic_length_sum"] / stats["episodes"], global_step)
            # SPS counts transitions: a next-step autoreset's reset steps are no env steps
            writer.add_scalar("charts/SPS", stats["transitions"] / seconds, global_step)
            writer.add_scalar("charts/learning_rate", stats["learning_rate"], global_step)  # of Adam's last step
            for name in LOSSES:
                writer.add_scalar(f"losses/{name}", stats[name], global_step)
            times = {"iteration": seconds} | ({"rollout": t1 - t0, "update": t2 - t1} if args.sync_timing else {})  # harness
            writer.iteration(iteration, times, stats)  # harness: time/, memory/, the final return, --profile
            progress.update(task, advance=1, description=f"{global_step:,} steps, SPS {stats['transitions'] / seconds:,.0f}")
    return train_state, runner.env_state.norm


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
    env = {"id": TWINS[args.env_id][0], "vectorization": args.vectorization,  # harness
           "autoreset": envs.metadata["autoreset_mode"].value}  # as the env reports it
    writer = start_run(args, variant_name(args), jax.devices()[0].device_kind, env=env)  # plain: writer = Writer(f"runs/{args.env_id}__{variant_name(args)}__{args.seed}__{int(time.time())}")
    with writer:  # harness: summary.json, the saved model and the evaluation; an interrupted run keeps its logs
        train_state, norm = train(args, envs, writer, saved)  # plain: train(args, envs, writer)
        writer.finish(save=lambda run_dir: save_model(run_dir, train_state, norm, args),  # harness
                      # evaluation's fresh envs, seeded after the training envs' seeds
                      evaluate=lambda: evaluate(train_state, norm, args, args.eval_episodes, args.seed + args.num_envs))
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
