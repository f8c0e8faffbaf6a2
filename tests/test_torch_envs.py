"""Proof that the envs in torch (--torch-env of ppo_torch.py and ppo_torch_compile.py, one text in both)
are Gymnax's envs:
- one transition: from a batch of random states set into both, the same random action gives the same
  next state, observation, reward and termination;
- whole episodes: the scripts' vector steps (env_step with Gymnax, torch_env_step with the torch env),
  side by side over random actions with a short time limit, the torch env's state set each step to
  Gymnax's: the same rewards, terminated and truncated flags, final observations, episode returns and
  lengths, the same observations where no episode ended, and a fresh state in Gymnax's start box
  where one did; with normalization on, the same scaled rewards and statistics;
- resets: drawn from Gymnax's start distribution (a two-sample Kolmogorov-Smirnov test per entry);
  the streams differ (JAX's keys, torch's generator), so a reset state cannot be held equal.
Both compute in float32; XLA's and torch's sin, cos and remainder may differ in the last bits, hence
the tolerances."""

from functools import partial

import numpy as np
import pytest
from scipy.stats import ks_2samp
from helpers import STATE_BOXES, TAGS, TINY, load, read_json, run_ok, scalars

ENVS = list(STATE_BOXES)  # the envs in torch: CartPole, Acrobot, MountainCar, Pendulum, MountainCarContinuous
SCRIPT = "ppo_torch.py"
TIGHT = dict(rtol=1e-5, atol=1e-5)


def fields(env_id) -> list[str]:
    """Gymnax's state fields in the torch state vector's order."""
    return list(STATE_BOXES[env_id][0])


def torch_env(env_id, **params):
    m = load(SCRIPT)
    env, env_params = m.make_torch_env(env_id, "cpu")
    return m, env, env_params.replace(**params)


def random_actions(rng, space, n, spread=1.0):
    """n uniform actions; a continuous one in spread x its bounds (the vector steps clip it)."""
    if hasattr(space, "n"):
        return rng.integers(space.n, size=n).astype(np.int32)
    return (rng.uniform(space.low, space.high, size=(n, *space.shape)) * spread).astype(np.float32)


@pytest.mark.parametrize("env_id", ENVS)
def test_one_transition_from_the_same_state(env_id):
    import jax
    import jax.numpy as jnp
    import torch

    n, rng = 1000, np.random.default_rng(0)
    _, env, params = torch_env(env_id)
    gymnax_env, boxes, names = env.gymnax, STATE_BOXES[env_id], fields(env_id)
    rows = np.array([[rng.uniform(*(r if isinstance(r, tuple) else (-r, r))) for r in boxes[i % len(boxes)].values()]
                     for i in range(n)], np.float32)
    keys = jax.random.split(jax.random.key(0), n)
    state = jax.vmap(gymnax_env.reset_env, (0, None))(keys, params)[1]
    state = state.replace(**{f: jnp.asarray(rows[:, i]) for i, f in enumerate(names)})
    live = ~np.asarray(jax.vmap(gymnax_env.is_terminal, (0, None))(state, params))  # an episode still running
    actions = random_actions(rng, env.action_space(params), n)
    obs, next_state, reward, terminated, _ = jax.vmap(gymnax_env.step_env, (0, 0, 0, None))(keys, state, actions, params)
    t_state, t_reward, t_terminated = env.step(torch.from_numpy(rows), torch.from_numpy(actions))
    gymnax_next = np.stack([np.asarray(getattr(next_state, f)) for f in names], -1)
    np.testing.assert_allclose(t_state.numpy()[live], gymnax_next[live], **TIGHT, err_msg="next state")
    np.testing.assert_allclose(env.observe(t_state).numpy()[live], np.asarray(obs)[live], **TIGHT, err_msg="obs")
    np.testing.assert_allclose(t_reward.numpy()[live], np.asarray(reward)[live], **TIGHT, err_msg="reward")
    np.testing.assert_array_equal(t_terminated.numpy()[live], np.asarray(terminated)[live], err_msg="terminated")
    if env_id != "Pendulum-v1":  # (it never terminates)
        assert 20 < np.asarray(terminated)[live].sum() < live.sum() - 20, "both outcomes must be compared"


def as_torch_state(m, state, env_id, torch_state):
    """The torch env's EnvState holding what a Gymnax EnvState holds (its physics, time, statistics)."""
    import torch

    physics = torch.tensor(np.stack([np.asarray(getattr(state.env, f)) for f in fields(env_id)], -1))
    norm = None
    if state.norm is not None:
        stats = {part: {k: torch.tensor(np.asarray(v)) for k, v in getattr(state.norm, part)._asdict().items()}
                 for part in ("obs", "reward")}
        norm = m.TorchNormalizer.start(physics.shape[1], len(physics), stats)._replace(
            discounted=torch.tensor(np.asarray(state.norm.discounted)))
    return torch_state._replace(env=(physics, torch.tensor(np.asarray(state.env.time))), norm=norm,
                                episode_return=torch.tensor(np.asarray(state.episode_return)),
                                episode_length=torch.tensor(np.asarray(state.episode_length)))


