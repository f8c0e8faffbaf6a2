"""Proof that every script's rollout lines up what it collects: with fixed weights and seeds,
each env stepped alone in a plain Python loop (the same env, the same randomness, the actions
the script chose) gives the same observations, rewards, terminated/truncated flags, final
observations, episode returns and lengths; the reference network gives the same
log-probabilities and values; and GAE over that trajectory gives the same advantages.
A second, near-deterministic policy shows each action was chosen from its own observation.
The Gymnax scripts step Gymnax's CartPole; the Gymnasium ones Gymnasium's, each sub-env
seeded as the vector env seeds it (seed + i) and reset in the step its episode ends."""

import dataclasses

import numpy as np
import pytest
import reference as ref
from adapters import adapter_for
from helpers import GYMNASIUM_SCRIPTS, SCRIPTS, load

NUM_ENVS, NUM_STEPS, TIME_LIMIT = 8, 64, 25  # a short time limit: truncations as well as terminations
SHARP = 1000.0  # actor output scale of the near-deterministic policy: the Gumbel noise cannot flip it


def flatten(obs):
    return np.asarray(obs, np.float32).reshape(-1)


def gymnax_envs():
    """Gymnax's CartPole, each env stepped alone with the scripts' key stream: the env key is split
    once for the reset and once per step, then into one key per env."""
    import gymnax
    import jax

    env, env_params = gymnax.make("CartPole-v1")
    env_params = env_params.replace(max_steps_in_episode=TIME_LIMIT)
    env_key = jax.random.key(3)
    key, reset_key = jax.random.split(env_key)
    resets = [env.reset(k, env_params) for k in jax.random.split(reset_key, NUM_ENVS)]
    first_obs, states = [flatten(o) for o, _ in resets], [s for _, s in resets]

    def step(t, actions):
        nonlocal key
        key, step_key = jax.random.split(key)
        out = []
        for i, k in enumerate(jax.random.split(step_key, NUM_ENVS)):
            o, states[i], reward, terminated, truncated, info = env.step(k, states[i], int(actions[i]), env_params)
            out.append((flatten(o), float(reward), bool(terminated), bool(truncated),
                        flatten(info["final_observation"])))
        return out

    return (env, env_params, env_key), first_obs, step


def gymnasium_envs():
    """Gymnasium's CartPole, each env made and stepped alone: seeded with seed + i as the vector
    env seeds it, and reset (without a seed) in the step its episode ends."""
    import gymnasium as gym

    seed = 3
    envs = [gym.make("CartPole-v1", max_episode_steps=TIME_LIMIT) for _ in range(NUM_ENVS)]
    first_obs = [flatten(e.reset(seed=seed + i)[0]) for i, e in enumerate(envs)]

    def step(t, actions):
        out = []
        for e, action in zip(envs, actions):
            o, reward, terminated, truncated, _ = e.step(int(action))
            final = flatten(o)
            if terminated or truncated:
                o, _ = e.reset()
            out.append((flatten(o), float(reward), terminated, truncated, final))
        return out

    vector = gym.make_vec("CartPole-v1", NUM_ENVS, vectorization_mode="sync", max_episode_steps=TIME_LIMIT,
                          vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP})
    return (vector, seed), first_obs, step


def reference_rollout(first_obs, step, actions):
    """The plain loop: the trajectory, the last observations and every finished episode's
    (return, length)."""
    obs = list(first_obs)
    names = ("obs", "reward", "terminated", "truncated", "final_obs")
    out = {name: [] for name in names}
    running = np.zeros((2, NUM_ENVS))  # return and length of each env's episode so far
    episodes = []
    for t in range(NUM_STEPS):
        out["obs"].append(np.stack(obs))
        results = step(t, actions[t])
        for i, (o, reward, terminated, truncated, final) in enumerate(results):
            obs[i] = o
            running[:, i] += (reward, 1)
            if terminated or truncated:
                episodes.append(tuple(running[:, i]))
                running[:, i] = 0
        for name, values in zip(names[1:], zip(*[r[1:] for r in results])):
            out[name].append(np.stack(values))
    trajectory = {name: np.stack(values) for name, values in out.items()}
    return trajectory, np.stack(obs), episodes


