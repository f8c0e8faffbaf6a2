"""Proofs of what other files take on trust (issue 89, "Proofs of the newest paths"):
- one text: where a test leaves a script out, or runs one script for several, because the code is another
  script's, the two scripts' texts of that code are one (as tests/test_craftax.py holds the Gymnax env helpers);
- the replay buffers: every off-policy script's buffer (DQN, TD3, SAC; JAX, eager and compiled torch, the
  CPU-env twins; on the device and in the host's NumPy buffer), after k rows written of a larger capacity,
  draws through its own sample() and its own random stream only written rows, each of them, about equally;
- the env in torch's own state in a run: ppo_torch.py, ppo_torch_compile.py (compiled: the policy and the env
  step as one graph) and ppo_torch_agents.py with --torch-env on Pendulum (observations and rewards
  normalized), each trained in this process with the same seed: after every iteration the state each carries
  (the normalizer's observation and reward statistics and discounted returns, the episode statistics, the
  physics) is the eager script's, the statistics' counts grew by the env steps taken, and they moved from a
  fresh start's;
- the compiled off-policy scripts' env in torch: dqn/td3/sac_torch_compile.py --torch-env (the env's step compiled
  beside the policy step), run through main() in their default compile mode and with --compile-mode none: after
  every iteration the env state (physics, time steps, episode returns and lengths; no normalizer), the
  observations and torch's generator are the eager path's, and the episode statistics follow the time steps."""

import ast

import numpy as np
import pytest
from helpers import DQN_SCRIPTS, ROOT, SAC_SCRIPTS, TD3_SCRIPTS, TINY_ARGS, load

OFFPOLICY = DQN_SCRIPTS + TD3_SCRIPTS + SAC_SCRIPTS
# the scripts with --torch-env (tests/test_torch_envs.py checks this list against the flag)
TORCH_ENV_SCRIPTS = ["ppo_torch.py", "ppo_torch_compile.py", "ppo_torch_agents.py", "dqn_torch.py",
                     "dqn_torch_compile.py", "td3_torch.py", "td3_torch_compile.py", "sac_torch.py", "sac_torch_compile.py"]


# %% one text where a test takes one script's code for another's
def definition(script: str, name: str) -> str:
    """The source of a top-level function or class of a script."""
    source = (ROOT / script).read_text()
    (node,) = [n for n in ast.parse(source).body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]
    return ast.get_source_segment(source, node)


SHARED = [
    # tests/test_dqn.py's ring-buffer test leaves dqn_torch_compile.py out: "the compiled one's is dqn_torch.py's"
    ("Buffer", ["dqn_torch.py", "dqn_torch_compile.py"]),
    # tests/test_torch_envs.py makes its envs with ppo_torch.py's make_torch_env, and copies two of the nine
    # scripts alone to see it refuse --torch-env without torch_envs.py: every script's is that one text
    ("make_torch_env", TORCH_ENV_SCRIPTS),
    # tests/test_saving.py saves and reloads the env in torch's statistics (torch tensors) with ppo_torch.py alone
    *((name, ["ppo_torch.py", "ppo_torch_compile.py"]) for name in ("save_model", "read_model")),
]


@pytest.mark.parametrize("name, scripts", SHARED, ids=[f"{n}-{len(s)}" for n, s in SHARED])
def test_code_one_script_stands_for_is_one_text(name, scripts):
    first, *others = scripts
    for script in others:
        assert definition(script, name) == definition(first, name), f"{script}'s {name} differs from {first}'s"


# %% replay buffers: only written rows
CAPACITY, OBS_DIM, ACTION_DIM, SEED = 64, 3, 2, 7
ADDS = [4, 4, 4, 4, 4, 1]  # k = 21 rows written, as num_envs rows a step (and one), of 64
SAMPLES, BATCH = 48, 256  # 12,288 draws: about 585 a row, a standard deviation near 24


def buffer_kinds(script: str) -> list[str]:
    """The buffers a script samples from: on the device (JAX's arrays, torch's tensors) and, where it has one, in
    the host's NumPy arrays (torch's --buffer host, the Linen CPU-env scripts' HostBuffer)."""
    return ["device", "host"] if "torch" in script or "gymnasium" in script else ["device"]