CASES = [(e, False) for e in ENVS] + [("Pendulum-v1", True), ("MountainCarContinuous-v0", True)]


@pytest.mark.parametrize("env_id,normalize", CASES, ids=[f"{e}{' normalized' if n else ''}" for e, n in CASES])
def test_vector_steps_alike_over_whole_episodes(env_id, normalize):
    import jax
    import jax.numpy as jnp
    import torch

    n, steps, limit, gamma = 16, 200, 25, 0.99
    m, env, params = torch_env(env_id, max_steps_in_episode=limit)
    gymnax_env, rng = env.gymnax, np.random.default_rng(1)
    dim = env.observation_space(params).shape[0]
    norm = m.Normalizer.start(dim, n) if normalize else None
    _, state = m.env_reset(jax.random.key(0), gymnax_env, params, n, norm)
    step = jax.jit(partial(m.env_step, env=gymnax_env, env_params=params, num_envs=n, gamma=gamma))
    _, t_state = m.torch_env_reset(env, n, m.TorchNormalizer.start(dim, n) if normalize else None)
    ended = np.zeros(2, int)
    for t in range(steps):
        t_state = as_torch_state(m, state, env_id, t_state)
        actions = random_actions(rng, env.action_space(params), n, spread=1.5)
        state, out = step(state, jnp.asarray(actions))
        t_state, t_out = m.torch_env_step(t_state, torch.from_numpy(actions), env, params, gamma)
        out, t_out = {k: np.asarray(v) for k, v in out._asdict().items()}, {k: v.numpy() for k, v in t_out._asdict().items()}
        done = out["terminated"] | out["truncated"]
        for name in ("terminated", "truncated"):
            np.testing.assert_array_equal(t_out[name], out[name], err_msg=f"{name}, step {t}")
        compared = ("reward", "episode_return", "episode_length") + (("obs", "final_obs") if not done.any() else ())
        for name in compared:
            np.testing.assert_allclose(t_out[name], out[name], **TIGHT, err_msg=f"{name}, step {t}")
        if not normalize:  # an ended episode: its final observation, and a fresh one in the start box
            np.testing.assert_allclose(t_out["final_obs"], out["final_obs"], **TIGHT, err_msg=f"final_obs, step {t}")
            np.testing.assert_allclose(t_out["obs"][~done], out["obs"][~done], **TIGHT, err_msg=f"obs, step {t}")
            fresh = t_state.env[0][torch.from_numpy(done)]
            assert ((fresh >= env.low) & (fresh <= env.high)).all(), f"a fresh state outside the start box, step {t}"
            np.testing.assert_array_equal(t_out["obs"][done], env.observe(fresh).numpy())
        np.testing.assert_array_equal(t_state.env[1].numpy(), np.asarray(state.env.time), err_msg=f"time, step {t}")
        for name in ("episode_return", "episode_length"):  # the running episodes' statistics
            np.testing.assert_allclose(getattr(t_state, name).numpy(), np.asarray(getattr(state, name)), **TIGHT)
        ended += out["terminated"].sum(), out["truncated"].sum()
    assert ended[1] >= 5, f"{ended[1]} truncations: the time limit must be reached"
    if env_id == "CartPole-v1":  # (random actions seldom end the others' episodes before the limit)
        assert ended[0] >= 5 * n, f"{ended[0]} terminations"


@pytest.mark.parametrize("env_id", ENVS)
def test_resets_drawn_from_gymnax_start_distribution(env_id):
    import jax
    import torch

    n = 2000
    m, env, params = torch_env(env_id)
    torch.manual_seed(0)
    t_obs, _ = m.torch_env_reset(env, n)
    obs, _ = jax.vmap(env.gymnax.reset, (0, None))(jax.random.split(jax.random.key(0), n), params)
    t_obs, obs = t_obs.numpy(), np.asarray(obs)
    for i in range(obs.shape[1]):
        if np.ptp(obs[:, i]) == 0:  # (MountainCar's cars start at rest)
            np.testing.assert_array_equal(t_obs[:, i], obs[:, i])
            continue
        p = ks_2samp(t_obs[:, i], obs[:, i]).pvalue
        assert p > 1e-3, f"{env_id} observation entry {i}: reset distributions differ (KS p = {p:.2g})"


