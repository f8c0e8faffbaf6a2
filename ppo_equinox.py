"""PPO with Equinox + optax, compiled with eqx.filter_jit (benchback).

One file, top to bottom, CleanRL style, in Equinox's style: the model is an
immutable pytree of arrays, so it flows through lax.scan and optax like any
other. The rollout is a lax.scan, GAE a reverse scan, the update nested scans
over epochs and minibatches; rollout (with GAE) and update are one
eqx.filter_jit call each per iteration. The Gymnax environment is JAX too, so
the whole iteration runs on the device.

    python ppo_equinox.py --env-id Acrobot-v1 --model large
    python ppo_equinox.py --no-jit        # the same functions without the top-level jit
"""

# %% imports
import time

START_TIME = time.time()  # harness: before the heavy imports, so the startup time counts them

import io
import math
from dataclasses import dataclass, replace
from functools import partial
from typing import Annotated, Literal, NamedTuple

import equinox as eqx
import gymnax
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tyro
from gymnax.environments import spaces
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
    """Gymnax environment id (discrete or continuous actions, Box observations)"""
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
    """wrap rollout and update in eqx.filter_jit (--no-jit: benchback-rl's "none", each lax.scan compiles per call)"""


MODELS = {"small": (64, 64), "medium": (256, 256, 256), "large": (1024,) * 6, "cnn": ()}  # cnn: one-layer heads
# --model cnn's torso: (filters, kernel size, stride) per convolution, the dense layer's width and the input's
# scale; MinAtar's own network for its small grids, the Nature CNN of CleanRL's ppo_atari_envpool.py for frames
CNNS = {"minatar": dict(convs=((16, 3, 1),), dense=128, scale=1.0),
        "nature": dict(convs=((32, 8, 4), (64, 4, 2), (64, 3, 1)), dense=512, scale=1 / 255)}


def variant_name(args: Args) -> str:
    return "equinox" if args.jit else "equinox-nojit"


# %% environment helpers
NEEDS_DOWNLOAD = ("MNISTBandit-bsuite",)  # fetches its data set when constructed
CRAFTAX_IDS = ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1")  # flat observations: the MLP's input
CRAFTAX_RESET_RATIO = 16  # envs per fresh Craftax world made each step (the Craftax baselines' optimistic resets)


def continuous(env, env_params) -> bool:
    return isinstance(env.action_space(env_params), spaces.Box)


def normalizes(args: Args, env, env_params) -> bool:
    return args.normalize and continuous(env, env_params)


def unsupported(env, env_params) -> str | None:
    """Why this PPO (discrete or 1-D Box actions, Box observations) cannot run the env, or None."""
    space = env.action_space(env_params)
    if not isinstance(space, spaces.Discrete) and not (continuous(env, env_params) and len(space.shape) == 1):
        return f"{type(space).__name__} actions of shape {space.shape} (this PPO takes Discrete or 1-D Box actions)"
    if not isinstance(env.observation_space(env_params), spaces.Box):
        return f"{type(env.observation_space(env_params)).__name__} observations (this PPO needs Box observations)"
    return None


def supported_env_ids() -> list[str]:
    ids = [e for e in gymnax.registered_envs if e not in NEEDS_DOWNLOAD]
    return [e for e in ids if not unsupported(*gymnax.make(e))] + list(CRAFTAX_IDS)


def make_env(env_id: str):
    """The Gymnax (or Craftax) env and its params, or exit 2 if this benchmark cannot run it."""
    if env_id in CRAFTAX_IDS:
        from craftax.craftax_env import make_craftax_env_from_name  # imported only for Craftax

        env = make_craftax_env_from_name(env_id, auto_reset=False)  # resets are env_step's (optimistic)
        return env, env.default_params
    if env_id.startswith("Craftax"):
        fail(f"env_id {env_id!r} is not run here; the Craftax envs: {', '.join(CRAFTAX_IDS)} "
             "(symbolic: flat observations; the pixel variants would need a CNN)")
    if env_id not in gymnax.registered_envs or env_id in NEEDS_DOWNLOAD:
        why = "needs a network download" if env_id in NEEDS_DOWNLOAD else (
            "is not a Gymnax or Craftax env id (for a Gymnasium env such as MuJoCo's, the *_gymnasium.py scripts)")
        fail(f"env_id {env_id!r} {why}; supported: {', '.join(supported_env_ids())}")
    env, env_params = gymnax.make(env_id)
    if why := unsupported(env, env_params):
        fail(f"env_id {env_id!r} has {why}; supported: {', '.join(supported_env_ids())}")
    return env, env_params