def value(weights, obs):
    return ref.forward(ref.as64(weights)["critic"], obs)[0][..., 0]


@pytest.mark.parametrize("policy", ["soft", "sharp"])
@pytest.mark.parametrize("script", SCRIPTS)
def test_rollout_matches_step_by_step_reference(script, policy):
    import jax

    args = dataclasses.replace(load(script).Args(), num_envs=NUM_ENVS, num_steps=NUM_STEPS)
    weights = ref.random_weights(np.random.default_rng(2), 4, (64, 64), 2)
    if policy == "sharp":
        kernel, bias = weights["actor"][-1]
        weights["actor"][-1] = (kernel * SHARP, bias)
    env_inputs, first_obs, step = gymnasium_envs() if script in GYMNASIUM_SCRIPTS else gymnax_envs()
    batch, stats, last_obs, gae_args = adapter_for(script)(script, weights, args).rollout(
        *env_inputs, jax.random.key(4))
    values, rewards, terminated, truncated, last_value, final_values = gae_args
    actions = batch["actions"].reshape(NUM_STEPS, NUM_ENVS)
    expected, expected_last_obs, episodes = reference_rollout(first_obs, step, actions)
    ended = {"soft": expected["terminated"].any() and (expected["truncated"] & ~expected["terminated"]).any(),
             "sharp": (expected["terminated"] | expected["truncated"]).any()}  # it balances: time limits
    assert ended[policy], "the trajectory must hold the episode ends this test checks"

    # the environment: what each step saw, got and ended with
    np.testing.assert_allclose(batch["obs"].reshape(NUM_STEPS, NUM_ENVS, -1), expected["obs"], atol=1e-5)
    np.testing.assert_array_equal(rewards, expected["reward"])
    np.testing.assert_array_equal(terminated, expected["terminated"])
    np.testing.assert_array_equal(truncated, expected["truncated"])
    np.testing.assert_allclose(last_obs, expected_last_obs, atol=1e-5)
    assert stats["episodes"] == len(episodes)
    assert stats["episodic_return_sum"] == pytest.approx(sum(r for r, _ in episodes))
    assert stats["episodic_length_sum"] == pytest.approx(sum(n for _, n in episodes))

    # the network on those observations: log-probs of the chosen actions, values, and the value of
    # the final observation each truncated step bootstraps from
    logits = ref.forward(ref.as64(weights)["actor"], expected["obs"])[0]
    logp = np.take_along_axis(ref.log_softmax(logits), actions[..., None], -1).reshape(-1)
    float32_error = 1e-6 * np.abs(logits).max()  # float32 log-softmax of large logits
    np.testing.assert_allclose(batch["logprobs"], logp, rtol=1e-4, atol=1e-5 + float32_error)
    np.testing.assert_allclose(values, value(weights, expected["obs"]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(batch["values"], values.reshape(-1))
    np.testing.assert_allclose(last_value, value(weights, expected_last_obs), rtol=1e-5, atol=1e-5)
    bootstrapped = expected["truncated"] & ~expected["terminated"]
    np.testing.assert_allclose(final_values[bootstrapped], value(weights, expected["final_obs"])[bootstrapped],
                               rtol=1e-5, atol=1e-5)

    # GAE over the reference trajectory gives the batch's advantages and returns
    advantages, returns = ref.gae(value(weights, expected["obs"]), expected["reward"], expected["terminated"],
                                  expected["truncated"], value(weights, expected_last_obs),
                                  value(weights, expected["final_obs"]), args.gamma, args.gae_lambda)
    np.testing.assert_allclose(batch["advantages"], advantages.reshape(-1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(batch["returns"], returns.reshape(-1), rtol=1e-4, atol=1e-4)

    if policy == "sharp":  # each action is the one its own observation's logits call for
        decided = np.abs(logits[..., 0] - logits[..., 1]) > 30  # Gumbel noise beyond 30: p < 1e-13
        assert decided.mean() > 0.75
        np.testing.assert_array_equal(actions[decided], logits.argmax(-1)[decided])
