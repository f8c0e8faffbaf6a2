"""TD3 with Equinox + optax, compiled with eqx.filter_jit (benchback).

One file, top to bottom, CleanRL's td3_continuous_action.py in JAX, in Equinox's style: the actor, the twin
critics and their targets are immutable pytrees of arrays, so they flow through lax.scan, lax.cond and optax
like any other. The same arguments and defaults, target policy smoothing and a delayed actor, the replay buffer as arrays in the jitted state, and
each iteration (--log-frequency env steps) one lax.scan over the env steps, each acting (uniformly before
--learning-starts, then the actor plus Gaussian noise), stepping the Gymnax env, writing the buffer, then
updating the critics under lax.cond past --learning-starts and the actor and the targets under another every
--policy-frequency steps: no host round trip inside an iteration (docs/offpolicy.md).

    python td3_equinox.py --env-id Pendulum-v1 --total-timesteps 50000 --learning-starts 5000
"""

# %% imports
import time

START_TIME = time.time()  # harness: before the heavy imports, so the startup time counts them

import io
import json
from dataclasses import dataclass
from functools import partial
from typing import Literal, NamedTuple

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
@dataclass
class Args:
    env_id: str = "Pendulum-v1"
    """Gymnax environment id (continuous actions, Box observations)"""
    model: Literal["small"] = "small"
    """the actor and critics: small=CleanRL's (256, 256) MLPs"""
    total_timesteps: int = 1_000_000
    """env steps of the whole run, over all envs"""
    learning_rate: float = 3e-4
    """Adam learning rate of the actor and the critics"""
    num_envs: int = 1
    """parallel environments"""
    buffer_size: int = 1_000_000
    """transitions the replay buffer holds"""
    gamma: float = 0.99
    """discount factor"""
    tau: float = 0.005
    """target networks' Polyak rate: target = tau * online + (1 - tau) * target"""
    batch_size: int = 256
    """transitions sampled from the buffer per update"""
    policy_noise: float = 0.2
    """target policy smoothing: the noise's standard deviation, in action scales"""
    exploration_noise: float = 0.1
    """the acting noise's standard deviation, in action scales"""
    learning_starts: int = 25_000
    """env steps of uniform random actions before the first update"""
    policy_frequency: int = 2
    """env steps between actor (and target) updates: the delay"""
    noise_clip: float = 0.5
    """target policy smoothing: the noise is clipped to this, in action scales"""
    log_frequency: int = 1_000
    """env steps per iteration: what a run logs, times and shows at once"""
    seed: int = 1
    """one seed drives init, environments, exploration and sampling"""


MODELS = {"small": (256, 256)}  # hidden widths of the actor and of each critic


def variant_name(args: Args) -> str:
    return "td3_equinox"


# %% environment helpers
def unsupported(env, env_params) -> str | None:
    """Why this TD3 (continuous actions, vector observations) cannot run the env, or None."""
    if not isinstance(space := env.action_space(env_params), spaces.Box):
        return f"{type(space).__name__} actions (TD3 takes Box actions)"
    if not isinstance(space := env.observation_space(env_params), spaces.Box) or len(space.shape) != 1:
        return "observations that are not vectors (this TD3 needs Box observations of one axis)"
    return None


def supported_env_ids() -> list[str]:
    return [e for e in gymnax.registered_envs if e != "MNISTBandit-bsuite" and not unsupported(*gymnax.make(e))]


def make_env(env_id: str):
    """The Gymnax env and its params, or exit 2 if TD3 cannot run it (it needs continuous actions)."""
    if env_id not in gymnax.registered_envs or env_id == "MNISTBandit-bsuite":
        fail(f"env_id {env_id!r} is not a Gymnax env id this TD3 runs; supported: {', '.join(supported_env_ids())}")
    env, env_params = gymnax.make(env_id)
    if why := unsupported(env, env_params):
        fail(f"env_id {env_id!r} has {why}; supported: {', '.join(supported_env_ids())}")
    return env, env_params