class Running(NamedTuple):
    """A running mean and variance (Gymnasium's RunningMeanStd), merged batch by batch; the batch's
    population variance (correction=0)."""
    mean: jax.Array
    var: jax.Array
    count: jax.Array

    def update(self, x):
        delta, n = x.mean(0) - self.mean, x.shape[0]
        total = self.count + n
        var = (self.var * self.count + x.var(0, correction=0) * n + delta**2 * self.count * n / total) / total
        return Running(self.mean + delta * n / total, var, total)


class Normalizer(NamedTuple):
    """CleanRL's NormalizeObservation and NormalizeReward (each clipped to +-10), over every env at once."""
    obs: Running
    reward: Running  # of the discounted returns, whose standard deviation scales the reward
    discounted: jax.Array  # each env's discounted return so far

    @classmethod
    def start(cls, obs_dim, num_envs, saved: dict | None = None):
        """Fresh statistics (mean 0, variance 1, count 1e-4, as Gymnasium's), or those a model was saved with."""
        fresh = {"obs": Running(jnp.zeros(obs_dim), jnp.ones(obs_dim), jnp.float32(1e-4)),
                 "reward": Running(jnp.zeros(()), jnp.ones(()), jnp.float32(1e-4))}
        stats = {k: Running(**jax.tree.map(jnp.asarray, saved[k])) for k in fresh} if saved else fresh
        return cls(stats["obs"], stats["reward"], jnp.zeros(num_envs))

    def observe(self, obs, learn=True):
        """The statistics take the observations in first, then scale them; learn=False: frozen."""
        stats = self.obs.update(obs) if learn else self.obs
        return self._replace(obs=stats), jnp.clip((obs - stats.mean) / jnp.sqrt(stats.var + 1e-8), -10, 10)

    def scale(self, reward, terminated, gamma):
        discounted = jnp.where(terminated, 0.0, self.discounted * gamma) + reward  # cut by a termination only, as Gymnasium's
        stats = self.reward.update(discounted)
        return self._replace(reward=stats, discounted=discounted), jnp.clip(reward / jnp.sqrt(stats.var + 1e-8), -10, 10)


class EnvState(NamedTuple):
    key: jax.Array  # the environments' own random stream
    env: object  # the Gymnax state of every env
    episode_return: jax.Array
    episode_length: jax.Array
    norm: Normalizer | None  # None: raw observations and rewards


class EnvStep(NamedTuple):
    obs: jax.Array  # after auto-reset
    reward: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    final_obs: jax.Array  # before auto-reset: what a truncated step bootstraps from
    episode_return: jax.Array  # return of the episode that ended here, else 0
    episode_length: jax.Array


def flatten_obs(obs, num_envs):
    return obs.reshape(num_envs, -1).astype(jnp.float32)  # MinAtar grids -> vectors


def env_reset(key, env, env_params, num_envs, norm: Normalizer | None = None, learn=True):
    key, reset_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), env_params)
    # Gymnax builds some state fields from Python numbers (weakly typed) and a step returns them
    # strongly typed: without this, jit would compile the rollout again on its second call.
    state = jax.tree.map(lambda x: x.astype(x.dtype), state)
    obs = flatten_obs(obs, num_envs)
    if norm is not None:
        norm, obs = norm.observe(obs, learn)
    return obs, EnvState(key, state, jnp.zeros(num_envs), jnp.zeros(num_envs), norm)


