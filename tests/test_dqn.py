"""DQN (dqn_*.py, docs/offpolicy.md) against the NumPy reference (tests/reference.py): the TD targets, loss,
gradients and Adam steps from one batch; epsilon, the updates and the target copies at CleanRL's steps; the
replay buffer's ring and its sampling; and the contract a run keeps."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import reference
from helpers import DQN_SCRIPTS, load, read_json, run, run_ok, scalars

TINY = ["--total-timesteps", "2000", "--learning-starts", "500", "--log-frequency", "500", "--buffer-size", "1000",
        "--batch-size", "32"]


def linen_layers(params):
    dense = params["params"]
    return [(np.asarray(dense[f"Dense_{i}"]["kernel"]), np.asarray(dense[f"Dense_{i}"]["bias"]))
            for i in range(len(dense))]


def linen_params(layers):
    return {"params": {f"Dense_{i}": {"kernel": jnp.asarray(k, jnp.float32), "bias": jnp.asarray(b, jnp.float32)}
                       for i, (k, b) in enumerate(layers)}}


def random_layers(rng, sizes):
    return [(rng.normal(0, 1 / np.sqrt(i), (i, o)).astype(np.float32), rng.normal(0, 0.1, o).astype(np.float32))
            for i, o in zip(sizes, sizes[1:])]


def random_batch(rng, n, obs_dim, num_actions):
    """Half the transitions terminated: their targets are the reward alone."""
    return (rng.normal(size=(n, obs_dim)).astype(np.float32), rng.normal(size=(n, obs_dim)).astype(np.float32),
            rng.integers(0, num_actions, n).astype(np.int32), rng.normal(size=n).astype(np.float32),
            rng.random(n) < 0.5)


@pytest.mark.parametrize("script", DQN_SCRIPTS)
def test_td_update_matches_the_reference(script):
    """Three Adam steps on three batches: the loss, the Q-values taken and every weight after each step, with
    online and target networks that differ (a target from the online network would show)."""
    dqn = load(script)
    rng = np.random.default_rng(0)
    args = dqn.Args()
    layers, target = random_layers(rng, (4, 120, 84, 2)), random_layers(rng, (4, 120, 84, 2))
    state = dqn.make_train_state(jax.random.key(0), (4,), 2, args)
    state = state.replace(params=linen_params(layers), target_params=linen_params(target),
                          opt_state=state.tx.init(linen_params(layers)))
    batches = [random_batch(rng, 64, 4, 2) for _ in range(3)]
    expected = reference.dqn_adam_steps(layers, target, batches, args.gamma, args.learning_rate)
    current = layers
    for batch, after in zip(batches, expected):
        loss, taken, _ = reference.td_loss_and_grads(current, target, batch, args.gamma)
        state, got_loss, got_q = dqn.td_update(state, tuple(map(jnp.asarray, batch)), args.gamma)
        assert float(got_loss) == pytest.approx(loss, rel=1e-5) and float(got_q) == pytest.approx(taken.mean(), rel=1e-5)
        for (k, b), (k_ref, b_ref) in zip(linen_layers(state.params), after):
            np.testing.assert_allclose(k, k_ref, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(b, b_ref, rtol=1e-4, atol=1e-6)
        current = after
    assert all(np.array_equal(a, b) for (a, _), (b, _) in zip(linen_layers(state.target_params), target))


@pytest.mark.parametrize("script", DQN_SCRIPTS)
@pytest.mark.parametrize("num_envs", [1, 3])
def test_epsilon_updates_and_target_copies_at_cleanrl_steps(script, num_envs):
    """One vector step per call: epsilon as CleanRL's schedule gives it, an Adam step exactly where CleanRL
    trains, and the target equal to the online network exactly where it copies (tau 1), unchanged elsewhere."""
    dqn = load(script)
    frequencies = dict(train_frequency=4 if num_envs == 1 else 5, target_network_frequency=7)
    args = dqn.Args(total_timesteps=60 * num_envs, learning_starts=10, buffer_size=64, batch_size=8,
                    num_envs=num_envs, log_frequency=num_envs, **frequencies)
    env, env_params = dqn.make_env("CartPole-v1")
    obs, env_state = dqn.env_reset(jax.random.key(1), env, env_params, num_envs)
    state = dqn.make_train_state(jax.random.key(0), (4,), 2, args)
    runner = dqn.Runner(jax.random.key(2), env_state, obs, dqn.Buffer.empty(64, 4), jnp.int32(0))
    step = jax.jit(lambda s, r: dqn.iteration(s, r, env, env_params, args))
    trained, copied = [], []
    for t in range(0, args.total_timesteps, num_envs):
        epsilon, trains, copies = reference.dqn_schedule(t, args.total_timesteps, args.start_e, args.end_e,
                                                         args.exploration_fraction, args.learning_starts,
                                                         num_envs=num_envs, **frequencies)
        before, target = int(state.opt_state[0].count), jax.tree.leaves(jax.device_get(state.target_params))
        state, runner, stats = step(state, runner)
        assert float(stats["epsilon"]) == pytest.approx(epsilon, rel=1e-6), t
        assert int(state.opt_state[0].count) - before == int(trains) == int(stats["updates"]), t
        now = jax.tree.leaves(state.params) if copies else target  # a copy of the weights after this step's update
        assert all(np.array_equal(a, b) for a, b in zip(jax.tree.leaves(state.target_params), now)), t
        trained.append(trains)
        copied.append(copies)
    assert sum(trained) >= 5 and sum(copied) >= 3  # the check saw both happen


def test_the_buffer_is_a_ring_sampled_over_its_written_rows_only():
    """Rows written in order, the oldest overwritten once full; a sample draws every written row about
    equally and no row that was never written."""
    dqn = load(DQN_SCRIPTS[0])
    buffer = dqn.Buffer.empty(10, 1)
    row = lambda start, n: (jnp.arange(start, start + n, dtype=jnp.float32)[:, None],) * 2 + (
        jnp.zeros(n, jnp.int32), jnp.arange(start, start + n, dtype=jnp.float32), jnp.zeros(n, bool))
    buffer = buffer.add(*row(1, 3)).add(*row(4, 3))  # six rows of ten: 1..6
    drawn = np.asarray(dqn.Buffer.sample(buffer, jax.random.key(0), 60_000)[0])[:, 0]
    counts = np.bincount(drawn.astype(int), minlength=11)
    assert counts[0] == 0 and counts[7:].sum() == 0  # never an unwritten row (zeros)
    assert np.all(np.abs(counts[1:7] / 10_000 - 1) < 0.05), counts
    buffer = buffer.add(*row(7, 3)).add(*row(10, 3))  # twelve rows into ten: 1 and 2 overwritten by 11 and 12
    assert sorted(np.asarray(buffer.reward).tolist()) == list(range(3, 13)) and int(buffer.size) == 10
    assert int(buffer.pos) == 2 and np.asarray(buffer.obs)[:2, 0].tolist() == [11, 12]


@pytest.mark.parametrize("script", DQN_SCRIPTS)
def test_a_run_writes_the_contract_and_reloads(script, tmp_path):
    """A tiny run: run.json with what ran, the tags, summary.json; its saved model, loaded with no training,
    evaluates to the same returns (the same fresh envs and exploration)."""
    trained = run_ok(script, *TINY, "--save-model", "--eval-episodes", "3", log_dir=tmp_path / "train")
    info, summary, logged = read_json(trained / "run.json"), read_json(trained / "summary.json"), scalars(trained)
    assert info["args"]["total_timesteps"] == 2000 and info["variant"] == script.removesuffix(".py")
    assert [step for step, _ in logged["time/iteration"]] == [500, 1000, 1500, 2000]
    assert {"charts/SPS", "charts/epsilon", "losses/td_loss", "losses/q_values", "memory/peak_rss_mb"} <= set(logged)
    assert [step for step, _ in logged["losses/td_loss"]] == [1000, 1500, 2000]  # none before learning starts
    loaded = run_ok(script, "--total-timesteps", "0", *TINY[2:], "--load-model", str(trained), "--eval-episodes", "3",
                    log_dir=tmp_path / "eval")
    assert read_json(loaded / "summary.json")["eval/episodic_returns"] == summary["eval/episodic_returns"]


@pytest.mark.parametrize("script", DQN_SCRIPTS)
@pytest.mark.parametrize("args, says", [
    (["--env-id", "Pendulum-v1"], "Discrete actions"),
    (["--batch-size", "2000", "--buffer-size", "1000"], "batch_size=2000 is larger than buffer_size=1000"),
    (["--total-timesteps", "10000", "--learning-starts", "10000"], "it would never learn"),
    (["--num-envs", "4", "--train-frequency", "2"], "must be at least num_envs=4"),
])
def test_bad_input_is_refused_in_one_line(script, args, says, tmp_path):
    proc = run(script, *args, log_dir=tmp_path)
    assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