BUFFER_CASES = [(s, kind) for s in OFFPOLICY for kind in buffer_kinds(s)]


def make_buffer(m, script: str, kind: str):
    dims = (OBS_DIM,) if script.startswith("dqn") else (OBS_DIM, ACTION_DIM)
    if "torch" in script:
        import torch

        return m.Buffer(CAPACITY, *dims, torch.device("cpu"), kind == "host", SEED)
    return m.HostBuffer(CAPACITY, *dims, SEED) if kind == "host" else m.Buffer.empty(CAPACITY, *dims)


def transitions(script: str, start: int, n: int):
    """n rows numbered start.. in every field (an unwritten row holds 0), as the script hands its buffer rows:
    torch tensors (the scripts with the env in JAX or torch), or NumPy arrays (the CPU envs', JAX's)."""
    ids = np.arange(start, start + n, dtype=np.float32)
    action = ids.astype(np.int32) if script.startswith("dqn") else np.repeat(ids[:, None], ACTION_DIM, 1)
    rows = (np.repeat(ids[:, None], OBS_DIM, 1), -np.repeat(ids[:, None], OBS_DIM, 1), action, ids, ids % 2 == 1)
    if "torch" in script and "gymnasium" not in script:
        import torch

        return tuple(map(torch.from_numpy, rows))
    return rows


def as_numpy(x):
    return x.numpy() if hasattr(x, "numpy") and not isinstance(x, np.ndarray) else np.asarray(x)


@pytest.mark.parametrize("script, kind", BUFFER_CASES, ids=[f"{s}-{k}" for s, k in BUFFER_CASES])
def test_a_buffer_samples_only_the_rows_written(script, kind):
    """k = 21 rows written of 64: 48 samples of 256 by the script's own sample() (JAX's keys split from a seed's,
    torch's generator seeded, the host buffer's own NumPy generator) draw no unwritten row, every written
    row, about equally, each row's fields together."""
    import jax
    import torch

    m = load(script)
    buffer, start = make_buffer(m, script, kind), 1
    for n in ADDS:
        added = buffer.add(*transitions(script, start, n))
        buffer, start = (buffer if added is None else added), start + n  # JAX's returns the new buffer
    k = start - 1
    torch.manual_seed(SEED)  # the device stream a torch run samples from (train() seeds it)
    keys = jax.random.split(jax.random.key(SEED), SAMPLES)
    jax_buffer = kind == "device" and "torch" not in script
    draws = [tuple(map(as_numpy, buffer.sample(key, BATCH) if jax_buffer else buffer.sample(BATCH))) for key in keys]
    obs, next_obs, action, reward, terminated = (np.concatenate(x) for x in zip(*draws))
    drawn = obs[:, 0]
    assert len(drawn) == SAMPLES * BATCH
    np.testing.assert_array_equal(next_obs, -obs)  # every field from the same row
    np.testing.assert_array_equal(reward, drawn)
    np.testing.assert_array_equal(action.reshape(len(drawn), -1)[:, 0], drawn)
    np.testing.assert_array_equal(terminated, drawn % 2 == 1)  # (an unwritten row: 0, not terminated)
    counts = np.bincount(drawn.astype(int), minlength=CAPACITY + 1)
    assert counts[0] == 0 and counts[k + 1:].sum() == 0, f"{counts[0]} draws of unwritten rows"
    expected = SAMPLES * BATCH / k
    assert np.all(np.abs(counts[1:k + 1] / expected - 1) < 0.2), counts[1:k + 1]  # 8 standard deviations


# %% the env in torch's own state in a run
TORCH_ENV_RUNS = {  # the compiled one compiles the policy and env step as one graph (and GAE, the gradients)
    "ppo_torch.py": {}, "ppo_torch_compile.py": {"compile_mode": "default", "compile_scope": "grads+policy"},
    "ppo_torch_agents.py": {"num_agents": 2},
}
TIME_LIMIT = 25  # Pendulum's episodes, shortened: two end in each env over the run's 64 steps
RUN = {**TINY_ARGS, "num_iterations": 4}