def craftax_step(key, env_state, action, env, env_params, num_envs):
    """Craftax makes a new world on every step of every env and keeps it if the env finished. Instead
    (as the Craftax baselines do): step without auto-reset, make one world per CRAFTAX_RESET_RATIO envs,
    and give the k-th env that finished (by index) world k mod the number made. So envs finishing in
    the same step start distinct worlds, unless more finish than worlds were made: then some share."""
    step_key, reset_key = jax.random.split(key)
    final_obs, stepped, reward, done, _ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        jax.random.split(step_key, num_envs), env_state, action, env_params)
    num_worlds = -(-num_envs // CRAFTAX_RESET_RATIO)
    new_obs, new_state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_worlds), env_params)
    world = (jnp.cumsum(done) - 1) % num_worlds

    def reset_done(new, old):
        return jnp.where(done.reshape(-1, *[1] * (old.ndim - 1)), new[world], old)

    # Craftax's done includes its time limit: that is a truncation, the rest (death, lava, the boss) is not
    terminated = jax.vmap(env.is_terminal, in_axes=(0, None))(
        stepped, env_params.replace(max_timesteps=jnp.iinfo(jnp.int32).max))
    return (reset_done(new_obs, final_obs), jax.tree.map(reset_done, new_state, stepped), reward,
            terminated, done & ~terminated, final_obs)


def gymnax_step(key, env_state, action, env, env_params, num_envs):
    """Every env steps and auto-resets on its own; the observation before the reset is in info."""
    obs, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        jax.random.split(key, num_envs), env_state, action, env_params)
    return obs, env_state, reward, terminated, truncated, info["final_observation"]


def env_step(state: EnvState, action, env, env_params, num_envs, gamma=None):
    """Steps every env (auto-reset) and keeps the episode statistics (of the raw rewards) on device.
    gamma: the discount of the returns that scale the rewards; None: the statistics stay frozen."""
    key, step_key = jax.random.split(state.key)
    if continuous(env, env_params):  # the env gets the sampled action clipped to its bounds
        action = jnp.clip(action, env.action_space(env_params).low, env.action_space(env_params).high)
    vector_step = craftax_step if env.name.startswith("Craftax") else gymnax_step
    obs, env_state, reward, terminated, truncated, final_obs = vector_step(
        step_key, state.env, action, env, env_params, num_envs)
    reward = reward.astype(jnp.float32)
    done = terminated | truncated
    episode_return = state.episode_return + reward
    episode_length = state.episode_length + 1
    obs, final_obs, norm = flatten_obs(obs, num_envs), flatten_obs(final_obs, num_envs), state.norm
    if norm is not None:
        norm, obs = norm.observe(obs, learn=gamma is not None)
        final_obs = norm.observe(final_obs, learn=False)[1]  # scaled as this step's observations, not learned from
        if gamma is not None:
            norm, reward = norm.scale(reward, terminated, gamma)
    step = EnvStep(obs, reward, terminated, truncated, final_obs,
                   jnp.where(done, episode_return, 0.0), jnp.where(done, episode_length, 0.0))
    state = EnvState(key, env_state, jnp.where(done, 0.0, episode_return), jnp.where(done, 0.0, episode_length), norm)
    return state, step


# %% model
def linear(in_dim: int, out_dim: int, scale: float, key) -> eqx.nn.Linear:
    """eqx.nn.Linear with orthogonal weights of gain `scale` and zero bias."""
    weight = jax.nn.initializers.orthogonal(scale)(key, (out_dim, in_dim))
    layer = eqx.nn.Linear(in_dim, out_dim, key=key)
    return eqx.tree_at(lambda l: (l.weight, l.bias), layer, (weight, jnp.zeros(out_dim)))


class MLP(eqx.Module):
    layers: list[eqx.nn.Linear]

    def __init__(self, in_dim: int, hidden: tuple[int, ...], out_dim: int, out_scale: float, key):
        sizes, keys = (in_dim, *hidden, out_dim), jax.random.split(key, len(hidden) + 1)
        scales = [np.sqrt(2)] * len(hidden) + [out_scale]  # orthogonal gains; the output layer's is out_scale
        self.layers = [linear(i, o, g, k) for i, o, g, k in zip(sizes, sizes[1:], scales, keys)]

    def __call__(self, x):  # one observation: Equinox layers are written for single examples
        for layer in self.layers[:-1]:
            x = jnp.tanh(layer(x))
        return self.layers[-1](x)


