"""Keep what was trained: --save-model, --load-model and --eval-episodes in every script.
- A model saved by a script and loaded in a new process into other weights gives the very
  logits on a fixed batch of observations; its optimizer state carries Adam's moments and step
  count, while this run's learning-rate schedule starts again (checked against the reference).
- From the command line: a run that loads a saved model and trains 0 iterations evaluates the
  greedy policy to the returns the saving run's own evaluation got, on the same fresh envs.
- A model from another script, model size or env, and a truncated or missing file are refused:
  one line, exit 2, nothing written.
- A continuous run's normalization statistics are saved with its model and restored with it."""

import dataclasses
import inspect
import subprocess
import sys

import numpy as np
import pytest
import reference as ref
from adapters import adapter_for
from helpers import AGENT_SCRIPTS, CONTINUOUS_SCRIPTS, GYMNASIUM_SCRIPTS, ROOT, TINY_ARGS, load, run, script_args, train_in_process
from helpers import ONE_AGENT_SCRIPTS as SCRIPTS  # the agent scripts: tests/test_agents.py
from helpers import SCRIPTS as ALL_SCRIPTS
from test_equivalence import ATOL_WEIGHTS, random_batch

OBS_DIM, NUM_ACTIONS = 4, 2  # CartPole-v1's: Equinox reads a saved model into the shapes the env gives
OTHER_WEIGHTS = 99  # the seed of the weights a loading adapter starts from, before the load replaces them


def update_args(script):
    """One optimizer step per update() call, on a schedule of two: one before saving, one after loading."""
    return script_args(load(script), num_envs=4, num_steps=64, num_minibatches=1, update_epochs=1, num_iterations=2)


def problem():
    rng = np.random.default_rng(0)
    weights = ref.random_weights(rng, OBS_DIM, (64, 64), NUM_ACTIONS)
    batches = [random_batch(rng, weights, 4.0, size=256), random_batch(rng, weights, 0.05, size=256)]
    return weights, batches, rng.normal(0, 1, (16, OBS_DIM)).astype(np.float32)


