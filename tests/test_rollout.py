"""Proof that every script's rollout lines up what it collects: with fixed weights and seeds,
each env stepped alone in a plain Python loop (the same env, the same randomness, the actions
the script chose) gives the same observations, rewards, terminated/truncated flags, final
observations, episode returns and lengths; the reference network gives the same
log-probabilities and values; and GAE over that trajectory gives the same advantages.
A second, near-deterministic policy shows each action was chosen from its own observation.
The Gymnax scripts step Gymnax's CartPole; the Gymnasium ones Gymnasium's CartPole and
MinAtar Breakout (boolean grids), each sub-env seeded as the vector env seeds it (seed + i) and
reset in the step its episode ends. Every rollout is two consecutive rollout() calls, the
runner (env state, episode statistics) carried across as the script carries it."""

from functools import cache, partial

import numpy as np
import pytest
import reference as ref
from adapters import adapter_for
from helpers import CONTINUOUS_SCRIPTS, GYMNASIUM_SCRIPTS, load, script_args
from helpers import ONE_AGENT_SCRIPTS as SCRIPTS  # the agent scripts: tests/test_agents.py

NUM_ENVS, NUM_STEPS, TIME_LIMIT = 8, 64, 25  # a short time limit: truncations as well as terminations
SHARP = 1000.0  # actor output scale of the near-deterministic policy: the Gumbel noise cannot flip it


def flatten(obs):
    return np.asarray(obs, np.float32).reshape(-1)


def reset_each(env, env_params):
    """The start of the scripts' key stream: the env key split once for the reset, then into one
    key per env, each env reset alone."""
    import jax

    env_key = jax.random.key(3)
    key, reset_key = jax.random.split(env_key)
    resets = [env.reset(k, env_params) for k in jax.random.split(reset_key, NUM_ENVS)]
    return env_key, key, [flatten(o) for o, _ in resets], [s for _, s in resets]


def gymnax_envs(script, env_id="CartPole-v1"):
    """A Gymnax env, made by the script's own make_env, each env stepped alone with the scripts'
    key stream: the env key is split once for the reset and once per step, then into one key per
    env. A continuous env is given the action clipped to its bounds."""
    import jax
    from gymnax.environments import spaces

    env, env_params = load(script).make_env(env_id)
    env_params = env_params.replace(max_steps_in_episode=TIME_LIMIT)
    env_key, key, first_obs, states = reset_each(env, env_params)
    space = env.action_space(env_params)
    given = (lambda a: np.clip(a, space.low, space.high)) if isinstance(space, spaces.Box) else int

    def step(t, actions):
        nonlocal key
        key, step_key = jax.random.split(key)
        out = []
        for i, k in enumerate(jax.random.split(step_key, NUM_ENVS)):
            o, states[i], reward, terminated, truncated, info = env.step(k, states[i], given(actions[i]), env_params)
            out.append((flatten(o), float(reward), bool(terminated), bool(truncated),
                        flatten(info["final_observation"])))
        return out

    return (env, env_params, env_key), first_obs, step


@cache
def craftax_env(env_id):
    """One Craftax env object for every script's reference loop: its jitted step and reset compile
    once (tens of seconds), not once per script. The Gymnax scripts' environment helpers are one
    text (tests/test_craftax.py), so ppo_linen.py's make_env makes what every script's makes."""
    import jax

    env, env_params = load("ppo_linen.py").make_env(env_id)
    return env, jax.jit(partial(env.is_terminal, params=env_params.replace(max_timesteps=2**31 - 1)))


