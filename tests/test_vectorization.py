"""The CPU-env scripts' --vectorization: each way of stepping the envs records the autoreset mode
its env reports, refuses an env it does not offer like any bad input, and a reset step that a
next-step autoreset puts into the batch weighs nothing in the loss (the loss of a batch with
such steps is the reference's loss of the batch without them). tests/test_rollout.py proves
what each vectorization collects; tests/test_twins.py that EnvPool's envs are the same envs."""

import subprocess
import sys

import numpy as np
import pytest
import reference as ref
from adapters import adapter_for
from helpers import GYMNASIUM_SCRIPTS, ROOT, TINY, load, read_json, run, run_ok, script_args
from test_equivalence import MINIBATCH, NUM_ACTIONS, OBS_DIM, problem, rows, shared_args  # noqa: F401

AUTORESET = {"sync": "SameStep", "async": "SameStep", "vector": "NextStep", "envpool": "NextStep"}


@pytest.mark.parametrize("vectorization", AUTORESET)
@pytest.mark.parametrize("script", GYMNASIUM_SCRIPTS)
def test_each_way_reports_its_autoreset_mode(script, vectorization):
    envs = load(script).make_env("CartPole-v1", 2, vectorization, seed=0)
    assert envs.metadata["autoreset_mode"].value == AUTORESET[vectorization]
    envs.close()


@pytest.mark.parametrize("vectorization", AUTORESET)
def test_run_records_the_envs_autoreset_mode(vectorization, tmp_path):
    """run.json's autoreset mode is the one the env reports (one script: the code is the same in both)."""
    script = GYMNASIUM_SCRIPTS[-1]
    run_dir = run_ok(script, *TINY, "--num-iterations", "1", "--vectorization", vectorization, log_dir=tmp_path)
    info = read_json(run_dir / "run.json")
    assert info["env"] == {"id": "CartPole-v1", "vectorization": vectorization, "autoreset": AUTORESET[vectorization]}
    suffix = "" if vectorization == "sync" else f"-{vectorization}"
    assert info["variant"] == script[4:-3] + suffix and run_dir.name.split("__")[1] == info["variant"]


@pytest.mark.parametrize("vectorization,env_id", [("vector", "Acrobot-v1"), ("envpool", "Breakout-MinAtar")])
@pytest.mark.parametrize("script", GYMNASIUM_SCRIPTS)
def test_env_a_vectorization_does_not_offer_is_refused(script, vectorization, env_id, capsys):
    m = load(script)
    with pytest.raises(SystemExit) as exit_:
        m.make_env(env_id, 2, vectorization)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert env_id in err and all(e in err for e in m.VECTORIZATIONS[vectorization]), err


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_async_steps_what_sync_steps(env_id):
    """A worker process per env changes where the envs step, not what they give: the same seeds and
    actions give the same steps, bit for bit (Pendulum's normalized), over 450 steps with resets."""
    m = load(GYMNASIUM_SCRIPTS[0])
    stepped = {}
    for vectorization in ("sync", "async"):
        envs = m.make_env(env_id, 4, vectorization, seed=0)
        norm = m.Normalizer.start(envs.single_observation_space.shape[0], 4) if m.continuous(envs) else None
        obs, state = m.env_reset(envs, 0, norm)
        steps, actions = [obs], np.random.default_rng(1)
        for _ in range(450):
            space = envs.single_action_space
            action = (actions.normal(size=(4, *space.shape)).astype(np.float32) if m.continuous(envs)
                      else actions.integers(space.n, size=4))
            state, step = m.env_step(envs, state, action, gamma=0.99)
            steps.append(step)
        envs.close()
        stepped[vectorization] = steps
    np.testing.assert_array_equal(stepped["sync"][0], stepped["async"][0], err_msg="reset")
    for t, (a, b) in enumerate(zip(stepped["sync"][1:], stepped["async"][1:])):
        for field, x, y in zip(a._fields, a, b):
            np.testing.assert_array_equal(x, y, err_msg=f"{env_id} step {t}: {field}")
    assert sum(s.episode_length.astype(bool).sum() for s in stepped["sync"][1:]) >= 4, "episodes must end"