def trained_states(script: str, log_dir, **changes) -> list:
    """train() in a private copy of the script on Pendulum-v1 with --torch-env and a 25-step time limit: the env
    state the runner carries after each iteration's rollout, as NumPy arrays."""
    import jax

    m = load(script, fresh=True)
    args = m.RunArgs(**RUN, **changes, env_id="Pendulum-v1", torch_env=True, seed=3, log_dir=str(log_dir))
    env, env_params = m.make_torch_env(args.env_id, m.torch_device())
    env_params = env_params.replace(max_steps_in_episode=TIME_LIMIT)
    args = m.with_defaults(args, m.continuous(env, env_params))
    states, rollout = [], m.rollout

    def watched(*a, **k):
        runner, batch, stats = rollout(*a, **k)
        states.append(jax.tree.map(lambda x: x.detach().cpu().numpy().copy(), runner.env_state))
        return runner, batch, stats

    m.rollout = watched  # train() calls it by its module name
    writer = m.Writer(str(log_dir))
    m.train(args, env, env_params, m.RunLog(writer, args, "in-process", str(log_dir)), None)
    writer.close()
    return states


@pytest.fixture(scope="module")
def torch_env_runs(tmp_path_factory):
    """Each script's states; torch.compile's generated code draws the fresh states it resets envs to by the
    eager ops' generator (inductor's fallback_random), so the compiled run meets the eager run's states."""
    import torch._inductor.config

    import jax
    from helpers import JAX_SET_BY_SCRIPTS

    kept = {name: jax.config.values[name] for name in JAX_SET_BY_SCRIPTS}
    try:
        with torch._inductor.config.patch(fallback_random=True):  # torch's own patch: set back as it was after
            return {s: trained_states(s, tmp_path_factory.mktemp(s.removesuffix(".py")), **changes)
                    for s, changes in TORCH_ENV_RUNS.items()}
    finally:  # what train() sets for its process, set back for the tests after it
        for name, value in kept.items():
            jax.config.update(name, value)


def agent(state, i):
    import jax

    return jax.tree.map(lambda x: x[i], state)


@pytest.mark.parametrize("script", TORCH_ENV_RUNS)
def test_the_torch_env_state_learns_as_the_steps_go(script, torch_env_runs):
    """After iteration i, the normalizer has taken in num_envs observations at the reset and per step and
    num_envs discounted returns per step, its statistics far from a fresh start's; each env's episode length is
    its time since the last time limit, its return a sum of Pendulum's negative rewards, zero only just after
    an episode ended."""
    import jax

    states = torch_env_runs[script]
    m = load("torch_envs.py")
    fresh = m.Normalizer.start(OBS_DIM, RUN["num_envs"])
    for agent_i in range(TORCH_ENV_RUNS[script].get("num_agents", 0) or 1):
        for i, state in enumerate(states):
            state = agent(state, agent_i) if "agents" in script else state
            steps = RUN["num_steps"] * (i + 1)
            norm = state.norm
            assert norm.obs.count == pytest.approx(1e-4 + RUN["num_envs"] * (1 + steps), rel=1e-6), (i, norm.obs.count)
            assert norm.reward.count == pytest.approx(1e-4 + RUN["num_envs"] * steps, rel=1e-6), (i, norm.reward.count)
            elapsed = steps % TIME_LIMIT
            np.testing.assert_array_equal(state.env[1], elapsed)
            np.testing.assert_array_equal(state.episode_length, elapsed)
            assert np.all(state.episode_return < 0) if elapsed else np.all(state.episode_return == 0)
        moved = jax.tree.map(lambda now, start: bool(np.all(now != start.numpy())), norm, fresh)
        assert all(jax.tree.leaves(moved)), moved  # every mean, variance and discounted return of every env