def conv(in_channels: int, filters: int, size: int, stride: int, key) -> eqx.nn.Conv2d:
    """eqx.nn.Conv2d (no padding: VALID) with orthogonal weights of gain sqrt(2) and zero bias."""
    weight = jax.nn.initializers.orthogonal(np.sqrt(2), column_axis=0)(key, (filters, in_channels, size, size))
    layer = eqx.nn.Conv2d(in_channels, filters, size, stride, key=key)
    return eqx.tree_at(lambda l: (l.weight, l.bias), layer, (weight, jnp.zeros((filters, 1, 1))))


def convolve(layer: eqx.nn.Conv2d, x):
    """layer(x) for one image (channel, h, w), VALID. On a CPU, XLA runs a convolution's kernel gradient
    inside a loop (our minibatch scan) on a slow path (jax-ml/jax#12868; tests/benchmark_conv.py): there, the
    same convolution as its patches (strided slices) times the kernel, whose gradient is a matrix
    product. Elsewhere, Equinox's own."""
    if jax.default_backend() != "cpu":
        return layer(x)
    if set(layer.padding) != {(0, 0)} or set(layer.dilation) != {1} or layer.groups != 1:
        raise NotImplementedError("the patches compute a VALID convolution, undilated and ungrouped, only")
    (filters, _, kh, kw), (sh, sw) = layer.weight.shape, layer.stride
    h, w = (x.shape[1] - kh) // sh + 1, (x.shape[2] - kw) // sw + 1
    patches = jnp.stack([x[:, i:i + sh * (h - 1) + 1:sh, j:j + sw * (w - 1) + 1:sw]
                         for i in range(kh) for j in range(kw)], 1)  # (channel, kh * kw, h, w): OIHW's order
    return jnp.tensordot(layer.weight.reshape(filters, -1), patches.reshape(-1, h, w), 1) + layer.bias


class CNN(eqx.Module):
    """--model cnn's torso: VALID convolutions, then a dense layer, ReLU each (CleanRL's Atari network)."""

    convs: list[eqx.nn.Conv2d]
    dense: eqx.nn.Linear
    image_shape: tuple[int, int, int] = eqx.field(static=True)  # (h, w, channels): each flat observation's image
    scale: float = eqx.field(static=True)

    def __init__(self, image_shape: tuple[int, int, int], convs, dense: int, scale: float, key):
        (h, w, channels), keys, self.convs = image_shape, jax.random.split(key, len(convs) + 1), []
        for (filters, size, stride), k in zip(convs, keys):
            self.convs.append(conv(channels, filters, size, stride, k))
            h, w, channels = (h - size) // stride + 1, (w - size) // stride + 1, filters
        self.dense = linear(h * w * channels, dense, np.sqrt(2), keys[-1])
        self.image_shape, self.scale = image_shape, scale

    def __call__(self, x):  # one observation; Equinox's convolutions take (channels, h, w)
        x = jnp.moveaxis(x.reshape(self.image_shape), -1, 0) * self.scale
        for layer in self.convs:
            x = jax.nn.relu(convolve(layer, x))
        return jax.nn.relu(self.dense(x.ravel()))