def test_refused_before_anything_is_written(tmp_path):
    proc = run(GYMNASIUM_SCRIPTS[-1], "--vectorization", "envpool", "--env-id", "Breakout-MinAtar",
               log_dir=tmp_path / "runs")
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("script", GYMNASIUM_SCRIPTS)
def test_atari_learns_from_lives_and_counts_games(script):
    """Atari as CleanRL's ppo_atari_envpool.py runs it: the batch holds EnvPool's clipped rewards and a lost
    life ends its episode there, while the episode statistics count whole games and their scores (its
    info's reward and terminated); each frame stack reaches the CNN as one (h, w, stack) image."""
    import envpool

    m, rng = load(script), np.random.default_rng(0)
    envs = m.make_env("Breakout-v5", 2, "envpool", seed=3)
    same = envpool.make_gymnasium("Breakout-v5", num_envs=2, seed=3, episodic_life=True, reward_clip=True)
    image = lambda frames: np.moveaxis(frames, 1, -1).reshape(2, -1)
    obs, state = m.env_reset(envs, 3)
    np.testing.assert_array_equal(obs, image(same.reset()[0]))
    assert m.observation_shape(envs) == (84, 84, 4)
    score, length, resetting, lives_lost, games = np.zeros(2), np.zeros(2), np.zeros(2, bool), 0, []
    for _ in range(1500):
        action = rng.integers(0, 4, 2)
        state, out = m.env_step(envs, state, action)
        frames, reward, terminated, truncated, info = same.step(action)
        np.testing.assert_array_equal(out.obs, image(frames))
        np.testing.assert_array_equal(out.reward, reward)
        np.testing.assert_array_equal(out.terminated, terminated)
        score, length = score + info["reward"], length + ~resetting
        over = info["terminated"].astype(bool) | truncated
        np.testing.assert_array_equal(out.episode_return, np.where(over, score, 0))
        np.testing.assert_array_equal(out.episode_length, np.where(over, length, 0))
        lives_lost += (terminated & ~over).sum()
        games += list(score[over])
        score, length, resetting = np.where(over, 0, score), np.where(over, 0, length), terminated | truncated
    assert lives_lost > len(games) > 2, "lives lost within games, and whole games"


def test_bench_offers_what_the_scripts_offer():
    """bench.sh plans a vectorization only on the envs the scripts' VECTORIZATIONS give it."""
    source = (ROOT / "bench.sh").read_text()
    for script in GYMNASIUM_SCRIPTS:
        offered = load(script).VECTORIZATIONS
        assert offered["async"] == offered["sync"] == load(script).GYMNASIUM, script  # bench.sh: all but ATARI_ENVS
        for name, key in (("VECTOR_ENVS", "vector"), ("ENVPOOL_ENVS", "envpool")):
            line = next(x for x in source.splitlines() if f"{name}=(" in x)
            listed = line.split(f"{name}=(")[1].split(")")[0].split()
            assert tuple(listed) == offered[key], (script, name)


@pytest.mark.parametrize("script", GYMNASIUM_SCRIPTS)
def test_reset_steps_weigh_nothing(script, problem):  # noqa: F811
    """A minibatch in which a quarter of the rows are reset steps (weight 0, their contents
    scrambled) gives the loss, statistics and gradients the reference gives for the minibatch
    of the other rows alone."""
    weights, (batch, *_) = problem
    mb = rows(batch, slice(0, MINIBATCH))
    rng = np.random.default_rng(1)
    reset = rng.random(MINIBATCH) < 0.25
    mb["valid"] = (~reset).astype(np.float32)
    for name, scale in (("obs", 50.0), ("advantages", 1e3), ("returns", 1e3), ("logprobs", 5.0)):
        mb[name] = np.where(reset.reshape(-1, *[1] * (mb[name].ndim - 1)), scale * rng.normal(size=mb[name].shape),
                            mb[name]).astype(mb[name].dtype)
    args = shared_args(script)
    transitions = {k: v[~reset] for k, v in mb.items() if k != "valid"}
    expected_loss, expected_stats, expected_grads = ref.loss_and_grads(weights, transitions, args)
    loss, stats, grads = adapter_for(script)(script, weights, args).loss_and_grads(mb)
    assert loss == pytest.approx(expected_loss, rel=1e-5, abs=1e-6)
    for name in ref.LOSS_STATS:
        assert stats[name] == pytest.approx(expected_stats[name], rel=1e-4, abs=1e-6), name
    scale = np.abs(ref.flat(expected_grads)).max()
    for net in ref.NETS:
        for (g, gb), (e, eb) in zip(grads[net], expected_grads[net]):
            np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6 * scale, err_msg=net)
            np.testing.assert_allclose(gb, eb, rtol=1e-4, atol=1e-6 * scale, err_msg=net)