@pytest.mark.parametrize("script", [s for s in TORCH_ENV_RUNS if s != "ppo_torch.py"])
def test_the_torch_env_state_is_the_eager_scripts(script, torch_env_runs):
    """The compiled script's state, and the agent scripts' agent 0's (its seed is the run's), after every
    iteration: the eager script's, the normalizer's statistics and discounted returns, the episode statistics and
    the physics, to float32's rounding (a normalizer that learned nothing is off by its whole statistics)."""
    import jax

    eager, other = torch_env_runs["ppo_torch.py"], torch_env_runs[script]
    assert len(other) == len(eager) == RUN["num_iterations"]
    for i, (expected, state) in enumerate(zip(eager, other)):
        state = agent(state, 0) if "agents" in script else state
        paths = jax.tree_util.tree_leaves_with_path(expected)
        for (path, want), got in zip(paths, jax.tree.leaves(state)):
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=f"iteration {i}, {jax.tree_util.keystr(path)}")


# %% the off-policy scripts' env in torch, compiled
# dqn/td3/sac_torch_compile.py --torch-env compile the env's step (fullgraph) beside their policy step: each
# runs once in its default compile mode and once with --compile-mode none (the same script's eager path), on
# Pendulum (TD3, SAC) and CartPole (DQN, whose poles fall at their own times), with a 25-step time limit
OFFPOLICY_TORCH_ENV = {"dqn_torch_compile.py": "CartPole-v1", "td3_torch_compile.py": "Pendulum-v1",
                       "sac_torch_compile.py": "Pendulum-v1"}
# 2 envs (TD3's and SAC's policy-frequency 2 allows no more; SAC's target-network-frequency raised to it), 4
# iterations of 20 vector steps: three time limits reached in each; learning starts at the run's last step, so
# nothing updates (the compiled updates, which touch no env state and draw nothing, are never called, so never
# compiled: test_td3.py, test_sac.py and test_dqn.py hold them)
OFFPOLICY_RUN = dict(num_envs=2, total_timesteps=160, log_frequency=40, learning_starts=159, buffer_size=256,
                     batch_size=32, seed=3)


def offpolicy_states(script: str, log_dir, compile_mode: str) -> list:
    """main() of a private copy of the script with --torch-env and a 25-step time limit: after each iteration,
    the env state its runner carries, its observations and torch's generator (the fresh states' and the
    actions' stream), as NumPy arrays."""
    import jax
    import torch
    from helpers import JAX_SET_BY_SCRIPTS

    m = load(script, fresh=True)
    states, iteration, make_torch_env = [], m.iteration, m.make_torch_env

    def watched(*a, **k):
        runner, stats = iteration(*a, **k)
        states.append((jax.tree.map(lambda x: x.detach().cpu().numpy().copy(), runner.env_state),
                       runner.obs.detach().cpu().numpy().copy(), torch.get_rng_state().numpy().copy()))
        return runner, stats

    def shortened(env_id, device):
        env, env_params = make_torch_env(env_id, device)
        return env, env_params.replace(max_steps_in_episode=TIME_LIMIT)

    m.iteration, m.make_torch_env = watched, shortened  # train() and main() call them by their module names
    frequency = {"target_network_frequency": OFFPOLICY_RUN["num_envs"]} if script.startswith("sac") else {}
    argv = [a for name, value in {**OFFPOLICY_RUN, **frequency, "env_id": OFFPOLICY_TORCH_ENV[script],
                                  "compile_mode": compile_mode, "log_dir": log_dir}.items()
            for a in (f"--{name.replace('_', '-')}", str(value))]
    kept = {name: jax.config.values[name] for name in JAX_SET_BY_SCRIPTS}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(ROOT)
        patch.setattr("sys.argv", [script, *argv, "--torch-env"])
        try:
            m.main()
        finally:  # what main() sets for its process, set back for the tests after it
            for name, value in kept.items():
                jax.config.update(name, value)
    return states