class ActorCritic(eqx.Module):
    """Separate actor and critic MLPs with tanh, or with --model cnn one layer each on a CNN they share;
    returns (policy, value). The actor gives a categorical's logits, or a Gaussian's mean whose log-std
    is a parameter of its own (CleanRL's continuous head)."""

    actor: MLP
    critic: MLP
    actor_logstd: jax.Array | None  # state-independent
    cnn: CNN | None

    def __init__(self, obs_shape: tuple[int, ...], hidden: tuple[int, ...], num_actions: int, continuous: bool, key,
                 cnn: dict | None = None):
        actor_key, critic_key = jax.random.split(key)
        self.cnn = CNN(obs_shape, **cnn, key=jax.random.fold_in(key, 2)) if cnn else None
        in_dim = cnn["dense"] if cnn else math.prod(obs_shape)
        self.actor = MLP(in_dim, hidden, num_actions, 0.01, actor_key)
        self.critic = MLP(in_dim, hidden, 1, 1.0, critic_key)
        self.actor_logstd = jnp.zeros(num_actions) if continuous else None

    def __call__(self, obs):
        features = self.features(obs)  # once for both heads
        return self.head(features), self.value_head(features)

    def features(self, obs):  # vectorize over every leading (batch) axis
        return obs if self.cnn is None else jnp.vectorize(self.cnn, signature="(d)->(f)")(obs)

    def head(self, features):
        """(logits, None), or (mean, log-std) broadcast to the mean's shape."""
        out = jnp.vectorize(self.actor, signature="(f)->(a)")(features)
        return out, None if self.actor_logstd is None else jnp.broadcast_to(self.actor_logstd, out.shape)

    def value_head(self, features):
        return jnp.vectorize(self.critic, signature="(f)->(v)")(features)[..., 0]

    def policy(self, obs):
        return self.head(self.features(obs))

    def value(self, obs):
        return self.value_head(self.features(obs))


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


def make_model(key, obs_shape, num_actions, continuous: bool, args: Args):
    layout = "nature" if min(obs_shape[:2]) >= 36 else "minatar"  # 36: the smallest frame the Nature CNN takes
    cnn = CNNS[layout] if args.model == "cnn" else None
    model = ActorCritic(obs_shape, MODELS[args.model], num_actions, continuous, key, cnn)
    total_steps = args.num_iterations * args.update_epochs * args.num_minibatches
    tx = optax.chain(  # inject_hyperparams: the rate of each step is kept in the optimizer state, for logging
        optax.clip_by_global_norm(args.max_grad_norm),
        optax.inject_hyperparams(optax.adam)(learning_rate=optax.linear_schedule(args.learning_rate, 0.0, total_steps),
                                             b1=args.adam_betas[0], b2=args.adam_betas[1], eps=args.adam_eps),
    )
    return model, tx, tx.init(eqx.filter(model, eqx.is_array))


# saving and loading: a JSON header line, then the leaves of (model, optimizer state, normalization statistics)
# in Equinox's format
MODEL_FILE, SAVED_BY = "model.eqx", "ppo_equinox.py"  # only this script loads what it saved


def statistics(norm: Normalizer | None) -> dict | None:
    return None if norm is None else {"obs": norm.obs._asdict(), "reward": norm.reward._asdict()}


def save_model(run_dir: str, model: ActorCritic, opt_state, norm: Normalizer | None, args: Args) -> str:
    """The actor-critic's weights, the optimizer's state and the normalization's statistics, which a
    later run can start from (and an evaluation needs)."""
    meta = {"script": SAVED_BY, "model": args.model, "env_id": args.env_id, "normalize": norm is not None}
    with open(os.path.join(run_dir, MODEL_FILE), "wb") as f:
        f.write((json.dumps(meta) + "\n").encode())
        eqx.tree_serialise_leaves(f, (model, opt_state, statistics(norm)))
    return MODEL_FILE


def read_model(path: str, args: Args, env, env_params):
    """What a model was saved with ((model, optimizer state), and its normalizer's statistics or None), or
    exit 2 saying why this run cannot start from it."""
    saved = read_saved(path, lambda f: {"meta": json.loads(f.readline()), "leaves": f.read()},
                       model=args.model, env_id=args.env_id, normalize=normalizes(args, env, env_params))
    # Equinox reads leaves into a tree of the same structure: this run's, as shapes only
    obs_shape, space = env.observation_space(env_params).shape, env.action_space(env_params)
    num_actions = space.shape[0] if continuous(env, env_params) else space.n
    model, _, opt_state = eqx.filter_eval_shape(make_model, jax.random.key(0), obs_shape, num_actions,
                                                continuous(env, env_params), args)
    norm = Normalizer.start(math.prod(obs_shape), 1) if normalizes(args, env, env_params) else None
    try:
        model, opt_state, stats = eqx.tree_deserialise_leaves(io.BytesIO(saved["leaves"]), (model, opt_state, statistics(norm)))
    except Exception:  # truncated: the reader raises many kinds
        fail(f"--load-model {path} is not a whole model saved by {SAVED_BY}")
    return {"state": (model, opt_state), "normalizer": stats}


