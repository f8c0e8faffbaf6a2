"""Proof that the CPU-environment scripts' envs are twins of the Gymnax ones: the classic-control
envs compute the same transitions from the same state (Gymnasium's, and EnvPool's), Breakout
steps alike in lockstep (its randomness is drawn only at reset, so the start state is copied
across), the other MinAtar games give the same return and length distributions under the same
random policy (their randomness is drawn in every step, differently in the two implementations),
and every twin has Gymnax's action set, observation size and time limit."""

import numpy as np
import pytest
from scipy.stats import ks_2samp
from helpers import GYMNASIUM_SCRIPTS, STATE_BOXES, load, random_state

STEPS = 300
NEVER_ENDS = ("Pendulum-v1",)
# Gymnax's MountainCarContinuous stops the car at the wall only in Gymnax's own way: Gymnasium zeroes a
# negative velocity at the left wall, Gymnax (by mistake) past the goal, where it then terminates.
# These transitions, told by Gymnasium's next observation, are skipped (and counted); all others agree.
KNOWN_DIFFERENCES = {"MountainCarContinuous-v0": lambda obs: obs[0] <= -1.2 or (obs[0] >= 0.45 and obs[1] < 0)}


def twins():
    return load(GYMNASIUM_SCRIPTS[0]).TWINS


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
    ended, differs = 0, KNOWN_DIFFERENCES.get(env_id, lambda obs: False)
    for t in range(STEPS):
        fields, gymnax_state = random_state(rng, gymnax_env, params, STATE_BOXES[env_id], t)
        env.reset(seed=t)  # a fresh episode: Gymnasium's CartPole pays nothing after a termination
        env.state = np.array(list(fields.values()), np.float64)
        space = env.action_space
        if isinstance(space, gym.spaces.Box):  # a continuous action anywhere in the bounds (both envs clip)
            action = rng.uniform(space.low, space.high).astype(np.float32)
        else:
            action = int(rng.integers(space.n))
        obs, reward, terminated, _, _ = env.step(action)
        g_obs, _, g_reward, g_terminated, _ = gymnax_step(jax.random.key(t), gymnax_state, action, params)
        if differs(obs):
            continue
        # float32 (Gymnax) against float64 (Gymnasium): Acrobot's fast joints differ by up to 1e-4,
        # Pendulum's and MountainCarContinuous's rewards (of the action's square) in the 6th digit
        np.testing.assert_allclose(np.asarray(g_obs), obs, rtol=2e-4, atol=1e-4, err_msg=f"{env_id} step {t}")
        assert float(g_reward) == pytest.approx(reward, rel=1e-5, abs=1e-6), (env_id, t, fields)
        assert bool(g_terminated) == terminated, (env_id, t, fields)
        ended += terminated
    if env_id not in NEVER_ENDS:
        assert 10 < ended < STEPS - 10, f"{ended} of {STEPS} steps ended an episode: both outcomes must be compared"


MUJOCO = ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5")  # no Gymnax twin: each runs as itself


@pytest.mark.parametrize("env_id", [e for e in twins() if e not in MUJOCO + load(GYMNASIUM_SCRIPTS[0]).ATARI])
def test_twins_have_gymnax_spaces_and_time_limits(env_id):
    import gymnax

    script = load(GYMNASIUM_SCRIPTS[0])
    gymnax_env, params = gymnax.make(env_id)
    envs = script.make_env(env_id, 2)
    try:
        space, gymnax_space = envs.single_action_space, gymnax_env.action_space(params)
        if script.continuous(envs):  # the same bounds, which env_step clips the sampled action to
            assert space.shape == gymnax_space.shape
            np.testing.assert_array_equal(space.low, gymnax_space.low)
            np.testing.assert_array_equal(space.high, gymnax_space.high)
        else:
            assert space.n == gymnax_space.n
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