def action_bounds(env, env_params) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """The action space's low and high, one entry per action dimension (plain floats: constants of the program)."""
    space = env.action_space(env_params)
    return tuple(np.broadcast_to(space.low, space.shape).tolist()), tuple(np.broadcast_to(space.high, space.shape).tolist())


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


def env_reset(key, env, env_params, num_envs):
    key, reset_key = jax.random.split(key)
    obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(reset_key, num_envs), env_params)
    state = jax.tree.map(lambda x: x.astype(x.dtype), state)  # weak types made strong: one compilation
    return obs.astype(jnp.float32), EnvState(key, state, jnp.zeros(num_envs), jnp.zeros(num_envs))


@jax.named_scope("env_step")  # a name in the compiled programs (--profile)
def env_step(state: EnvState, action, env, env_params, num_envs):
    """Steps every env (auto-reset) and keeps the episode statistics on device."""
    key, step_key = jax.random.split(state.key)
    obs, env_state, reward, terminated, truncated, info = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
        jax.random.split(step_key, num_envs), state.env, action, env_params)
    reward, done = reward.astype(jnp.float32), terminated | truncated
    episode_return, episode_length = state.episode_return + reward, state.episode_length + 1
    step = EnvStep(obs.astype(jnp.float32), reward, terminated, truncated, info["final_observation"].astype(jnp.float32),
                   jnp.where(done, episode_return, 0.0), jnp.where(done, episode_length, 0.0))
    return EnvState(key, env_state, jnp.where(done, 0.0, episode_return), jnp.where(done, 0.0, episode_length)), step


# %% model
def linear(in_dim: int, out_dim: int, scale: float, key) -> eqx.nn.Linear:
    """eqx.nn.Linear with orthogonal weights of gain `scale` and zero bias."""
    weight = jax.nn.initializers.orthogonal(scale)(key, (out_dim, in_dim))
    layer = eqx.nn.Linear(in_dim, out_dim, key=key)
    return eqx.tree_at(lambda l: (l.weight, l.bias), layer, (weight, jnp.zeros(out_dim)))


def relu_mlp(layers: list[eqx.nn.Linear], x):
    for layer in layers[:-1]:
        x = jax.nn.relu(layer(x))
    return layers[-1](x)


def mlp(sizes: tuple[int, ...], key) -> list[eqx.nn.Linear]:
    """Orthogonal weights (gain sqrt 2, the output's 1) and zero biases, as the PPO scripts'."""
    gains, keys = [np.sqrt(2)] * (len(sizes) - 2) + [1.0], jax.random.split(key, len(sizes) - 1)
    return [linear(i, o, g, k) for i, o, g, k in zip(sizes, sizes[1:], gains, keys)]


class Actor(eqx.Module):
    """The deterministic policy: an MLP with ReLU, tanh, scaled into the action bounds (CleanRL's)."""
    layers: list[eqx.nn.Linear]
    bounds: tuple[tuple[float, ...], tuple[float, ...]] = eqx.field(static=True)  # the actions' low and high

    def __init__(self, obs_dim: int, hidden: tuple[int, ...], bounds, key):
        self.layers, self.bounds = mlp((obs_dim, *hidden, len(bounds[0])), key), bounds

    def __call__(self, obs):  # one observation: Equinox layers are written for single examples
        low, high = map(jnp.asarray, self.bounds)
        return jnp.tanh(relu_mlp(self.layers, obs)) * (high - low) / 2 + (high + low) / 2


class Critic(eqx.Module):
    """Q(obs, action): an MLP with ReLU on the two side by side (CleanRL's)."""
    layers: list[eqx.nn.Linear]

    def __init__(self, obs_dim: int, hidden: tuple[int, ...], action_dim: int, key):
        self.layers = mlp((obs_dim + action_dim, *hidden, 1), key)

    def __call__(self, obs, action):
        return relu_mlp(self.layers, jnp.concatenate([obs, action], -1))[0]


