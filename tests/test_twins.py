"""Proof that the CPU-environment scripts' envs are twins of the Gymnax ones: the classic-control
envs compute the same transitions from the same state, and every twin has Gymnax's action set,
observation size and time limit. (The MinAtar games draw their randomness differently in the
two implementations, so their transitions cannot be compared step by step; docs/method.md says so.)"""

import numpy as np
import pytest
from helpers import GYMNASIUM_SCRIPTS, load

STEPS = 300
# where the start states are drawn: boxes of the Gymnasium state vector's entries (in Gymnax's
# EnvState names), wide enough that many steps end the episode (pole down, cart out, goal reached)
STATE_BOXES = {
    "CartPole-v1": [{"x": 2.4, "x_dot": 2.0, "theta": 0.21, "theta_dot": 2.0}],
    "Acrobot-v1": [{"joint_angle1": np.pi, "joint_angle2": np.pi, "velocity_1": 4 * np.pi, "velocity_2": 9 * np.pi}],
    "MountainCar-v0": [{"position": (-1.2, 0.5), "velocity": 0.07},  # and at the goal, slow or not
                       {"position": (0.4, 0.5), "velocity": 0.07}, {"position": (0.48, 0.5), "velocity": 0.02}],
}


def twins():
    return load(GYMNASIUM_SCRIPTS[0]).TWINS


def random_state(rng, gymnax_env, params, boxes, t):
    """A state from the t-th box (in turn) that has not already ended its episode."""
    import jax

    while True:
        box = boxes[t % len(boxes)]
        fields = {f: np.float32(rng.uniform(*(r if isinstance(r, tuple) else (-r, r)))) for f, r in box.items()}
        state = gymnax_env.reset_env(jax.random.key(t), params)[1].replace(**fields, time=0)
        if not gymnax_env.is_terminal(state, params):
            return fields, state


@pytest.mark.parametrize("env_id", STATE_BOXES)
def test_classic_control_twins_step_alike(env_id):
    """From STEPS random states, set into both envs, the same random action gives the same
    observation, reward and termination."""
    import gymnasium as gym
    import gymnax
    import jax

    gymnax_env, params = gymnax.make(env_id)
    gymnax_step = jax.jit(gymnax_env.step_env)  # the transition alone, without auto-reset
    name, kwargs = twins()[env_id]
    env = gym.make(name, **kwargs).unwrapped
    rng = np.random.default_rng(0)
    ended = 0
    for t in range(STEPS):
        fields, gymnax_state = random_state(rng, gymnax_env, params, STATE_BOXES[env_id], t)
        env.reset(seed=t)  # a fresh episode: Gymnasium's CartPole pays nothing after a termination
        env.state = np.array(list(fields.values()), np.float64)
        action = int(rng.integers(env.action_space.n))
        obs, reward, terminated, _, _ = env.step(action)
        g_obs, _, g_reward, g_terminated, _ = gymnax_step(jax.random.key(t), gymnax_state, action, params)
        # float32 (Gymnax) against float64 (Gymnasium): Acrobot's fast joints differ by up to 1e-4
        np.testing.assert_allclose(np.asarray(g_obs), obs, rtol=2e-4, atol=1e-4, err_msg=f"{env_id} step {t}")
        assert float(g_reward) == reward, (env_id, t, fields)
        assert bool(g_terminated) == terminated, (env_id, t, fields)
        ended += terminated
    assert 10 < ended < STEPS - 10, f"{ended} of {STEPS} steps ended an episode: both outcomes must be compared"


@pytest.mark.parametrize("env_id", list(twins()))
def test_twins_have_gymnax_spaces_and_time_limits(env_id):
    import gymnax

    script = load(GYMNASIUM_SCRIPTS[0])
    gymnax_env, params = gymnax.make(env_id)
    envs = script.make_env(env_id, 2)
    try:
        assert envs.single_action_space.n == gymnax_env.action_space(params).n
        obs, _ = envs.reset(seed=0)
        assert obs[0].size == np.prod(gymnax_env.observation_space(params).shape)
        assert obs.shape[1:] == tuple(gymnax_env.observation_space(params).shape)
        assert envs.envs[0].spec.max_episode_steps == params.max_steps_in_episode
        if env_id.endswith("-MinAtar"):  # the same actions behind the indices, and no sticky actions
            game = envs.envs[0].unwrapped
            assert game.action_set == gymnax_env.action_set.tolist()
            assert game.game.sticky_action_prob == 0.0
    finally:
        envs.close()


def test_time_limit_truncates_alike():
    """A CartPole that never falls (its state held upright) truncates on the same step in both."""
    import gymnax
    import jax

    script = load(GYMNASIUM_SCRIPTS[0])
    gymnax_env, params = gymnax.make("CartPole-v1")
    envs = script.make_env("CartPole-v1", 1)
    envs.reset(seed=0)
    state = gymnax_env.reset_env(jax.random.key(0), params)[1]
    gymnax_step = jax.jit(gymnax_env.step)
    for t in range(params.max_steps_in_episode):
        envs.envs[0].unwrapped.state = np.zeros(4)
        state = state.replace(x=0.0, x_dot=0.0, theta=0.0, theta_dot=0.0)
        _, _, terminated, truncated, _ = envs.step(np.array([t % 2]))
        _, state, _, g_terminated, g_truncated, _ = gymnax_step(jax.random.key(t), state, t % 2, params)
        assert (bool(truncated[0]), bool(terminated[0])) == (bool(g_truncated), bool(g_terminated)), t
    assert truncated[0] and not terminated[0]
    envs.close()