@pytest.fixture(scope="module")
def offpolicy_torch_env_runs(tmp_path_factory):
    """A script's (eager, compiled) states, made by the first test that asks and shared. torch.compile's code draws
    by the eager ops' generator (inductor's fallback_random), so the compiled run meets the eager run's draws."""
    made = {}

    def get(script: str):
        import torch._inductor.config

        if script not in made:
            with torch._inductor.config.patch(fallback_random=True):  # set back as it was after
                made[script] = tuple(offpolicy_states(script, tmp_path_factory.mktemp(f"{script[:-3]}-{mode}"), mode)
                                     for mode in ("none", "default"))
        return made[script]

    return get


@pytest.mark.parametrize("script", OFFPOLICY_TORCH_ENV)
def test_the_compiled_torch_env_state_is_the_eager_paths(script, offpolicy_torch_env_runs):
    """After every iteration, the compiled run's env state (each env's physics and time step, its episode's return
    and length), its observations and torch's generator are the eager run's: the floats to float32's rounding,
    the time steps and the generator's state exactly (a compiled step that draws its fresh states otherwise, or
    keeps its episode statistics otherwise, parts from the eager one). No normalizer: the off-policy scripts'
    env in torch normalizes nothing, as CleanRL's."""
    import jax

    eager, compiled = offpolicy_torch_env_runs(script)
    iterations = OFFPOLICY_RUN["total_timesteps"] // OFFPOLICY_RUN["log_frequency"]
    assert len(eager) == len(compiled) == iterations
    for i, ((want, want_obs, want_rng), (got, got_obs, got_rng)) in enumerate(zip(eager, compiled)):
        assert want.norm is None and got.norm is None
        paths = jax.tree_util.tree_leaves_with_path(want)
        assert len(paths) == len(jax.tree.leaves(got)) == 4  # physics, time step, episode return and length
        for (path, w), g in zip(paths, jax.tree.leaves(got)):
            where = f"iteration {i}, {jax.tree_util.keystr(path)}"
            assert g.dtype == w.dtype and g.shape == w.shape, where
            if np.issubdtype(w.dtype, np.integer):
                np.testing.assert_array_equal(g, w, err_msg=where)
            else:
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=where)
        np.testing.assert_allclose(got_obs, want_obs, rtol=1e-5, atol=1e-5, err_msg=f"iteration {i}, observations")
        np.testing.assert_array_equal(got_rng, want_rng, err_msg=f"iteration {i}, torch's generator")


@pytest.mark.parametrize("script", OFFPOLICY_TORCH_ENV)
def test_the_compiled_torch_env_state_keeps_its_episodes(script, offpolicy_torch_env_runs):
    """The compiled run's episode statistics as the steps go: each env's episode length is its time step (both
    counted from its episode's start, reset where the time limit or a fall ended it); Pendulum's time step is the
    steps since the last time limit and its return a sum of negative rewards, zero just after an episode ended;
    CartPole's return is its length (a reward of 1 a step), and some pole fell before the time limit. The
    physics and torch's generator moved from one iteration to the next."""
    _, compiled = offpolicy_torch_env_runs(script)
    steps = OFFPOLICY_RUN["log_frequency"] // OFFPOLICY_RUN["num_envs"]
    fell = False
    for i, (state, obs, rng) in enumerate(compiled):
        (physics, elapsed), length = state.env, state.episode_length
        np.testing.assert_array_equal(length, elapsed, err_msg=f"iteration {i}")
        if OFFPOLICY_TORCH_ENV[script] == "Pendulum-v1":
            np.testing.assert_array_equal(elapsed, steps * (i + 1) % TIME_LIMIT, err_msg=f"iteration {i}")
            assert np.all(state.episode_return < 0) if elapsed[0] else np.all(state.episode_return == 0), i
        else:
            np.testing.assert_array_equal(state.episode_return, length, err_msg=f"iteration {i}")
            fell |= bool(np.any(elapsed != steps * (i + 1) % TIME_LIMIT))
        if i:
            before, _, rng_before = compiled[i - 1]
            assert np.all(physics != before.env[0]) and not np.array_equal(rng, rng_before), i
    assert fell or OFFPOLICY_TORCH_ENV[script] == "Pendulum-v1", "no pole fell: the time limit alone ended episodes"
