"""Proof that the envs in torch (torch_envs.py: every torch script's --torch-env, one module) are Gymnax's
envs:
- one transition: from a batch of random states set into both, the same random action gives the same
  next state, observation, reward and termination;
- whole episodes: the vector steps (a script's env_step with Gymnax, TorchEnv.step with the torch env),
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
    t_state, t_reward, t_terminated = env.dynamics(torch.from_numpy(rows), torch.from_numpy(actions))
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
        norm = load("torch_envs.py").Normalizer.start(physics.shape[1], len(physics), stats)._replace(
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
    _, t_state = env.reset(n, env.normalizer(n) if normalize else None)
    ended = np.zeros(2, int)
    for t in range(steps):
        t_state = as_torch_state(m, state, env_id, t_state)
        actions = random_actions(rng, env.action_space(params), n, spread=1.5)
        state, out = step(state, jnp.asarray(actions))
        t_state, t_out = env.step(t_state, torch.from_numpy(actions), params, gamma)
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
    t_obs, _ = env.reset(n)
    obs, _ = jax.vmap(env.gymnax.reset, (0, None))(jax.random.split(jax.random.key(0), n), params)
    t_obs, obs = t_obs.numpy(), np.asarray(obs)
    for i in range(obs.shape[1]):
        if np.ptp(obs[:, i]) == 0:  # (MountainCar's cars start at rest)
            np.testing.assert_array_equal(t_obs[:, i], obs[:, i])
            continue
        p = ks_2samp(t_obs[:, i], obs[:, i]).pvalue
        assert p > 1e-3, f"{env_id} observation entry {i}: reset distributions differ (KS p = {p:.2g})"


def test_torch_normalizer_keeps_the_jax_statistics():
    """torch_envs.Normalizer, given what ppo_torch.py's Normalizer is given (observations, rewards, terminations), keeps
    the same running statistics and returns the same scaled values."""
    import jax.numpy as jnp
    import torch

    m, rng = load(SCRIPT), np.random.default_rng(2)
    norm, t_norm = m.Normalizer.start(3, 8), load("torch_envs.py").Normalizer.start(3, 8)
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


TORCH_ENV_SCRIPTS = ["ppo_torch.py", "ppo_torch_compile.py", "ppo_torch_agents.py", "dqn_torch.py",
                     "dqn_torch_compile.py", "td3_torch.py", "td3_torch_compile.py", "sac_torch.py", "sac_torch_compile.py"]


def test_every_torch_script_steps_the_one_module():
    """The envs in torch are written once, in torch_envs.py: every script with --torch-env has the flag, defines
    no formula of its own, and imports the module inside make_torch_env only (a copy runs without it)."""
    import ast

    from helpers import ROOT

    formulas = set(load("torch_envs.py").ENVS) | {"cartpole", "acrobot", "pendulum", "mountain_car", "TorchEnv",
                                                  "TorchNormalizer", "torch_env_step", "TORCH_ENVS"}
    with_flag = sorted(p.name for p in ROOT.glob("*.py") if "torch_env: bool" in p.read_text())
    assert with_flag == sorted(TORCH_ENV_SCRIPTS)
    for script in TORCH_ENV_SCRIPTS:
        tree = ast.parse((ROOT / script).read_text())
        defined = {n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))}
        assert not defined & formulas, (script, defined & formulas)
        importing = [f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef) and any(
            isinstance(n, ast.Import) and any(a.name == "torch_envs" for a in n.names) for n in ast.walk(f))]
        at_top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom)) and "torch_envs" in ast.dump(n)]
        assert importing == ["make_torch_env"] and not at_top, (script, importing)


@pytest.mark.parametrize("script", ["ppo_torch.py", "td3_torch_compile.py"])
def test_a_script_copied_alone_runs_and_says_what_torch_env_needs(tmp_path, script):
    """A user's copy of one torch script, without torch_envs.py beside it: asked for --torch-env it says so in
    one line and exits 2, before it writes anything; without the flag (PPO's) it trains on Gymnax."""
    import shutil
    import subprocess
    import sys

    from helpers import ROOT

    shutil.copy(ROOT / script, tmp_path / script)
    run = lambda *flags: subprocess.run([sys.executable, script, *flags, "--log-dir", "runs"], cwd=tmp_path,
                                        capture_output=True, text=True, timeout=600)
    env_id = "CartPole-v1" if script.startswith("ppo") else "Pendulum-v1"
    refused = run("--torch-env", "--env-id", env_id)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "--torch-env needs torch_envs.py" in refused.stderr and not (tmp_path / "runs").exists()
    if script == "ppo_torch.py":
        trained = run(*TINY)
        assert trained.returncode == 0, trained.stderr[-2000:]
        (run_dir,) = (tmp_path / "runs").iterdir()
        assert (run_dir / "summary.json").exists() and TAGS <= set(scalars(run_dir))


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