def test_mujoco_tasks_are_themselves_with_flat_observations():
    """The MuJoCo tasks run as Gymnasium registers them: a flat observation, a bounded Box action
    space and a 1,000-step time limit, and no Gymnax id refers to them."""
    import gymnax

    script = load(GYMNASIUM_SCRIPTS[0])
    for env_id in MUJOCO:
        assert script.TWINS[env_id] == (env_id, {}) and env_id not in gymnax.registered_envs
        envs = script.make_env(env_id, 2)
        try:
            obs, _ = envs.reset(seed=0)
            assert obs.ndim == 2 and script.continuous(envs), env_id
            assert np.isfinite(envs.single_action_space.low).all() and envs.envs[0].spec.max_episode_steps == 1000
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


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1", "MountainCar-v0", "Pendulum-v1", "MountainCarContinuous-v0"])
def test_envpool_twins_step_alike(env_id):
    """EnvPool's envs (whose state cannot be set) against Gymnasium's stepped from the state each
    observation gives: the next observation, reward and termination, over 8 envs x 300 steps."""
    import gymnasium as gym

    script = load(GYMNASIUM_SCRIPTS[0])
    envs = script.make_env(env_id, 8, "envpool", seed=0)
    single = gym.make(env_id).unwrapped
    to_state = {  # Acrobot observes the cos and sin of its joint angles
        "Acrobot-v1": lambda o: np.array([np.arctan2(o[1], o[0]), np.arctan2(o[3], o[2]), o[4], o[5]]),
        "Pendulum-v1": lambda o: np.array([np.arctan2(o[1], o[0]), o[2]]),
    }.get(env_id, lambda o: np.asarray(o, np.float64))
    space = envs.single_action_space
    rng = np.random.default_rng(0)
    obs, _ = envs.reset()
    resetting, ended = np.zeros(8, bool), 0
    for t in range(300):
        action = (rng.uniform(space.low, space.high, size=(8, *space.shape)).astype(np.float32)
                  if isinstance(space, gym.spaces.Box) else rng.integers(space.n, size=8).astype(np.int32))
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        for i in np.flatnonzero(~resetting):  # (a reset step draws a new start state: nothing to compare)
            single.state = to_state(obs[i])
            if hasattr(single, "steps_beyond_terminated"):
                single.steps_beyond_terminated = None
            o, r, term, _, _ = single.step(action[i] if action.ndim > 1 else int(action[i]))
            if env_id == "Pendulum-v1" and abs(o[2]) >= 8:  # EnvPool's Pendulum moves by the speed
                continue  # before the limit clips it (old Gym's order), Gymnasium's by the clipped speed
            np.testing.assert_allclose(next_obs[i], o, rtol=1e-4, atol=1e-4, err_msg=f"{env_id} step {t} env {i}")
            assert (reward[i], terminated[i] or truncated[i] and term) == (pytest.approx(r, rel=1e-5), term), (env_id, t, i)
            ended += term
        obs, resetting = next_obs, terminated | truncated
    envs.close()
    if env_id == "CartPole-v1":  # (random actions seldom end Acrobot's episodes, never MountainCar's)
        assert ended > 8, f"{ended} terminations: both outcomes must be compared"


def test_breakout_steps_alike_in_lockstep():
    """MinAtar's Breakout draws randomness only at reset (where the ball starts): with each start
    state copied into Gymnax's, 2,000 random actions give the same observations, rewards and
    terminations in both."""
    import gymnasium as gym
    import gymnax
    import jax
    import jax.numpy as jnp

    script = load(GYMNASIUM_SCRIPTS[0])
    script.make_env("Breakout-MinAtar", 1).close()  # registers the MinAtar twins
    twin, kwargs = script.TWINS["Breakout-MinAtar"]
    env = gym.make(twin, **kwargs).unwrapped
    gymnax_env, params = gymnax.make("Breakout-MinAtar")
    gymnax_step = jax.jit(gymnax_env.step_env)  # the transition alone, without auto-reset
    template = gymnax_env.reset_env(jax.random.key(0), params)[1]

    def copied(game):  # minatar's game state as Gymnax's
        return template.replace(ball_y=jnp.array(game.ball_y), ball_x=jnp.array(game.ball_x),
                                ball_dir=jnp.array(game.ball_dir), pos=game.pos, brick_map=jnp.asarray(game.brick_map),
                                strike=game.strike, last_y=jnp.array(game.last_y), last_x=jnp.array(game.last_x),
                                time=0, terminal=False)

    rng = np.random.default_rng(0)
    env.reset(seed=0)
    state, rewards, episodes = copied(env.game.env), 0.0, 0
    for t in range(2000):
        action = int(rng.integers(env.action_space.n))
        obs, reward, terminated, _, _ = env.step(action)
        g_obs, state, g_reward, g_done, _ = gymnax_step(jax.random.key(t), state, action, params)
        np.testing.assert_array_equal(np.asarray(g_obs), obs, err_msg=f"step {t}")
        assert (float(g_reward), bool(g_done)) == (reward, terminated), t
        rewards += reward
        if terminated:
            env.reset()
            state, episodes = copied(env.game.env), episodes + 1
    assert episodes > 20 and rewards > 20, "bricks hit and balls lost: both must be compared"