class Networks(NamedTuple):
    """The actor and the twin critics (a pair: one Adam over both, as CleanRL's), each with its target."""
    actor: Actor
    actor_target: Actor
    critics: tuple[Critic, Critic]
    critics_target: tuple[Critic, Critic]


def batched(net, *xs):
    return jax.vmap(net)(*xs)  # a batch of observations (and actions)


def make_model(key, obs_dim: int, bounds, args: Args):
    """The networks (each target the same weights), Adam, and Adam's states for the actor and the critics."""
    actor_key, q1_key, q2_key = jax.random.split(key, 3)
    hidden, action_dim = MODELS[args.model], len(bounds[0])
    actor, critics = Actor(obs_dim, hidden, bounds, actor_key), (Critic(obs_dim, hidden, action_dim, q1_key),
                                                                 Critic(obs_dim, hidden, action_dim, q2_key))
    tx = optax.adam(args.learning_rate)  # CleanRL's: torch's Adam, eps 1e-8
    return Networks(actor, actor, critics, critics), tx, (tx.init(eqx.filter(actor, eqx.is_array)),
                                                          tx.init(eqx.filter(critics, eqx.is_array)))


# saving and loading: a JSON header line, then the leaves of (networks, optimizer states) in Equinox's format
MODEL_FILE, SAVED_BY = "model.eqx", "td3_equinox.py"  # only this script loads what it saved


def save_model(run_dir: str, nets: Networks, opt_states, args: Args) -> str:
    meta = {"script": SAVED_BY, "model": args.model, "env_id": args.env_id}
    with open(os.path.join(run_dir, MODEL_FILE), "wb") as f:
        f.write((json.dumps(meta) + "\n").encode())
        eqx.tree_serialise_leaves(f, (nets, opt_states))
    return MODEL_FILE


def read_model(path: str, args: Args, env, env_params):
    """The saved (networks, optimizer states), or exit 2 saying why this run cannot start from it."""
    saved = read_saved(path, lambda f: {"meta": json.loads(f.readline()), "leaves": f.read()},
                       model=args.model, env_id=args.env_id)
    # Equinox reads leaves into a tree of the same structure: this run's, as shapes only
    nets, _, opt_states = eqx.filter_eval_shape(make_model, jax.random.key(0), env.observation_space(env_params).shape[0],
                                                action_bounds(env, env_params), args)
    try:
        return eqx.tree_deserialise_leaves(io.BytesIO(saved["leaves"]), (nets, opt_states))
    except Exception:  # truncated: the reader raises many kinds
        fail(f"--load-model {path} is not a whole model saved by {SAVED_BY}")


# %% replay buffer
class Buffer(NamedTuple):
    """A ring of transitions in device arrays: CleanRL's (SB3's) layout, the true last observation of a
    truncated episode as its next observation."""
    obs: jax.Array
    next_obs: jax.Array
    action: jax.Array
    reward: jax.Array
    terminated: jax.Array
    pos: jax.Array  # the next slot to write
    size: jax.Array  # slots written so far, at most the capacity

    @classmethod
    def empty(cls, capacity: int, obs_dim: int, action_dim: int):
        zeros = lambda *shape, dtype=jnp.float32: jnp.zeros((capacity, *shape), dtype)
        return cls(zeros(obs_dim), zeros(obs_dim), zeros(action_dim), zeros(), zeros(dtype=bool),
                   jnp.int32(0), jnp.int32(0))

    @jax.named_scope("buffer")
    def add(self, obs, next_obs, action, reward, terminated):
        """One row per env, overwriting the oldest once full."""
        capacity, n = self.obs.shape[0], obs.shape[0]
        rows = (self.pos + jnp.arange(n)) % capacity
        put = lambda store, x: store.at[rows].set(x)
        return Buffer(put(self.obs, obs), put(self.next_obs, next_obs), put(self.action, action),
                      put(self.reward, reward), put(self.terminated, terminated), (self.pos + n) % capacity,
                      jnp.minimum(self.size + n, capacity))

    @jax.named_scope("buffer")
    def sample(self, key, batch_size: int):
        """Uniform over the written slots only."""
        rows = jax.random.randint(key, (batch_size,), 0, self.size)
        return jax.tree.map(lambda store: store[rows], (self.obs, self.next_obs, self.action, self.reward,
                                                        self.terminated))