def restore(saved, opt_state):
    """The saved weights and Adam's state (moments, step count); the schedule is this run's, from its start."""
    model, (_, loaded) = saved["state"]
    clip, schedule = opt_state  # fresh: inject_hyperparams counts the schedule's steps from 0
    return model, (clip, schedule._replace(inner_state=loaded.inner_state))


# %% rollout
class Runner(NamedTuple):
    key: jax.Array
    env_state: EnvState
    obs: jax.Array


class Batch(NamedTuple):
    obs: jax.Array
    actions: jax.Array
    logprobs: jax.Array
    values: jax.Array
    advantages: jax.Array
    returns: jax.Array


def rollout(model: ActorCritic, runner: Runner, env, env_params, args: Args):
    """num_steps steps of every env as one lax.scan, then GAE: the batch to learn from."""

    def step(runner: Runner, _):
        key, action_key = jax.random.split(runner.key)
        with jax.named_scope("policy_step"):  # names in the compiled program (--profile)
            policy = model.policy(runner.obs)  # acting needs only the actor
            action = sample(action_key, policy)
        with jax.named_scope("env_step"):
            env_state, out = env_step(runner.env_state, action, env, env_params, args.num_envs, args.gamma)
        return Runner(key, env_state, out.obs), (runner.obs, action, policy, out)

    runner, (obs, actions, policy, out) = jax.lax.scan(step, runner, length=args.num_steps)
    # the parameters are fixed during the rollout: values and log-probs in one batched pass each
    logprobs = logprob_entropy(policy, actions)[0]
    values = model.value(obs)
    last_value = model.value(runner.obs)
    final_values = model.value(out.final_obs) if args.bootstrap_truncation else None
    advantages, returns = compute_gae(values, out.reward, out.terminated, out.truncated, last_value,
                                      final_values, args.gamma, args.gae_lambda)
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # (num_steps, num_envs, ...) -> (batch, ...)
    batch = Batch(flat(obs), flat(actions), flat(logprobs), flat(values), flat(advantages), flat(returns))
    stats = {
        "episodes": (out.terminated | out.truncated).sum(),
        "episodic_return_sum": out.episode_return.sum(),
        "episodic_length_sum": out.episode_length.sum(),
        "explained_variance": 1 - jnp.var(returns - values) / jnp.var(returns),
    }
    return runner, batch, stats