@pytest.mark.parametrize("env_id", ["Asterix-MinAtar", "Freeway-MinAtar", "Seaquest-MinAtar", "SpaceInvaders-MinAtar"])
def test_minatar_twins_have_the_same_episode_distributions(env_id):
    """Under the uniform random policy, 300 episodes of each implementation (cut at 500 steps):
    a two-sample Kolmogorov-Smirnov test of returns and of lengths detects no difference at the
    0.1% level. This shows no gross difference, not step-by-step equality (docs/method.md)."""
    import gymnasium as gym
    import gymnax
    import jax

    episodes, cut = 300, 500
    script = load(GYMNASIUM_SCRIPTS[0])
    script.make_env(env_id, 1).close()
    twin, kwargs = script.TWINS[env_id]
    env = gym.make(twin, **{**kwargs, "max_episode_steps": cut})
    rng = np.random.default_rng(0)
    cpu = []
    for episode in range(episodes):
        env.reset(seed=episode)
        total, length, done = 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(int(rng.integers(env.action_space.n)))
            total, length, done = total + reward, length + 1, terminated or truncated
        cpu.append((total, length))

    gymnax_env, params = gymnax.make(env_id)
    n = gymnax_env.action_space(params).n

    @jax.jit
    def play(key):  # one episode per key, cut at 500 steps: (return, length)
        def step(carry, key):
            state, total, length, done = carry
            act_key, step_key = jax.random.split(key)
            _, state, reward, ended, _ = gymnax_env.step_env(step_key, state, jax.random.randint(act_key, (), 0, n), params)
            return (state, total + reward * ~done, length + ~done, done | ended), None

        state = gymnax_env.reset_env(key, params)[1]
        (_, total, length, _), _ = jax.lax.scan(step, (state, 0.0, 0, False), jax.random.split(key, cut))
        return total, length

    totals, lengths = jax.vmap(play)(jax.random.split(jax.random.key(0), episodes))
    for name, ours, theirs in (("return", [r for r, _ in cpu], totals), ("length", [n for _, n in cpu], lengths)):
        if np.ptp(ours) == 0 and np.ptp(np.asarray(theirs)) == 0:  # (Freeway's episodes all reach the cut)
            assert ours[0] == theirs[0], (env_id, name)
            continue
        p = ks_2samp(ours, np.asarray(theirs)).pvalue
        assert p > 1e-3, f"{env_id}: {name} distributions differ (KS p = {p:.2g})"


@pytest.mark.parametrize("env_id,nq", [("HalfCheetah-v5", 9), ("Hopper-v5", 6), ("Walker2d-v5", 9)])
def test_envpool_mujoco_tasks_step_alike(env_id, nq):
    """EnvPool's MuJoCo tasks (its own build of the engine) against Gymnasium's, set to the state each
    observation gives (the joint positions but the x, which no force depends on, and the velocities):
    the next observation, reward and termination, over 8 envs x 300 random steps, within 1e-6 (the
    engines agree far closer); Hopper and Walker2d clip their observed velocities at 10, so such a state is not compared."""
    import gymnasium as gym

    script = load(GYMNASIUM_SCRIPTS[0])
    envs = script.make_env(env_id, 8, "envpool", seed=0)
    single = gym.make(script.TWINS[env_id][0]).unwrapped
    single.reset(seed=0)
    rng = np.random.default_rng(0)
    obs, _ = envs.reset()
    resetting, compared, ended = np.zeros(8, bool), 0, 0
    for t in range(300):
        action = rng.uniform(-1, 1, size=(8, *envs.single_action_space.shape)).astype(np.float32)
        next_obs, reward, terminated, truncated, _ = envs.step(action)
        for i in np.flatnonzero(~resetting):
            qpos, qvel = np.concatenate([[0.0], obs[i][:nq - 1]]), obs[i][nq - 1:]
            if env_id != "HalfCheetah-v5" and np.abs(qvel).max() >= 10:
                continue
            single.set_state(qpos, qvel)
            o, r, term, _, _ = single.step(action[i].astype(np.float64))
            np.testing.assert_allclose(next_obs[i], o, rtol=1e-6, atol=1e-6, err_msg=f"{env_id} step {t} env {i}")
            assert (r, term) == (pytest.approx(reward[i], abs=1e-5), bool(terminated[i])), (env_id, t, i)
            compared, ended = compared + 1, ended + term
        obs, resetting = next_obs, terminated | truncated
    envs.close()
    assert compared > 400 and (ended > 2 or env_id == "HalfCheetah-v5"), (compared, ended)  # both outcomes