RELOAD = """
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, sys.argv[1])
import reference as ref
from adapters import adapter_for
from test_saving import OTHER_WEIGHTS, problem, update_args

_, batches, obs = problem()
for script in sys.argv[3:]:
    other = ref.random_weights(np.random.default_rng(OTHER_WEIGHTS), 4, (64, 64), 2)
    adapter = adapter_for(script)(script, other, update_args(script))
    adapter.load(Path(sys.argv[2]) / script)  # the run directory: read_model finds the file in it
    logits = adapter.logits(obs)
    weights, lr, _ = adapter.update(batches[1], iteration=0)  # the first update of a new run
    np.savez(Path(sys.argv[2]) / script / "reloaded.npz", logits=logits, weights=ref.flat(weights), lr=lr)
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """Every script's model after one update, saved in a run directory of its own, then loaded
    by a new process: {script: (logits before saving, what the new process computed)}."""
    weights, batches, obs = problem()
    root, logits = tmp_path_factory.mktemp("saved"), {}
    for script in SCRIPTS:
        adapter = adapter_for(script)(script, weights, update_args(script))
        adapter.update(batches[0], iteration=0)
        (root / script).mkdir()
        assert (root / script / adapter.save(root / script)).exists()
        logits[script] = adapter.logits(obs)
    proc = subprocess.run([sys.executable, "-c", RELOAD, str(ROOT / "tests"), str(root), *SCRIPTS], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root, {script: (logits[script], np.load(root / script / "reloaded.npz")) for script in SCRIPTS}


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_saved_model_reloads_in_a_new_process(script, saved):
    weights, batches, obs = problem()
    args = update_args(script)
    first = ref.optimizer_steps(weights, batches[:1], args, total_steps=2)[0]
    # the loading run: Adam goes on from the saved moments and count, its schedule from the start
    second = ref.optimizer_steps(first.weights, batches[1:], args, total_steps=2, adam=first.adam)[0]
    before, reloaded = saved[1][script]
    np.testing.assert_array_equal(reloaded["logits"], before, err_msg=f"{script}: logits after reloading")
    np.testing.assert_allclose(reloaded["logits"], ref.forward(ref.as64(first.weights)["actor"], obs)[0], atol=1e-5)
    assert float(reloaded["lr"]) == pytest.approx(args.learning_rate), "the loading run's schedule did not restart"
    np.testing.assert_allclose(reloaded["weights"], ref.flat(second.weights), rtol=0, atol=ATOL_WEIGHTS,
                               err_msg=f"{script}: the first update after loading (the optimizer state)")


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_reload_restores_each_documented_promise(script, tmp_path):
    """Into other weights, one promise at a time: the weights, Adam's first and second moments and
    its step count are the saved ones, exactly; the schedule starts again at the full rate."""
    weights, batches, _ = problem()
    args = update_args(script)
    saving = adapter_for(script)(script, weights, args)
    saving.update(batches[0], iteration=0)
    saving.save(tmp_path)
    loading = adapter_for(script)(script, ref.random_weights(np.random.default_rng(OTHER_WEIGHTS), OBS_DIM, (64, 64),
                                                             NUM_ACTIONS), args)
    loading.load(tmp_path)
    np.testing.assert_array_equal(ref.flat(loading.weights()), ref.flat(saving.weights()), err_msg="the weights")
    (mu, nu, count), (saved_mu, saved_nu, saved_count) = loading.adam_state(), saving.adam_state()
    np.testing.assert_array_equal(ref.flat(mu), ref.flat(saved_mu), err_msg="Adam's first moment")
    np.testing.assert_array_equal(ref.flat(nu), ref.flat(saved_nu), err_msg="Adam's second moment")
    assert count == saved_count == 1, f"Adam's step count: {count} after loading, {saved_count} saved"
    _, used, _ = loading.update(batches[1], iteration=0)
    assert used == pytest.approx(args.learning_rate), "the loading run's schedule did not start again"


def agents(script) -> dict:
    return {"num_agents": 2} if script in AGENT_SCRIPTS else {}


def streams(script, log_dir, load_model=None) -> dict:
    """The first observations of the training envs, and every shuffle permutation, that two
    iterations of training draw (JAX's through an ordered debug callback)."""
    import jax
    import torch

    drawn = {"obs": [], "perm": []}
    permutation, randperm = jax.random.permutation, torch.randperm

    def jax_permutation(*args, **kwargs):
        perm = permutation(*args, **kwargs)
        jax.debug.callback(lambda p: drawn["perm"].append(np.asarray(p).copy()), perm, ordered=True)
        return perm

    def torch_randperm(*args, **kwargs):
        perm = randperm(*args, **kwargs)
        if not torch.compiler.is_compiling():  # dynamo traces it where the compiled update calls it
            drawn["perm"].append(perm.numpy().copy())
        return perm

    def watch(m):
        env_reset = m.env_reset

        def reset(*args, **kwargs):
            obs, state = env_reset(*args, **kwargs)
            if isinstance(obs, np.ndarray):
                drawn["obs"].append(obs.copy())
            else:
                jax.debug.callback(lambda o: drawn["obs"].append(np.asarray(o).copy()), obs, ordered=True)
            return obs, state
        m.env_reset = reset
        return m.RunLog

    jax.random.permutation, torch.randperm = jax_permutation, torch_randperm
    try:
        train_in_process(script, log_dir, watch, load_model=load_model, num_iterations=2, **agents(script))
        jax.effects_barrier()
    finally:
        jax.random.permutation, torch.randperm = permutation, randperm
    return drawn


@pytest.mark.parametrize("script", ALL_SCRIPTS)
def test_a_loaded_run_draws_what_a_fresh_run_draws(script, tmp_path):
    """The file holds no random state: a run that loads a model starts its envs and its shuffles
    where a fresh run with its --seed starts them (in every framework: the JAX scripts fold this
    run's optimizer steps, which start again, into the shuffle key)."""
    weights, batches, _ = problem()
    saving = adapter_for(script)(script, weights, dataclasses.replace(update_args(script), **agents(script)))
    # after an update: the file's step counts are not a fresh run's, so drawing from them shows
    saving.update([batches[0]] * 2 if script in AGENT_SCRIPTS else batches[0], iteration=0)
    (tmp_path / "saved").mkdir()
    saved = saving.save(tmp_path / "saved")
    fresh, loaded = streams(script, tmp_path / "fresh"), streams(script, tmp_path / "loaded", tmp_path / "saved" / saved)
    assert len(fresh["perm"]) == len(loaded["perm"]) >= 2 * TINY_ARGS["update_epochs"]
    np.testing.assert_array_equal(loaded["obs"][0], fresh["obs"][0], err_msg="the envs' first observations")
    for i, (a, b) in enumerate(zip(loaded["perm"], fresh["perm"])):
        np.testing.assert_array_equal(a, b, err_msg=f"shuffle permutation {i}")


def read_model(script, path, **changes):
    """The script's read_model, as main() calls it, with the given arguments changed."""
    m = load(script)
    args = dataclasses.replace(update_args(script), **changes)
    env = m.make_env(args.env_id) if "env" in inspect.signature(m.read_model).parameters else ()
    return m.read_model(str(path), args, *env)


@pytest.mark.parametrize("script", SCRIPTS)
def test_a_model_this_run_cannot_use_is_refused(script, saved, tmp_path, capsys):
    root = saved[0]
    read_model(script, root / script)  # its own model is fine
    model_file = lambda s: next(p for p in (root / s).iterdir() if p.name.startswith("model."))
    truncated = tmp_path / "truncated"
    data = model_file(script).read_bytes()
    truncated.write_bytes(data[: len(data) // 2])
    # another script's model: one in the same format (a sibling) says so, one in another cannot be read
    other = min((s for s in SCRIPTS if s != script), key=lambda s: model_file(s).name != model_file(script).name)
    same_format = model_file(other).name == model_file(script).name
    cases = [(model_file(other), {}, "saved with script" if same_format else "is not a whole model"),
             (root / script, {"model": "medium"}, "saved with model"),
             (root / script, {"env_id": "Acrobot-v1"}, "saved with env_id"),
             (truncated, {}, "is not a whole model"), (tmp_path / "nowhere", {}, "No such file")]
    for path, changes, words in cases:
        with pytest.raises(SystemExit) as exit_info:
            read_model(script, path, **changes)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and words in err and err.count("\n") == 1, (path, changes, err)
    # main() refuses it before anything is written
    log_dir = tmp_path / "runs"
    proc = run(script, "--load-model", str(truncated), log_dir=log_dir)
    assert proc.returncode == 2 and "is not a whole model" in proc.stderr and "Traceback" not in proc.stderr
    assert not log_dir.exists()


NORMALIZING = [(s, {}) for s in CONTINUOUS_SCRIPTS] + [("ppo_torch.py", {"torch_env": True})]  # (torch's statistics)


@pytest.mark.parametrize("script,toggle", NORMALIZING, ids=lambda x: str(x))
def test_normalization_statistics_are_saved_and_restored(script, toggle, tmp_path, capsys):
    """A run on Pendulum saves its Normalizer's statistics with its model, as they ended; a run that
    loads them starts from them (its first observations join the saved statistics, so its count is
    theirs plus one observation per env; the discounted returns start again), and a run that would
    not normalize refuses them."""
    m = load(script, fresh=True)
    args = m.RunArgs(**{**TINY_ARGS, "num_iterations": 3}, **toggle, env_id="Pendulum-v1", log_dir=str(tmp_path))
    env = ((m.make_env(args.env_id, args.num_envs),) if script in GYMNASIUM_SCRIPTS
           else m.make_torch_env(args.env_id, "cpu") if toggle else m.make_env(args.env_id))
    args = m.with_defaults(args, continuous_actions=True)
    writer = m.Writer(str(tmp_path))
    log = m.RunLog(writer, args, "in-process", str(tmp_path))
    *trained, norm = m.train(args, *env, log)  # (model and optimizer), statistics
    m.save_model(str(tmp_path), *trained, norm, args)
    read = lambda args: m.read_model(str(tmp_path), args, *(env if "env" in inspect.signature(m.read_model).parameters
                                                            else (m.normalizes(args, *env),)))  # as main() reads
    saved = {part: {k: np.asarray(v) for k, v in stats.items()} for part, stats in read(args)["normalizer"].items()}
    for part in ("obs", "reward"):
        for name, value in getattr(norm, part)._asdict().items():
            np.testing.assert_array_equal(saved[part][name], np.asarray(value), err_msg=f"{part} {name}")
    assert saved["obs"]["count"] > 3 * args.num_envs * args.num_steps  # what training saw

    start = dataclasses.replace(args, num_iterations=0)
    *_, loaded = m.train(start, *env, m.RunLog(writer, start, "in-process", str(tmp_path)), read(args))
    *_, fresh = m.train(start, *env, m.RunLog(writer, start, "in-process", str(tmp_path)))
    writer.close()
    assert float(loaded.obs.count) == pytest.approx(saved["obs"]["count"] + args.num_envs)
    assert float(fresh.obs.count) == pytest.approx(1e-4 + args.num_envs)
    merged = ref.Running(saved["obs"]["mean"], saved["obs"]["var"], float(saved["obs"]["count"]))
    reset_obs = np.asarray(fresh.obs.mean) * (1e-4 + args.num_envs) / args.num_envs  # the first observations' mean (fresh: from 0)
    np.testing.assert_allclose(np.asarray(loaded.obs.mean), merged.mean + (reset_obs - merged.mean) * args.num_envs
                               / (merged.count + args.num_envs), rtol=1e-5, atol=1e-6)
    # the variance too: the saved one merged with the reset batch's (whose variance the fresh run's gives back)
    n, c0 = args.num_envs, 1e-4
    reset_var = (np.asarray(fresh.obs.var, np.float64) * (c0 + n) - c0 - reset_obs**2 * c0 * n / (c0 + n)) / n
    batch = reset_obs + np.sqrt(reset_var) * np.resize([-1.0, 1.0], (n, 1))  # n rows: that mean, that variance
    expected = merged.update(batch)
    np.testing.assert_allclose(np.asarray(loaded.obs.var), expected.var, rtol=1e-4, atol=1e-6)
    for name in ("mean", "var", "count"):  # no reward is scaled before the first step: all as saved
        np.testing.assert_allclose(np.asarray(getattr(loaded.reward, name)), saved["reward"][name], rtol=1e-6,
                                   err_msg=f"the reward's {name} after reloading")
    np.testing.assert_array_equal(np.asarray(loaded.discounted), 0.0)

    with pytest.raises(SystemExit) as exit_info:
        read(dataclasses.replace(args, normalize=False))
    assert exit_info.value.code == 2 and "saved with normalize True" in capsys.readouterr().err