def evaluate(model: ActorCritic, norm: Normalizer | None, key, env, env_params, num_episodes: int):
    """One episode on each of num_episodes fresh envs with the greedy policy (observations normalized
    by training's final statistics, frozen): their returns."""
    obs, env_state = env_reset(key, env, env_params, num_episodes, norm, learn=False)

    def step(carry):
        env_state, obs, returns, done = carry
        policy = model.policy(obs)
        env_state, out = env_step(env_state, greedy(policy), env, env_params, num_episodes)
        ended = (out.terminated | out.truncated) & ~done  # each env's first episode only
        return env_state, out.obs, jnp.where(ended, out.episode_return, returns), done | ended

    carry = (env_state, obs, jnp.zeros(num_episodes), jnp.zeros(num_episodes, bool))
    return jax.lax.while_loop(lambda carry: ~carry[3].all(), step, carry)[2]


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
def ppo_loss(model: ActorCritic, mb: Batch, args: Args):
    policy, value = model(mb.obs)
    logprob, entropy = logprob_entropy(policy, mb.actions)
    entropy = entropy.mean()
    logratio = logprob - mb.logprobs
    ratio = jnp.exp(logratio)
    advantages = (mb.advantages - mb.advantages.mean()) / (mb.advantages.std() + 1e-8)
    pg_loss = jnp.maximum(-advantages * ratio,
                          -advantages * jnp.clip(ratio, 1 - args.clip_coef, 1 + args.clip_coef)).mean()
    v_loss = (value - mb.returns) ** 2
    if args.clip_vloss:
        v_clipped = mb.values + jnp.clip(value - mb.values, -args.clip_coef, args.clip_coef)
        v_loss = jnp.maximum(v_loss, (v_clipped - mb.returns) ** 2)
    v_loss = 0.5 * v_loss.mean()
    loss = pg_loss - args.ent_coef * entropy + args.vf_coef * v_loss
    stats = {
        "policy_loss": pg_loss,
        "value_loss": v_loss,
        "entropy": entropy,
        "approx_kl": ((ratio - 1) - logratio).mean(),
        "clipfrac": (jnp.abs(ratio - 1) > args.clip_coef).mean(),
    }
    return loss, stats


@jax.named_scope("minibatch_step")
def minibatch_step(carry, mb: Batch, tx, args: Args):
    """One optimizer step: loss, gradients, global-norm clip, Adam."""
    model, opt_state = carry
    grads, stats = eqx.filter_grad(ppo_loss, has_aux=True)(model, mb, args)
    updates, opt_state = tx.update(grads, opt_state, eqx.filter(model, eqx.is_array))
    return (eqx.apply_updates(model, updates), opt_state), stats


def update(batch: Batch, model: ActorCritic, opt_state, shuffle_key, tx, args: Args):
    """update_epochs epochs of num_minibatches shuffled minibatches, as nested lax.scans.

    The batch comes first: filter_jit donates every argument but the first.
    """
    batch_size = args.num_envs * args.num_steps

    def epoch(carry, key):
        perm = jax.random.permutation(key, batch_size)
        shuffled = jax.tree.map(lambda x: x[perm].reshape(args.num_minibatches, -1, *x.shape[1:]), batch)
        return jax.lax.scan(partial(minibatch_step, tx=tx, args=args), carry, shuffled)

    # a fresh shuffle key per update without a host round trip: fold in this run's optimizer steps (the
    # schedule's count, which a loaded run starts again, as it starts its env stream from its seed)
    keys = jax.random.split(jax.random.fold_in(shuffle_key, opt_state[1].count), args.update_epochs)
    (model, opt_state), stats = jax.lax.scan(epoch, (model, opt_state), keys)  # a model is a pytree
    learning_rate = opt_state[1].hyperparams["learning_rate"]  # what Adam used in the last step
    return model, opt_state, {**jax.tree.map(jnp.mean, stats), "learning_rate": learning_rate}


# %% training loop with logging
LOSSES = ("policy_loss", "value_loss", "entropy", "approx_kl", "clipfrac", "explained_variance")