def craftax_envs(script, env_id):
    """Craftax, each env stepped alone without auto-reset, and the envs that finished given fresh
    worlds as the scripts give them: worlds made from the step key's second half, one per
    CRAFTAX_RESET_RATIO envs, the k-th finished env (by index) world k mod their number. Craftax's
    done includes its time limit: that part is a truncation."""
    import jax

    env, is_terminal = craftax_env(env_id)
    env_params = env.default_params.replace(max_timesteps=TIME_LIMIT)
    num_worlds = -(-NUM_ENVS // adapter_for(script).module(script).CRAFTAX_RESET_RATIO)  # the module that runs
    env_key, key, first_obs, states = reset_each(env, env_params)

    def step(t, actions):
        nonlocal key
        key, step_key = jax.random.split(key)
        step_key, world_key = jax.random.split(step_key)
        worlds = [env.reset(k, env_params) for k in jax.random.split(world_key, num_worlds)]
        out, finished = [], 0
        for i, k in enumerate(jax.random.split(step_key, NUM_ENVS)):
            o, states[i], reward, done, _ = env.step(k, states[i], int(actions[i]), env_params)
            terminated, final = bool(is_terminal(states[i])), flatten(o)
            if done:
                o, states[i] = worlds[finished % num_worlds]
                finished += 1
            out.append((flatten(o), float(reward), terminated, bool(done) and not terminated, final))
        return out

    return (env, env_params, env_key), first_obs, step


def gymnasium_envs(script, env_id):
    """Gymnasium's twin, made by the script's own make_env (sync, same-step autoreset), and the
    same twin's envs made and stepped alone: seeded with seed + i as the vector env seeds them,
    and reset (without a seed) in the step their episode ends. A continuous env is given the action
    clipped to its bounds."""
    import gymnasium as gym

    seed, m = 3, load(script)
    twin, kwargs = m.TWINS[env_id]
    kwargs = {**kwargs, "max_episode_steps": TIME_LIMIT}
    m.make_env(env_id, 1).close()  # registers the MinAtar twins
    envs = [gym.make(twin, **kwargs) for _ in range(NUM_ENVS)]
    first_obs = [flatten(e.reset(seed=seed + i)[0]) for i, e in enumerate(envs)]
    space = envs[0].action_space  # a continuous env is given the action clipped to its bounds
    given = (lambda a: np.clip(a, space.low, space.high)) if isinstance(space, gym.spaces.Box) else int

    def step(t, actions):
        out = []
        for e, action in zip(envs, actions):
            o, reward, terminated, truncated, _ = e.step(given(action))
            final = flatten(o)
            if terminated or truncated:
                o, _ = e.reset()
            out.append((flatten(o), float(reward), terminated, truncated, final))
        return out

    original = dict(m.TWINS)
    m.TWINS[env_id] = (twin, kwargs)  # the script's make_env, with the test's time limit
    try:
        vector = m.make_env(env_id, NUM_ENVS)
    finally:
        m.TWINS.clear(), m.TWINS.update(original)
    return (vector, seed), first_obs, step


def reference_rollout(first_obs, step, actions):
    """The plain loop: the trajectory, the observation after each step and every finished
    episode's (step, return, length)."""
    obs = list(first_obs)
    names = ("obs", "reward", "terminated", "truncated", "final_obs")
    out = {name: [] for name in names}
    running = np.zeros((2, NUM_ENVS))  # return and length of each env's episode so far
    episodes = []
    for t in range(len(actions)):
        out["obs"].append(np.stack(obs))
        results = step(t, actions[t])
        for i, (o, reward, terminated, truncated, final) in enumerate(results):
            obs[i] = o
            running[:, i] += (reward, 1)
            if terminated or truncated:
                episodes.append((t, *running[:, i]))
                running[:, i] = 0
        for name, values in zip(names[1:], zip(*[r[1:] for r in results])):
            out[name].append(np.stack(values))
    out["obs"].append(np.stack(obs))
    return {name: np.stack(values) for name, values in out.items()}, episodes


def value(weights, obs):
    return ref.forward(ref.as64(weights)["critic"], obs)[0][..., 0]


def sharpen(weights):
    """The near-deterministic policy: the actor's output scaled up."""
    kernel, bias = weights["actor"][-1]
    weights["actor"][-1] = (kernel * SHARP, bias)


CRAFTAX = "Craftax-Classic-Symbolic-v1"  # (the full game steps alike through the same helper, and compiles slower)
# Craftax in one JAX rollout (lax.scan) and one PyTorch rollout (a Python loop): the environment helpers are
# one text in every Gymnax script (test_craftax.py), and every script's rollout is proven on CartPole
CRAFTAX_SCRIPTS = ["ppo_linen.py", "ppo_torch.py"]
CASES = ([(s, "CartPole-v1", False) for s in SCRIPTS] + [(s, "Breakout-MinAtar", False) for s in GYMNASIUM_SCRIPTS]
         + [(s, CRAFTAX, False) for s in CRAFTAX_SCRIPTS]
         + [("ppo_torch_compile.py", "CartPole-v1", True)])  # the policy step compiled too (--compile-scope ...+policy)


@pytest.mark.parametrize("policy", ["soft", "sharp"])
@pytest.mark.parametrize("script,env_id,compiled", CASES,
                         ids=[f"{s}-{e}" + ("-compiled" if c else "") for s, e, c in CASES])
def test_rollout_matches_step_by_step_reference(script, env_id, compiled, policy, monkeypatch):
    """Two consecutive rollout() calls, the runner carried across as the script carries it."""
    import jax

    if env_id == CRAFTAX:
        if policy == "sharp":
            pytest.skip("Craftax compiles slowly: the soft policy only")
        # two fresh worlds per step for the 8 envs, in the module the adapter runs (a private copy for torch_compile)
        monkeypatch.setattr(adapter_for(script).module(script), "CRAFTAX_RESET_RATIO", 4)
    args = script_args(load(script), num_envs=NUM_ENVS, num_steps=NUM_STEPS)
    if script in GYMNASIUM_SCRIPTS:
        env_inputs, first_obs, step = gymnasium_envs(script, env_id)
        num_actions = env_inputs[0].single_action_space.n
    else:
        env_inputs, first_obs, step = craftax_envs(script, env_id) if env_id == CRAFTAX else gymnax_envs(script)
        num_actions = env_inputs[0].action_space(env_inputs[1]).n
    weights = ref.random_weights(np.random.default_rng(2), len(first_obs[0]), (64, 64), num_actions)
    if policy == "sharp":
        sharpen(weights)
    calls = adapter_for(script, compiled)(script, weights, args).rollouts(*env_inputs, jax.random.key(4), calls=2)
    actions = np.concatenate([batch["actions"].reshape(NUM_STEPS, NUM_ENVS) for batch, *_ in calls])
    expected, episodes = reference_rollout(first_obs, step, actions)
    ends = expected["terminated"] | expected["truncated"]
    assert ends[:NUM_STEPS].any() and ends[NUM_STEPS:].any(), "both rollouts must hold episode ends"
    if policy == "soft":  # (the sharp one ends Breakout's episodes before the time limit)
        assert (expected["truncated"] & ~expected["terminated"]).any(), "a truncation must bootstrap"

    for call, (batch, stats, last_obs, gae_args) in enumerate(calls):
        steps = slice(call * NUM_STEPS, (call + 1) * NUM_STEPS)
        ex = {name: x[steps] for name, x in expected.items()}
        ex_last_obs = expected["obs"][steps.stop]
        ended = [e for e in episodes if steps.start <= e[0] < steps.stop]
        values, rewards, terminated, truncated, last_value, final_values = gae_args
        where = f"rollout call {call + 1}"

        # the environment: what each step saw, got and ended with, and the episode statistics
        # (an episode that began in the first call ends in the second with its whole return)
        np.testing.assert_allclose(batch["obs"].reshape(NUM_STEPS, NUM_ENVS, -1), ex["obs"], atol=1e-5, err_msg=where)
        np.testing.assert_array_equal(rewards, ex["reward"], err_msg=where)
        np.testing.assert_array_equal(terminated, ex["terminated"], err_msg=where)
        np.testing.assert_array_equal(truncated, ex["truncated"], err_msg=where)
        np.testing.assert_allclose(last_obs, ex_last_obs, atol=1e-5, err_msg=where)
        assert stats["episodes"] == len(ended), where
        assert stats["episodic_return_sum"] == pytest.approx(sum(r for _, r, _ in ended)), where
        assert stats["episodic_length_sum"] == pytest.approx(sum(n for *_, n in ended)), where
        if "valid" in batch:  # same-step autoreset: every step is a transition
            np.testing.assert_array_equal(batch["valid"], 1.0, err_msg=where)

        # the network on those observations: log-probs of the chosen actions, values, and the value
        # of the final observation each truncated step bootstraps from
        act = actions[steps]
        logits = ref.forward(ref.as64(weights)["actor"], ex["obs"])[0]
        logp = np.take_along_axis(ref.log_softmax(logits), act[..., None], -1).reshape(-1)
        float32_error = 1e-6 * np.abs(logits).max()  # float32 log-softmax of large logits
        np.testing.assert_allclose(batch["logprobs"], logp, rtol=1e-4, atol=1e-5 + float32_error, err_msg=where)
        np.testing.assert_allclose(values, value(weights, ex["obs"]), rtol=1e-5, atol=1e-5, err_msg=where)
        np.testing.assert_allclose(batch["values"], values.reshape(-1), err_msg=where)
        np.testing.assert_allclose(last_value, value(weights, ex_last_obs), rtol=1e-5, atol=1e-5, err_msg=where)
        bootstrapped = ex["truncated"] & ~ex["terminated"]
        np.testing.assert_allclose(final_values[bootstrapped], value(weights, ex["final_obs"])[bootstrapped],
                                   rtol=1e-5, atol=1e-5, err_msg=where)

        # GAE over the reference trajectory gives the batch's advantages and returns
        advantages, returns = ref.gae(value(weights, ex["obs"]), ex["reward"], ex["terminated"], ex["truncated"],
                                      value(weights, ex_last_obs), value(weights, ex["final_obs"]), args.gamma,
                                      args.gae_lambda)
        np.testing.assert_allclose(batch["advantages"], advantages.reshape(-1), rtol=1e-4, atol=1e-4, err_msg=where)
        np.testing.assert_allclose(batch["returns"], returns.reshape(-1), rtol=1e-4, atol=1e-4, err_msg=where)

        if policy == "sharp":  # each action is the one its own observation's logits call for
            decided = np.abs(np.diff(np.sort(logits, -1)[..., -2:], axis=-1)[..., 0]) > 30  # Gumbel noise: p < 1e-13
            assert decided.mean() > 0.5, where
            np.testing.assert_array_equal(act[decided], logits.argmax(-1)[decided], err_msg=where)


@pytest.mark.parametrize("vectorization", ["vector", "envpool"])
@pytest.mark.parametrize("script", GYMNASIUM_SCRIPTS)
def test_next_step_autoreset_masks_the_reset_step(script, vectorization):
    """Vectorizations that reset an env on the step after its episode ended (Gymnasium's NumPy
    CartPole, EnvPool): two consecutive rollouts, checked step by step against Gymnasium's own
    CartPole stepped from each observation (CartPole's observation is its whole state). Every
    transition is in the batch with weight 1 and is what the env does; every reset step has
    weight 0, reward 0 and no episode end; the episode statistics count transitions only; and GAE
    over each env's transitions alone, reset steps left out, gives the batch's advantages."""
    import gymnasium as gym
    import jax

    m = load(script)
    args = script_args(m, num_envs=NUM_ENVS, num_steps=NUM_STEPS, vectorization=vectorization)
    original = dict(m.TWINS)
    m.TWINS["CartPole-v1"] = ("CartPole-v1", {"max_episode_steps": TIME_LIMIT})
    try:
        envs = m.make_env("CartPole-v1", NUM_ENVS, vectorization, seed=3)
    finally:
        m.TWINS.clear(), m.TWINS.update(original)
    assert envs.metadata["autoreset_mode"] == gym.vector.AutoresetMode.NEXT_STEP
    weights = ref.random_weights(np.random.default_rng(2), 4, (64, 64), 2)
    calls = adapter_for(script)(script, weights, args).rollouts(envs, 3, jax.random.key(4), calls=2)
    single = gym.make("CartPole-v1").unwrapped  # the dynamics, stepped from a given state

    resetting, running, length = np.zeros(NUM_ENVS, bool), np.zeros((2, NUM_ENVS)), np.zeros(NUM_ENVS, int)
    resets = 0
    for call, (batch, stats, last_obs, gae_args) in enumerate(calls):
        values, rewards, terminated, truncated, last_value, final_values = gae_args
        obs = batch["obs"].reshape(NUM_STEPS, NUM_ENVS, 4)
        next_obs = np.concatenate([obs[1:], last_obs[None]])
        actions, valid = batch["actions"].reshape(NUM_STEPS, NUM_ENVS), batch["valid"].reshape(NUM_STEPS, NUM_ENVS)
        ended = []
        for t in range(NUM_STEPS):
            where = f"rollout call {call + 1}, step {t}"
            np.testing.assert_array_equal(valid[t], ~resetting, err_msg=where)
            for i in np.flatnonzero(resetting):  # a reset step: nothing happens but the reset
                assert (rewards[t, i], terminated[t, i], truncated[t, i]) == (0, False, False), where
            for i in np.flatnonzero(~resetting):  # a transition: what CartPole does from this state
                single.state, single.steps_beyond_terminated = obs[t, i].astype(np.float64), None
                o, reward, term, _, _ = single.step(int(actions[t, i]))
                length[i] += 1
                running[:, i] += (reward, 1)
                np.testing.assert_allclose(next_obs[t, i], o, rtol=1e-5, atol=1e-5, err_msg=where)
                truncation = length[i] == TIME_LIMIT  # EnvPool: a step that does both is truncated only
                term = term and not (vectorization == "envpool" and truncation)
                assert (rewards[t, i], terminated[t, i], truncated[t, i]) == (reward, term, truncation), where
                if truncated[t, i] and not term:  # the observation this step returned is the final one
                    np.testing.assert_allclose(final_values[t, i], value(weights, next_obs[t, i]), rtol=1e-5, atol=1e-5)
            resetting = terminated[t] | truncated[t]
            for i in np.flatnonzero(resetting):
                ended.append(tuple(running[:, i]))
                running[:, i], length[i] = 0, 0
            resets += resetting.sum()
        assert stats["episodes"] == len(ended)
        assert stats["episodic_return_sum"] == pytest.approx(sum(r for r, _ in ended))
        assert stats["episodic_length_sum"] == pytest.approx(sum(n for _, n in ended))

        # each env's transitions alone (its reset steps dropped): GAE gives the batch's advantages
        advantages = batch["advantages"].reshape(NUM_STEPS, NUM_ENVS)
        for i in range(NUM_ENVS):
            keep = valid[:, i] == 1
            column = lambda x: x[keep, i][:, None]
            expected, _ = ref.gae(value(weights, column(obs)), column(rewards), column(terminated),
                                  column(truncated), value(weights, last_obs[i:i + 1]),
                                  value(weights, column(next_obs)), args.gamma, args.gae_lambda)
            np.testing.assert_allclose(column(advantages), expected, rtol=1e-4, atol=1e-4, err_msg=f"env {i}")
    assert resets > NUM_ENVS, "the rollouts must hold reset steps"
    envs.close()


def normalized(expected, gamma):
    """The reference's normalization along a trajectory: every observation (the first included) joins
    the statistics and is scaled by them, a final observation is scaled by the statistics of its step
    without joining them, and every reward is scaled by the discounted returns' statistics."""
    obs_stats, return_stats, discounted = ref.Running.start(expected["obs"].shape[-1:]), ref.Running.start(), 0.0
    obs_stats, first = ref.normalize_obs(obs_stats, expected["obs"][0])
    out = {"obs": [first], "final_obs": [], "reward": []}
    for t in range(len(expected["reward"])):
        obs_stats, obs = ref.normalize_obs(obs_stats, expected["obs"][t + 1])
        out["obs"].append(obs)
        out["final_obs"].append(ref.normalize_obs(obs_stats, expected["final_obs"][t], update=False)[1])
        return_stats, discounted, reward = ref.scale_reward(return_stats, discounted, expected["reward"][t],
                                                            expected["terminated"][t], gamma)
        out["reward"].append(reward)
    return {name: np.stack(x) for name, x in out.items()}


@pytest.mark.parametrize("script", CONTINUOUS_SCRIPTS)
def test_continuous_rollout_stores_the_sample_and_steps_the_clipped_action(script):
    """MountainCarContinuous (Gymnax's, or Gymnasium's twin in the CPU-env scripts) charges -0.1 * action**2
    for the action it is given, so an unclipped
    action shows in its reward: two consecutive rollout() calls with the Gaussian head (std 1.5,
    about half the samples beyond the bounds [-1, 1]) give what the env does stepped alone with the
    clipped actions, while the batch stores the samples themselves and their log-probabilities;
    observations and rewards are normalized as the reference normalizes them (the episode statistics
    stay raw), and the values, the bootstrap from final observations and GAE follow."""
    import jax

    args = script_args(load(script), True, num_envs=NUM_ENVS, num_steps=NUM_STEPS)
    assert args.normalize, "normalization is on by default"
    env_inputs, first_obs, step = (gymnasium_envs if script in GYMNASIUM_SCRIPTS else gymnax_envs)(
        script, "MountainCarContinuous-v0")
    weights = ref.random_weights(np.random.default_rng(2), len(first_obs[0]), (64, 64), 1, continuous=True)
    weights["actor_logstd"][:] = np.log(1.5)
    calls = adapter_for(script)(script, weights, args).rollouts(*env_inputs, jax.random.key(4), calls=2)
    actions = np.concatenate([batch["actions"].reshape(NUM_STEPS, NUM_ENVS, 1) for batch, *_ in calls])
    assert (np.abs(actions) > 1).mean() > 0.3, "the samples must go beyond the bounds"
    spread = []  # each sample's distance from its policy's mean, in the policy's standard deviations
    raw, episodes = reference_rollout(first_obs, step, actions)
    expected = normalized(raw, args.gamma)
    assert (raw["truncated"][:NUM_STEPS].any() and raw["truncated"][NUM_STEPS:].any()), "both rollouts end episodes"

    for call, (batch, stats, last_obs, gae_args) in enumerate(calls):
        steps, where = slice(call * NUM_STEPS, (call + 1) * NUM_STEPS), f"rollout call {call + 1}"
        obs, final_obs = expected["obs"][steps], expected["final_obs"][steps]
        values, rewards, terminated, truncated, last_value, final_values = gae_args
        np.testing.assert_allclose(batch["obs"].reshape(NUM_STEPS, NUM_ENVS, -1), obs, atol=1e-4, err_msg=where)
        np.testing.assert_allclose(last_obs, expected["obs"][steps.stop], atol=1e-4, err_msg=where)
        np.testing.assert_allclose(rewards, expected["reward"][steps], rtol=1e-4, atol=1e-5, err_msg=where)
        np.testing.assert_array_equal(truncated, raw["truncated"][steps], err_msg=where)
        ended = [e for e in episodes if steps.start <= e[0] < steps.stop]
        assert stats["episodic_return_sum"] == pytest.approx(sum(r for _, r, _ in ended), rel=1e-5), where

        mean = ref.forward(ref.as64(weights)["actor"], obs)[0]
        logprobs = ref.gaussian(mean, weights["actor_logstd"].astype(np.float64), actions[steps])[0]
        np.testing.assert_allclose(batch["logprobs"], logprobs.reshape(-1), rtol=1e-4, atol=1e-4, err_msg=where)
        spread.append((actions[steps] - mean) / 1.5)
        np.testing.assert_allclose(values, value(weights, obs), rtol=1e-4, atol=1e-4, err_msg=where)
        bootstrapped = raw["truncated"][steps] & ~raw["terminated"][steps]
        np.testing.assert_allclose(final_values[bootstrapped], value(weights, final_obs)[bootstrapped],
                                   rtol=1e-4, atol=1e-4, err_msg=where)
        advantages, _ = ref.gae(value(weights, obs), expected["reward"][steps], raw["terminated"][steps],
                                raw["truncated"][steps], value(weights, expected["obs"][steps.stop]),
                                value(weights, final_obs), args.gamma, args.gae_lambda)
        np.testing.assert_allclose(batch["advantages"], advantages.reshape(-1), rtol=1e-3, atol=1e-3, err_msg=where)
    # standard normal noise scaled by the policy's std (1.5), not 1 nor the log-std: over the samples, a mean
    # within 0.25 of 0 and a standard deviation within 15% of 1 (some 8 and 7 standard errors of 1,024 samples)
    spread = np.concatenate(spread).ravel()
    assert abs(spread.mean()) < 0.25 and 0.85 < spread.std() < 1.15, (spread.mean(), spread.std(), spread.size)


@pytest.mark.parametrize("script", CONTINUOUS_SCRIPTS)
def test_normalizer_matches_reference(script):
    """The script's Normalizer against the reference's, step by step: 30 steps of 8 envs, far from
    mean 0 and variance 1, a tenth of the steps terminated (the only cut of the discounted return),
    an outlier beyond the +-10 clip last; frozen statistics scale without changing."""
    import jax.numpy as jnp

    m, rng = load(script), np.random.default_rng(5)
    given = np.asarray if script in GYMNASIUM_SCRIPTS else jnp.asarray  # what the script's env step hands it
    norm = m.Normalizer.start(3, NUM_ENVS)
    obs_stats, return_stats, discounted = ref.Running.start((3,)), ref.Running.start(), np.zeros(NUM_ENVS)
    for t in range(30):
        obs = rng.normal([5.0, -2.0, 0.0], [3.0, 0.1, 50.0], (NUM_ENVS, 3)).astype(np.float32)
        reward = rng.normal(-1.0, 2.0 if t else 200.0, NUM_ENVS).astype(np.float32)
        terminated = rng.random(NUM_ENVS) < 0.1
        if t == 29:  # an outlier each, beyond the clip
            obs[0, 0], reward[0] = 1e4, 1e5
        norm, got_obs = norm.observe(given(obs))
        obs_stats, want_obs = ref.normalize_obs(obs_stats, obs)
        norm, got_reward = norm.scale(given(reward), given(terminated), 0.99)
        return_stats, discounted, want_reward = ref.scale_reward(return_stats, discounted, reward, terminated, 0.99)
        np.testing.assert_allclose(np.asarray(got_obs), want_obs, rtol=1e-4, atol=1e-4, err_msg=f"step {t}")
        np.testing.assert_allclose(np.asarray(got_reward), want_reward, rtol=1e-4, atol=1e-4, err_msg=f"step {t}")
    assert want_obs[0, 0] == 10 and want_reward[0] == 10, "the outliers are clipped"
    frozen, scaled = norm.observe(given(obs), learn=False)
    np.testing.assert_array_equal(np.asarray(frozen.obs.mean), np.asarray(norm.obs.mean))
    np.testing.assert_allclose(np.asarray(scaled), ref.normalize_obs(obs_stats, obs, update=False)[1], rtol=1e-4, atol=1e-4)
