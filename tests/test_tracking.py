"""--track: a run sent to MLflow (read back through MLflow's own client) or to Weights & Biases (offline,
as a user without an account runs it); neither library imported by a run that does not ask for it, and
a missing one refused before anything is written; and the off-policy scripts' refusal of a --profile
their run is too short for."""

import ast
import importlib.util
import os

import pytest
from helpers import DQN_SCRIPTS, ROOT, SAC_SCRIPTS, SCRIPTS, TD3_SCRIPTS, TINY, load, read_json, run, run_ok, scalars

TRACKED = ["ppo_linen.py", "ppo_torch.py"]  # one per framework: the code is the same text in every script
EVERY_SCRIPT = SCRIPTS + DQN_SCRIPTS + TD3_SCRIPTS + SAC_SCRIPTS


@pytest.mark.parametrize("script", TRACKED)
def test_mlflow_holds_the_params_the_metrics_and_the_model(script, tmp_path):
    from mlflow.tracking import MlflowClient

    run_dir = run_ok(script, *TINY, "--track", "mlflow", "--save-model", "--eval-episodes", "2",
                     log_dir=tmp_path)
    client = MlflowClient(f"sqlite:///{run_dir}/mlflow.db")  # the store the run made in its own directory
    (tracked,) = client.search_runs([client.get_experiment_by_name("benchback").experiment_id])
    assert tracked.info.status == "FINISHED" and tracked.info.run_name == run_dir.name
    info = read_json(run_dir / "run.json")
    assert tracked.data.params["variant"] == info["variant"]
    assert tracked.data.params["num_envs"] == str(info["args"]["num_envs"])
    logged = scalars(run_dir)
    assert set(tracked.data.metrics) == set(logged)  # every TensorBoard tag, eval/ included
    for tag in ("charts/episodic_return", "time/iteration", "losses/entropy"):
        history = sorted((m.step, m.value) for m in client.get_metric_history(tracked.info.run_id, tag))
        assert [s for s, _ in history] == [s for s, _ in logged[tag]]
        assert [v for _, v in history] == pytest.approx([v for _, v in logged[tag]], rel=1e-6)  # (float32 there)
    saved = read_json(run_dir / "summary.json")["saved_model"]
    assert [a.path for a in client.list_artifacts(tracked.info.run_id)] == [saved]


def test_wandb_offline_writes_its_run_beside_the_run_directories(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    proc = run("ppo_torch.py", *TINY, "--track", "wandb", log_dir=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (run_dir,) = tmp_path.glob("CartPole-v1__*")
    (offline,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    data = offline.read_bytes()
    assert b"charts/episodic_return" in data and b"losses/approx_kl" in data and run_dir.name.encode() in data
    assert not (run_dir / "wandb").exists()  # inside the run directory, W&B would read its copy of the events too


def test_neither_tracker_imported_without_track():
    """The trackers are imported inside the functions that --track calls, never at a script's top level."""
    for script in EVERY_SCRIPT:
        tree = ast.parse((ROOT / script).read_text())
        top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))
               for alias in (node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")])}
        assert not top & {"mlflow", "wandb"}, script


@pytest.mark.parametrize("script", EVERY_SCRIPT)
@pytest.mark.parametrize("tracker,package", [("mlflow", "mlflow-skinny"), ("wandb", "wandb")])
def test_a_missing_tracker_is_refused(script, tracker, package, tmp_path, monkeypatch, capsys):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == tracker else find_spec(name, *a))
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", [script, "--log-dir", str(tmp_path / "runs"), "--track", tracker])
    with pytest.raises(SystemExit) as exit_info:
        load(script).main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and f"--track {tracker}" in err and f"pip install {package}" in err, err
    assert not os.path.exists(tmp_path / "runs")


@pytest.mark.parametrize("script", DQN_SCRIPTS + TD3_SCRIPTS + SAC_SCRIPTS)
def test_an_offpolicy_profile_of_too_few_iterations_is_refused(script, tmp_path, monkeypatch, capsys):
    """(PPO's case is in test_contract.py's bad inputs.) --profile traces the last two iterations after a first."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", [script, "--log-dir", str(tmp_path / "runs"), "--profile", "--total-timesteps",
                                     "400", "--log-frequency", "200", "--learning-starts", "100"])
    with pytest.raises(SystemExit) as exit_info:
        load(script).main()
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "--profile" in err and "at least 3 * log_frequency = 600, got 400" in err, err
    assert not os.path.exists(tmp_path / "runs")