def test_torch_normalizer_keeps_the_jax_statistics():
    """TorchNormalizer, given what Normalizer is given (observations, rewards, terminations), keeps
    the same running statistics and returns the same scaled values."""
    import jax.numpy as jnp
    import torch

    m, rng = load(SCRIPT), np.random.default_rng(2)
    norm, t_norm = m.Normalizer.start(3, 8), m.TorchNormalizer.start(3, 8)
    for t in range(50):
        obs = (rng.normal(size=(8, 3)) * [1.0, 5.0, 0.1] + [0.0, 3.0, -1.0]).astype(np.float32)
        reward, terminated = rng.normal(size=8).astype(np.float32), rng.random(8) < 0.1
        norm, scaled = norm.observe(jnp.asarray(obs), learn=t % 5 != 0)
        t_norm, t_scaled = t_norm.observe(torch.from_numpy(obs), learn=t % 5 != 0)
        np.testing.assert_allclose(t_scaled.numpy(), np.asarray(scaled), rtol=1e-5, atol=1e-5)
        norm, scaled = norm.scale(jnp.asarray(reward), jnp.asarray(terminated), 0.99)
        t_norm, t_scaled = t_norm.scale(torch.from_numpy(reward), torch.from_numpy(terminated), 0.99)
        np.testing.assert_allclose(t_scaled.numpy(), np.asarray(scaled), rtol=1e-5, atol=1e-5)
    for part in ("obs", "reward"):
        for name, value in getattr(norm, part)._asdict().items():
            np.testing.assert_allclose(getattr(t_norm, part)._asdict()[name].numpy(), np.asarray(value), rtol=1e-5)


def test_torch_env_is_the_same_text_in_every_torch_script():
    """ppo_torch_compile.py and ppo_torch_agents.py step the very env ppo_torch.py steps: the block from its
    marker to the end of torch_env_step."""
    from helpers import ROOT

    def block(script):
        text = (ROOT / script).read_text()
        return text[text.index("# The envs in torch (--torch-env)"):text.index("\n\n\n", text.index("def torch_env_step"))]

    assert block("ppo_torch.py") == block("ppo_torch_compile.py") == block("ppo_torch_agents.py")


@pytest.mark.parametrize("script", ["dqn_torch.py", "dqn_torch_compile.py", "td3_torch.py", "sac_torch.py"])
def test_the_offpolicy_scripts_step_ppos_torch_envs(script):
    """The off-policy scripts' --torch-env (DQN's discrete envs, TD3's and SAC's continuous ones): the formulas are
    ppo_torch.py's text, and their vector step (no normalization) gives what ppo_torch.py's does over whole
    episodes from the same states and draws."""
    import inspect

    import torch

    ppo, mine = load(SCRIPT), load(script)
    formulas = [name for name in ("cartpole", "acrobot_dsdt", "wrap", "acrobot", "mountain_car",
                                  "mountain_car_continuous", "pendulum", "cos_sin") if hasattr(mine, name)]
    assert len(formulas) >= 3
    for name in formulas:
        assert inspect.getsource(getattr(mine, name)) == inspect.getsource(getattr(ppo, name)), name
    for env_id in mine.TORCH_ENVS:
        (p_env, params), (m_env, _) = ppo.make_torch_env(env_id, "cpu"), mine.make_torch_env(env_id, "cpu")
        params = params.replace(max_steps_in_episode=50)  # truncations too
        space = p_env.action_space(params)
        torch.manual_seed(0)
        _, p_state = ppo.torch_env_reset(p_env, 64)
        torch.manual_seed(0)
        _, m_state = mine.torch_env_reset(m_env, 64)
        rng, ended = np.random.default_rng(0), 0
        for t in range(300):
            action = torch.from_numpy(rng.integers(space.n, size=64).astype(np.int32) if hasattr(space, "n") else
                                      rng.uniform(space.low, space.high, (64, 1)).astype(np.float32))
            torch.manual_seed(t)
            p_state, p_out = ppo.torch_env_step(p_state, action, p_env, params)
            torch.manual_seed(t)
            m_state, m_out = mine.torch_env_step(m_state, action, m_env, params)
            for field in m_out._fields:
                assert torch.equal(getattr(m_out, field), getattr(p_out, field)), (env_id, t, field)
            ended += int((m_out.terminated | m_out.truncated).sum())
        assert ended > 64, env_id  # episodes ended and started again


def test_a_torch_env_run_names_itself_and_repeats(tmp_path):
    """From the command line: the variant and the flag in run.json, every tag, and the same seed twice
    gives the same metrics (torch's generator draws the resets as it draws the actions)."""
    first, second = (run_ok(SCRIPT, *TINY, "--torch-env", log_dir=tmp_path / name) for name in "ab")
    info = read_json(first / "run.json")
    assert info["variant"] == "torch-torchenv" and info["args"]["torch_env"] is True
    ran, again = scalars(first), scalars(second)
    assert TAGS <= set(ran)
    for tag in ran:
        if not tag.startswith(("time/", "charts/SPS", "memory/")):
            assert ran[tag] == again[tag], tag
