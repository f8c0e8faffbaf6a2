"""The contract every ppo_*.py keeps (SPEC section 2-3): arguments, files, tags, errors."""

import ast
import dataclasses
import math

import pytest
from helpers import ROOT, SCRIPTS, SUMMARY_KEYS, SYNC_TAGS, TAGS, TINY, load, read_json, run, run_ok, scalars

# SPEC section 2: the shared fields and their defaults, identical in every script
SHARED_ARGS = {
    "env_id": "CartPole-v1", "model": "small", "num_envs": 32, "num_steps": 256, "num_minibatches": 8,
    "update_epochs": 10, "num_iterations": 100, "learning_rate": 2.5e-4, "gamma": 0.99, "gae_lambda": 0.95,
    "clip_coef": 0.2, "clip_vloss": True, "ent_coef": 0.01, "vf_coef": 0.5, "max_grad_norm": 0.5,
    "adam_eps": 1e-5, "adam_betas": (0.9, 0.999), "bootstrap_truncation": True, "seed": 1,
    "sync_timing": False, "log_dir": "runs",
}
COMPILE_TOGGLES = {"jit", "jit_env", "compile_mode"}  # the only fields a variant may add
SECTIONS = ["imports", "Args", "environment helpers", "model", "rollout", "GAE", "loss and update",
            "training loop with logging", "main"]
DETERMINISTIC_TAGS = TAGS - {"charts/SPS", "time/iteration", "memory/peak_rss_mb"}


def test_all_scripts_found():
    assert {"ppo_linen.py", "ppo_torch.py"} <= set(SCRIPTS)


def test_shared_args_identical():
    reference = None
    for script in SCRIPTS:
        fields = {f.name: f for f in dataclasses.fields(load(script).Args)}
        assert set(fields) - set(SHARED_ARGS) <= COMPILE_TOGGLES, f"{script} adds {set(fields) - set(SHARED_ARGS)}"
        shared = {name: (fields[name].default, str(fields[name].type)) for name in SHARED_ARGS}
        assert {n: d for n, (d, _) in shared.items()} == SHARED_ARGS, script
        reference = reference or (script, shared)
        assert shared == reference[1], f"{script} and {reference[0]} differ in a type or default"


def test_every_field_has_help():
    for script in SCRIPTS:
        source = (ROOT / script).read_text()
        body = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Args").body
        for field, doc in zip(body, body[1:]):
            if isinstance(field, ast.AnnAssign):
                assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), \
                    f"{script}: field {field.target.id} has no docstring"


def test_sections_in_order():
    for script in SCRIPTS:
        lines = (ROOT / script).read_text().splitlines()
        assert [line[5:] for line in lines if line.startswith("# %% ")] == SECTIONS, script