@pytest.mark.parametrize("backend,env_id", [("gymnax", "CartPole-v1"), ("gymnax", "Pendulum-v1"), ("sync", "CartPole-v1"),
                                            ("async", "Pendulum-v1"), ("vector", "CartPole-v1"),
                                            ("envpool", "HalfCheetah-v5"), ("mjx", "HalfCheetah-v5"),
                                            ("torch", "Pendulum-v1"), ("torch-compile", "Acrobot-v1"),
                                            ("gymnax-dlpack", "CartPole-v1")])
def test_env_alone_writes_a_run_the_analysis_reads(backend, env_id, tmp_path):
    """env_alone.py, the env-scaling chart's env-alone lines: a run directory like the scripts'
    (run.json, summary.json, one time/rollout per iteration) that analyze.py loads; random actions
    in a Box's bounds for the continuous envs, and MJX's HalfCheetah."""
    from analysis import cpuenv, runs

    proc = subprocess.run([sys.executable, str(ROOT / "env_alone.py"), "--backend", backend, "--env-id", env_id, "--num-envs", "8",
                           "--num-steps", "16", "--num-iterations", "3", "--log-dir", str(tmp_path)],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run_dir,) = tmp_path.iterdir()
    run = runs.load_run(run_dir)
    assert (run.variant, run.env_id, run.model) == (f"env-{backend}", env_id, "none")
    assert len(run.series("time/rollout")[1]) == 3 and cpuenv.rollout_throughput(run) > 0


@pytest.mark.parametrize("backend,env_id,offered", [("envpool", "Breakout-MinAtar", "CartPole-v1"),
                                                    ("mjx", "CartPole-v1", "HalfCheetah-v5"),
                                                    ("torch", "Breakout-MinAtar", "CartPole-v1")])
def test_env_alone_refuses_what_a_backend_does_not_offer(backend, env_id, offered, tmp_path):
    proc = subprocess.run([sys.executable, str(ROOT / "env_alone.py"), "--backend", backend, "--env-id",
                           env_id, "--log-dir", str(tmp_path / "runs")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert offered in proc.stderr and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("script", GYMNASIUM_SCRIPTS)
def test_atari_rollouts_count_whole_games(script):
    """Over two rollout() calls on Breakout-v5 (a life lost ends an episode in the batch), the episode
    statistics a run logs count each game once, at its unclipped score and its length in transitions: the
    games a second EnvPool env with the same seed ends, stepped with the actions the batch stored."""
    import envpool
    import jax

    m = load(script)
    args = script_args(m, model="cnn", env_id="Breakout-v5", vectorization="envpool", num_envs=2, num_steps=256)
    weights = ref.random_cnn_weights(np.random.default_rng(0), (84, 84, 4), "nature", 4)
    envs = m.make_env("Breakout-v5", 2, "envpool", seed=3)
    calls = adapter_for(script)(script, weights, args).rollouts(envs, 3, jax.random.key(4), calls=2)
    same = envpool.make_gymnasium("Breakout-v5", num_envs=2, seed=3, episodic_life=True, reward_clip=True)
    same.reset()
    score, length, resetting, lives_lost = np.zeros(2), np.zeros(2), np.zeros(2, bool), 0
    for call, (batch, stats, *_) in enumerate(calls):
        games = []
        for action in batch["actions"].reshape(256, 2):
            _, _, terminated, truncated, info = same.step(action)
            score, length = score + info["reward"], length + ~resetting
            over = info["terminated"].astype(bool) | truncated
            games += list(zip(score[over], length[over]))
            lives_lost += (terminated & ~over).sum()
            score, length, resetting = np.where(over, 0, score), np.where(over, 0, length), terminated | truncated
        assert games, f"call {call + 1}: no game ended"
        assert stats["episodes"] == len(games), f"call {call + 1}: {stats['episodes']} episodes, {len(games)} games"
        assert stats["episodic_return_sum"] == pytest.approx(sum(s for s, _ in games)), f"call {call + 1}"
        assert stats["episodic_length_sum"] == pytest.approx(sum(n for _, n in games)), f"call {call + 1}"
    assert lives_lost > 2, "lives lost within games"