# %% the critics' and the actor's updates
@jax.named_scope("update")
def critic_update(nets: Networks, q_opt_state, batch, noise, tx, args: Args):
    """One Adam step on both critics' squared errors against one target: the smaller of the two target
    critics at the target actor's action plus clipped noise (noise: standard normal, one per action), not
    bootstrapped through a termination."""
    obs, next_obs, action, reward, terminated = batch
    low, high = map(jnp.asarray, nets.actor.bounds)
    smoothing = jnp.clip(noise * args.policy_noise, -args.noise_clip, args.noise_clip) * (high - low) / 2
    next_action = jnp.clip(batched(nets.actor_target, next_obs) + smoothing, low, high)
    next_q = jnp.minimum(*(batched(critic, next_obs, next_action) for critic in nets.critics_target))
    target = reward + (1.0 - terminated) * args.gamma * next_q

    def loss_fn(critics):
        q1, q2 = (batched(critic, obs, action) for critic in critics)
        return ((q1 - target) ** 2).mean() + ((q2 - target) ** 2).mean(), q1

    (loss, q1), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(nets.critics)
    updates, q_opt_state = tx.update(grads, q_opt_state, eqx.filter(nets.critics, eqx.is_array))
    return nets._replace(critics=eqx.apply_updates(nets.critics, updates)), q_opt_state, loss, q1.mean()


@jax.named_scope("update")
def actor_update(nets: Networks, actor_opt_state, obs, tx, tau: float):
    """One Adam step up the first critic's value of the actor's action, then every target a Polyak step."""
    loss, grads = eqx.filter_value_and_grad(lambda actor: -batched(nets.critics[0], obs, batched(actor, obs)).mean())(
        nets.actor)
    updates, actor_opt_state = tx.update(grads, actor_opt_state, eqx.filter(nets.actor, eqx.is_array))
    actor = eqx.apply_updates(nets.actor, updates)
    return Networks(actor, optax.incremental_update(actor, nets.actor_target, tau), nets.critics,
                    optax.incremental_update(nets.critics, nets.critics_target, tau)), actor_opt_state, loss


# %% training loop
class Runner(NamedTuple):
    key: jax.Array
    env_state: EnvState
    obs: jax.Array
    buffer: Buffer
    global_step: jax.Array  # env steps so far, over all envs: CleanRL's global_step


@jax.named_scope("policy_step")
def act(actor: Actor, obs, key, uniform, noise_scale: float):
    """Each env's action: uniform in the bounds (before learning starts), else the actor's plus Gaussian noise of
    noise_scale action scales, clipped to the bounds."""
    low, high = map(jnp.asarray, actor.bounds)
    uniform_key, noise_key = jax.random.split(key)
    shape = (obs.shape[0], len(low))
    noisy = batched(actor, obs) + jax.random.normal(noise_key, shape) * noise_scale * (
        high - low) / 2
    return jnp.where(uniform, jax.random.uniform(uniform_key, shape, minval=low, maxval=high), jnp.clip(noisy, low, high))