def test_scripts_are_self_contained():
    """Each script can be copied alone: it imports no module of this project."""
    ours = {p.stem for p in ROOT.glob("*.py")} | {"tests", "helpers"}
    for script in SCRIPTS:
        tree = ast.parse((ROOT / script).read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & ours, f"{script} imports {imported & ours}"


def test_jax_scripts_do_not_import_torch():
    for script in SCRIPTS:
        if "torch" not in script:
            assert "import torch" not in (ROOT / script).read_text(), script


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """One tiny run per script, plus a second with the same seed for the determinism test."""
    runs = {}
    for script in SCRIPTS:
        log_dir = tmp_path_factory.mktemp(script.removesuffix(".py"))
        runs[script] = (run_ok(script, *TINY, log_dir=log_dir), run_ok(script, *TINY, log_dir=log_dir))
    return runs


@pytest.mark.parametrize("script", SCRIPTS)
def test_tiny_run_writes_the_contract(script, tiny_runs):
    run_dir, _ = tiny_runs[script]
    env_id, variant, model, seed, stamp = run_dir.name.split("__")
    assert (env_id, model, seed) == ("CartPole-v1", "small", "s1") and stamp.isdigit()

    info = read_json(run_dir / "run.json")
    assert info["variant"] == variant and info["args"]["num_envs"] == 4
    assert {"python", "jax", "jaxlib", "flax", "optax", "equinox", "gymnax", "torch"} <= set(info["versions"])
    assert info["device"] and info["cpu"]

    summary = read_json(run_dir / "summary.json")
    assert set(summary) == SUMMARY_KEYS
    assert summary["variant"] == variant and summary["num_iterations"] == 10 and summary["seed"] == 1
    assert summary["time/rollout_mean_8_end"] is None and summary["time/update_mean_8_end"] is None
    for key in ("time/startup", "time/iteration_0", "time/iteration_mean_1_7", "time/iteration_mean_8_end",
                "time/total", "memory/peak_rss_mb"):
        assert summary[key] > 0, key
    assert summary["time/total"] > summary["time/startup"] + summary["time/iteration_0"]
    assert summary["charts/episodic_return_final"] > 0

    logged = scalars(run_dir)
    assert TAGS <= set(logged) and not SYNC_TAGS & set(logged), set(logged) ^ TAGS
    steps = [step for step, _ in logged["time/iteration"]]
    assert steps == [4 * 16 * (i + 1) for i in range(10)]  # step = global env steps
    lr = [value for _, value in logged["charts/learning_rate"]]
    assert lr[0] == pytest.approx(2.5e-4) and lr[-1] == pytest.approx(2.5e-5)  # linear decay to 0
    assert all(math.isfinite(v) for tag in TAGS for _, v in logged[tag])


@pytest.mark.parametrize("script", SCRIPTS)
def test_same_seed_same_metrics(script, tiny_runs):
    first, second = (scalars(run_dir) for run_dir in tiny_runs[script])
    for tag in DETERMINISTIC_TAGS:
        assert first[tag] == second[tag], f"{tag} differs between two runs with seed 1"


@pytest.mark.parametrize("script", SCRIPTS)
def test_sync_timing(script, tmp_path):
    run_dir = run_ok(script, *TINY, "--sync-timing", "--env-id", "Breakout-MinAtar", "--no-bootstrap-truncation",
                     log_dir=tmp_path)
    summary = read_json(run_dir / "summary.json")
    assert summary["time/rollout_mean_8_end"] > 0 and summary["time/update_mean_8_end"] > 0
    assert summary["env_id"] == "Breakout-MinAtar"  # 10x10x4 grid observations, flattened
    assert SYNC_TAGS <= set(scalars(run_dir))


BAD_INPUTS = {
    "unknown env": (["--env-id", "NoSuchEnv-v0"], ["NoSuchEnv-v0", "CartPole-v1"]),
    "continuous actions": (["--env-id", "Pendulum-v1"], ["Pendulum-v1", "discrete", "CartPole-v1"]),
    "non-Box observations": (["--env-id", "FrozenLake-misc"], ["FrozenLake-misc", "Box", "CartPole-v1"]),
    "needs a download": (["--env-id", "MNISTBandit-bsuite"], ["MNISTBandit-bsuite", "download"]),
    "bad model": (["--model", "huge"], ["huge", "small", "medium", "large"]),
    "minibatches do not divide": (["--num-minibatches", "7"], ["num_minibatches", "7", "8192"]),
    "non-positive size": (["--num-envs", "0"], ["num_envs", "positive"]),
}


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input(script, case, tmp_path):
    args, words = BAD_INPUTS[case]
    log_dir = tmp_path / "runs"
    proc = run(script, *args, log_dir=log_dir)
    assert proc.returncode == 2, proc.stderr[-2000:]
    for word in words:
        assert word in proc.stderr, f"{word!r} not in: {proc.stderr[-2000:]}"
    assert "Traceback" not in proc.stderr
    assert not log_dir.exists() or not any(log_dir.iterdir()), "a bad run left files behind"