def train(args: Args, env, env_params, writer, saved: dict | None = None):
    """Returns the trained model, the optimizer's state and the normalization's statistics (None: not normalized).
    writer: TensorBoard's (the benchmark's RunLog, which also times and records the run)."""
    def setup(seed, saved_norm):
        init_key, env_key, runner_key, shuffle_key = jax.random.split(jax.random.key(seed), 4)
        obs_shape = env.observation_space(env_params).shape
        norm = Normalizer.start(math.prod(obs_shape), args.num_envs, saved_norm) if normalizes(args, env, env_params) else None
        obs, env_state = env_reset(env_key, env, env_params, args.num_envs, norm)
        space = env.action_space(env_params)
        num_actions = space.shape[0] if continuous(env, env_params) else space.n  # a Gaussian's dimensions, or logits
        model, tx, opt_state = make_model(init_key, obs_shape, num_actions, continuous(env, env_params), args)
        return model, tx, opt_state, Runner(runner_key, env_state, obs), shuffle_key

    # the reset and the initial weights as one compiled call, not dozens of op-by-op compilations;
    # it runs once, so XLA compiles it without optimizing it, in half the time
    saved_norm = saved["normalizer"] if saved else None
    once = eqx.filter_jit(setup).lower(args.seed, saved_norm).compile({"xla_backend_optimization_level": 0})
    model, tx, opt_state, runner, shuffle_key = once(args.seed, saved_norm)
    if saved is not None:  # harness
        model, opt_state = restore(saved, opt_state)
    rollout_fn = partial(rollout, env=env, env_params=env_params, args=args)
    update_fn = partial(update, shuffle_key=shuffle_key, tx=tx, args=args)
    if args.jit:  # each call consumes what it changes: XLA reuses the runner's, model's and optimizer's buffers
        rollout_fn = eqx.filter_jit(rollout_fn, donate="all-except-first")
        update_fn = eqx.filter_jit(update_fn, donate="all-except-first")

    with Progress() as progress:
        task = progress.add_task("iteration 0, compiling", total=args.num_iterations)
        for iteration in range(args.num_iterations):
            t0 = time.perf_counter()
            with region("rollout", args.profile):  # harness
                runner, batch, rollout_stats = rollout_fn(model, runner)
            if args.sync_timing:  # harness
                jax.block_until_ready(batch)
                t1 = time.perf_counter()
            with region("update", args.profile):  # harness
                model, opt_state, update_stats = update_fn(batch, model, opt_state)
            if args.sync_timing:  # harness
                jax.block_until_ready(model)
                t2 = time.perf_counter()
            stats = jax.device_get({**rollout_stats, **update_stats})  # the one host fetch
            seconds, global_step = time.perf_counter() - t0, (iteration + 1) * args.num_envs * args.num_steps
            if stats["episodes"]:
                writer.add_scalar("charts/episodic_return", stats["episodic_return_sum"] / stats["episodes"], global_step)
                writer.add_scalar("charts/episodic_length", stats["episodic_length_sum"] / stats["episodes"], global_step)
            writer.add_scalar("charts/SPS", args.num_envs * args.num_steps / seconds, global_step)
            writer.add_scalar("charts/learning_rate", stats["learning_rate"], global_step)  # of Adam's last step
            for name in LOSSES:
                writer.add_scalar(f"losses/{name}", stats[name], global_step)
            times = {"iteration": seconds} | ({"rollout": t1 - t0, "update": t2 - t1} if args.sync_timing else {})  # harness
            writer.iteration(iteration, times, stats)  # harness: time/, memory/, the final return, --profile
            progress.update(task, advance=1, description=f"{global_step:,} steps, SPS {args.num_envs * args.num_steps / seconds:,.0f}")
    return model, opt_state, runner.env_state.norm


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
    env, env_params = make_env(args.env_id)
    args = with_defaults(args, continuous(env, env_params))
    if args.model == "cnn" and len(shape := env.observation_space(env_params).shape) != 3:
        fail(f"--model cnn needs image observations (height, width, channels); {args.env_id}'s have shape {shape}")
    saved = read_model(args.load_model, args, env, env_params) if args.load_model else None  # harness
    writer = start_run(args, variant_name(args), jax.devices()[0].device_kind)  # plain: writer = Writer(f"runs/{args.env_id}__{variant_name(args)}__{args.seed}__{int(time.time())}")
    with writer:  # harness: summary.json, the saved model and the evaluation; an interrupted run keeps its logs
        model, opt_state, norm = train(args, env, env_params, writer, saved)  # plain: train(args, env, env_params, writer)
        evaluate_fn = partial(evaluate, env=env, env_params=env_params, num_episodes=args.eval_episodes)  # harness
        writer.finish(save=lambda run_dir: save_model(run_dir, model, opt_state, norm, args),  # harness
                      # evaluation's fresh envs: the seed key's fifth split (training takes four)
                      evaluate=lambda: eqx.filter_jit(evaluate_fn)(model, norm, jax.random.fold_in(jax.random.key(args.seed), 4)))
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