def iteration(nets: Networks, opt_states, runner: Runner, tx, env, env_params, args: Args):
    """log_frequency env steps as one lax.scan: act, step, store, and on CleanRL's steps update."""

    def step(carry, _):
        nets, opt_states, runner = carry  # the networks are pytrees: the scan carries them
        key, act_key, sample_key, noise_key = jax.random.split(runner.key, 4)
        t = runner.global_step
        action = act(nets.actor, runner.obs, act_key, t < args.learning_starts, args.exploration_noise)
        env_state, out = env_step(runner.env_state, action, env, env_params, args.num_envs)
        buffer = runner.buffer.add(runner.obs, out.final_obs, action, out.reward, out.terminated)
        # CleanRL updates the critics at every global_step > learning-starts, the actor and the targets where it is
        # also a multiple of policy-frequency; with n envs a vector step covers global steps t..t+n-1
        learning = t > args.learning_starts
        delayed = learning & ((-t) % args.policy_frequency < args.num_envs)
        zero = jnp.float32(0)

        def update(nets, opt_states):  # only past learning-starts: the batch and the noise are drawn here, not before
            actor_opt_state, q_opt_state = opt_states
            batch = buffer.sample(sample_key, args.batch_size)
            nets, q_opt_state, qf_loss, q1 = critic_update(nets, q_opt_state, batch,
                                                           jax.random.normal(noise_key, batch[2].shape), tx, args)
            nets, actor_opt_state, actor_loss = jax.lax.cond(
                delayed, lambda n, o: actor_update(n, o, batch[0], tx, args.tau), lambda n, o: (n, o, zero),
                nets, actor_opt_state)
            return nets, (actor_opt_state, q_opt_state), qf_loss, q1, actor_loss

        nets, opt_states, qf_loss, q1, actor_loss = jax.lax.cond(
            learning, update, lambda n, o: (n, o, zero, zero, zero), nets, opt_states)
        runner = Runner(key, env_state, out.obs, buffer, t + args.num_envs)
        return (nets, opt_states, runner), (out, learning, delayed, qf_loss, q1, actor_loss)

    (nets, opt_states, runner), (out, learning, delayed, qf_loss, q1, actor_loss) = jax.lax.scan(
        step, (nets, opt_states, runner), length=args.log_frequency // args.num_envs)
    updates, actor_updates = learning.sum(), delayed.sum()
    stats = {"episodes": (out.terminated | out.truncated).sum(), "episodic_return_sum": out.episode_return.sum(),
             "episodic_length_sum": out.episode_length.sum(), "updates": updates, "actor_updates": actor_updates,
             "qf_loss": qf_loss.sum() / jnp.maximum(updates, 1), "qf1_values": q1.sum() / jnp.maximum(updates, 1),
             "actor_loss": actor_loss.sum() / jnp.maximum(actor_updates, 1)}
    return nets, opt_states, runner, stats


def evaluate(actor: Actor, key, env, env_params, num_episodes: int):
    """One episode on each of num_episodes fresh envs, the actor's action without noise: their returns."""
    key, reset_key = jax.random.split(key)
    obs, env_state = env_reset(reset_key, env, env_params, num_episodes)

    def step(carry):
        env_state, obs, returns, done = carry
        env_state, out = env_step(env_state, batched(actor, obs), env, env_params, num_episodes)
        ended = (out.terminated | out.truncated) & ~done  # each env's first episode only
        return env_state, out.obs, jnp.where(ended, out.episode_return, returns), done | ended

    carry = (env_state, obs, jnp.zeros(num_episodes), jnp.zeros(num_episodes, bool))
    return jax.lax.while_loop(lambda carry: ~carry[3].all(), step, carry)[2]


# %% training loop with logging
def train(args: Args, env, env_params, writer, saved: tuple | None = None):
    """Returns the trained networks and the optimizers' states.
    writer: TensorBoard's (the benchmark's RunLog, which also times and records the run)."""
    bounds = action_bounds(env, env_params)

    def setup(seed):
        init_key, env_key, runner_key = jax.random.split(jax.random.key(seed), 3)
        obs_dim = env.observation_space(env_params).shape[0]
        obs, env_state = env_reset(env_key, env, env_params, args.num_envs)
        nets, tx, opt_states = make_model(init_key, obs_dim, bounds, args)
        buffer = Buffer.empty(args.buffer_size, obs_dim, len(bounds[0]))
        return nets, tx, opt_states, Runner(runner_key, env_state, obs, buffer, jnp.int32(0))

    # the reset, the weights and the empty buffer as one compiled call, compiled without optimizing it
    once = eqx.filter_jit(setup).lower(args.seed).compile({"xla_backend_optimization_level": 0})
    nets, tx, opt_states, runner = once(args.seed)
    if saved is not None:  # harness: the weights, the targets and Adam's states; the buffer starts empty
        nets, opt_states = saved
    # each call consumes what it changes: XLA reuses the networks', optimizers' and runner's buffers
    iteration_fn = eqx.filter_jit(partial(iteration, tx=tx, env=env, env_params=env_params, args=args), donate="all")
    num_iterations = args.total_timesteps // args.log_frequency
    with Progress() as progress:
        task = progress.add_task("iteration 0, compiling", total=num_iterations)
        for i in range(num_iterations):
            t0 = time.perf_counter()
            with region("iteration", args.profile):  # harness
                nets, opt_states, runner, stats = iteration_fn(nets, opt_states, runner)
            stats = jax.device_get(stats)  # the one host fetch, which waits for the iteration
            seconds, global_step = time.perf_counter() - t0, (i + 1) * args.log_frequency
            if stats["episodes"]:
                writer.add_scalar("charts/episodic_return", stats["episodic_return_sum"] / stats["episodes"], global_step)
                writer.add_scalar("charts/episodic_length", stats["episodic_length_sum"] / stats["episodes"], global_step)
            writer.add_scalar("charts/SPS", args.log_frequency / seconds, global_step)
            if stats["updates"]:  # the losses of the iteration's updates, where it made any (none before learning starts)
                writer.add_scalar("losses/qf_loss", stats["qf_loss"], global_step)
                writer.add_scalar("losses/qf1_values", stats["qf1_values"], global_step)
            if stats["actor_updates"]:
                writer.add_scalar("losses/actor_loss", stats["actor_loss"], global_step)
            writer.iteration(i, {"iteration": seconds}, stats)  # harness: time/, memory/, the final return, --profile
            progress.update(task, advance=1, description=f"{global_step:,} steps, SPS {args.log_frequency / seconds:,.0f}")
    return nets, opt_states


def traced(args: Args) -> range:  # harness
    """--profile's iterations (from 0): the last two, after at least one that compiles."""
    iterations = args.total_timesteps // args.log_frequency
    return range(iterations - 2, iterations)


def invalid(args: Args) -> str | None:  # harness
    """Why these arguments cannot run, beyond each one's range (check_args asks first), or None."""
    if args.log_frequency % args.num_envs or args.total_timesteps % args.log_frequency:
        return (f"log_frequency={args.log_frequency} must be a multiple of num_envs={args.num_envs} and divide "
                f"total_timesteps={args.total_timesteps}")
    if args.policy_frequency < args.num_envs:
        return (f"policy_frequency={args.policy_frequency} must be at least num_envs={args.num_envs}: one vector "
                f"step makes at most one actor update")
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
    env, env_params = make_env(args.env_id)
    saved = read_model(args.load_model, args, env, env_params) if args.load_model else None  # harness
    writer = start_run(args, variant_name(args), jax.devices()[0].device_kind)  # plain: writer = Writer(f"runs/{args.env_id}__{variant_name(args)}__{args.seed}__{int(time.time())}")
    with writer:  # harness: summary.json, the saved model and the evaluation; an interrupted run keeps its logs
        nets, opt_states = train(args, env, env_params, writer, saved)  # plain: train(args, env, env_params, writer)
        evaluate_fn = partial(evaluate, env=env, env_params=env_params, num_episodes=args.eval_episodes)  # harness
        writer.finish(save=lambda run_dir: save_model(run_dir, nets, opt_states, args),  # harness
                      # evaluation's fresh envs: the seed key folded with 4, a stream training does not draw from
                      evaluate=lambda: eqx.filter_jit(evaluate_fn)(nets.actor, jax.random.fold_in(jax.random.key(args.seed), 4)))
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
