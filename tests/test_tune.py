"""tune.py: a small study finds the better of two learning rates planted far apart, one trial a process
or a population of trials as one process's agents; a failing trial is recorded and the study goes on; a
pruned trial stops its run; a trial's runs over several envs and seeds report to the pruner at steps that run
on from run to run; a killed study resumes without redoing what finished; bad input is refused in one line with
nothing written."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from helpers import ROOT
from optuna.trial import TrialState

import tune  # from the project's root, which helpers puts on the path

# PPO on CartPole-v1, 512 env steps an iteration: at 2.5e-3 its return climbs within a few iterations
FIXED = ["--num-envs", "4", "--num-steps", "128", "--num-iterations", "8", "--update-epochs", "4",
         "--num-minibatches", "4"]
SHORT = ["--", *FIXED]  # after --: the script's own arguments


def study(*args, out, timeout=600, script="ppo_torch.py"):
    return subprocess.run([sys.executable, str(ROOT / "tune.py"), script, "--out", str(out), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def trials(out):
    return optuna.load_study(study_name="tune", storage=f"sqlite:///{out / 'study.db'}").get_trials()


def test_a_study_finds_the_planted_learning_rate(tmp_path):
    started = time.time()
    proc = study("--space", "learning_rate=choice:1e-7,2.5e-3", "--sampler", "grid", "--pruner", "none", *SHORT,
                out=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    done = trials(tmp_path)
    assert [t.state for t in done] == [TrialState.COMPLETE] * 2
    best = max(done, key=lambda t: t.value)
    assert best.params == {"learning_rate": 2.5e-3}, [(t.params, t.value) for t in done]
    assert all(len(t.intermediate_values) >= 4 for t in done)  # each iteration's return reached the pruner
    assert "--learning-rate 0.0025" in (tmp_path / "best.sh").read_text()
    summary = json.loads((tmp_path / "summary.json").read_text())  # what it found, and the sweep's wall time
    runs = [json.loads(p.read_text())["time/total"] for p in tmp_path.glob("trials/*/*/summary.json")]
    assert summary["trials"] == {"complete": 2} and summary["best_params"] == best.params
    # the sweep's seconds: its trials one after the other, within the seconds the call to tune.py took
    assert summary["best_trial"] == best.number and len(runs) == 2
    assert sum(runs) < summary["time/total"] < time.time() - started


def test_a_population_is_one_process_each_agent_a_trial(tmp_path):
    """Optuna's two trials asked at once, trained as the two agents of one process: each trial told its own
    agent's final return, so the planted learning rate wins as it does trial by trial."""
    proc = study("--population", "2", "--trials", "2", "--space", "learning_rate=choice:1e-7,2.5e-3",
                 "--sampler", "grid", *SHORT, out=tmp_path, script="ppo_linen_agents.py")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    done = trials(tmp_path)
    assert [t.state for t in done] == [TrialState.COMPLETE] * 2
    [run_dir] = [p.parent for p in tmp_path.glob("trials/*/*/summary.json")]  # one process for both
    rates = json.loads((run_dir / "run.json").read_text())["args"]["learning_rates"]
    finals = json.loads((run_dir / "summary.json").read_text())["charts/episodic_return_final_per_agent"]
    assert [t.params["learning_rate"] for t in done] == rates and [t.value for t in done] == finals
    assert max(done, key=lambda t: t.value).params == {"learning_rate": 2.5e-3}, [(t.params, t.value) for t in done]


def test_a_failing_trial_is_recorded_and_the_study_goes_on(tmp_path):
    # 3 minibatches do not divide the batch of 512: the script refuses them when it starts, not tune.py's check
    proc = study("--space", "num_minibatches=choice:3,4", "--sampler", "grid", "--pruner", "none", "--",
                "--num-envs", "4", "--num-steps", "128", "--num-iterations", "2", out=tmp_path)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    state = {t.params["num_minibatches"]: t for t in trials(tmp_path)}
    assert state[3].state == TrialState.FAIL and "exit 2" in state[3].user_attrs["error"]
    assert state[4].state == TrialState.COMPLETE


def test_a_pruned_trial_stops_its_run(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    class Pruning:  # a trial whose pruner stops it at its first report
        number, params, reports = 0, {}, []

        def suggest_float(self, name, low, high, log):
            return 2.5e-3

        def report(self, value, step):
            self.reports.append(step)

        def should_prune(self):
            return True

    args, space = tune.Args("ppo_torch.py"), {"learning_rate": ("log", (1e-4, 1e-2))}
    fixed = [*FIXED[:5], "200", *FIXED[6:]]  # 200 iterations, not 8
    with pytest.raises(optuna.TrialPruned):
        tune.objective(Pruning(), args, space, fixed, {"CartPole-v1": (0.0, 1.0)}, 200, tmp_path)
    assert len(Pruning.reports) == 1
    assert not list(tmp_path.glob("trials/0/*/summary.json"))  # stopped long before its 200 iterations


def run_return(env_id, seed, iteration):
    """What a stand-in run returns at an iteration: distinct per env, seed and iteration."""
    return (-400.0 if env_id == "Acrobot-v1" else 0.0) + 100.0 * iteration + seed


class PolledRun:
    """A script's process as tune.run sees it, with no process: each poll writes its next iteration to an event
    file (the script's writer, its tags, in the run folder the script makes: env__variant__model__sSEED__time),
    the first with no return (no episode ended yet, as the script then writes none); then its summary, exit 0."""

    def __init__(self, command, **_):
        flag = lambda name: command[command.index(name) + 1]
        self.env_id, self.seed, self.iterations = flag("--env-id"), int(flag("--seed")), int(flag("--num-iterations"))
        self.folder = Path(flag("--log-dir")) / f"{self.env_id}__torch__small__s{self.seed}__1000"
        self.folder.mkdir(parents=True)
        from tensorboard.summary import Writer

        self.writer, self.done, self.returncode = Writer(str(self.folder)), 0, None

    def poll(self):
        if self.returncode is None and self.done < self.iterations:
            self.done += 1
            step = self.done * 512  # the script's step: env steps, which tune.py does not count by
            self.writer.add_scalar("time/iteration", 0.1, step)
            if self.done > 1:
                self.writer.add_scalar("charts/episodic_return", run_return(self.env_id, self.seed, self.done), step)
            self.writer.flush()
        elif self.returncode is None:
            self.writer.close()
            final = run_return(self.env_id, self.seed, self.iterations)
            (self.folder / "summary.json").write_text(json.dumps({"charts/episodic_return_final": final}))
            self.returncode = 0
        return self.returncode

    def send_signal(self, sig):  # a pruned trial's run: nothing here prunes one
        raise AssertionError(f"run {self.env_id} seed {self.seed} stopped at iteration {self.done}")

    def wait(self, timeout=None):
        return self.returncode


def test_a_trials_runs_over_envs_and_seeds_report_at_steps_that_run_on(tmp_path, monkeypatch):
    """A trial of 2 envs and 2 seeds, 3 iterations a run: run k (env by env, seed by seed) reports its iteration i
    at step 3k + i, with the mean of the runs done so far and this one's return: the steps strictly increase within
    the trial, every report is stored, and the last is the Hyperband pruner's max_resource (12). Steps restarted at
    1 for each run would compare one run's iteration with another trial's iteration on another env and seed (and
    Optuna drops a step reported twice). tune.py runs here from its command line, each run a PolledRun read by
    tune.py's own event-file reader; its only other stand-in is the half-second wait between reads."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(tune, "subprocess", SimpleNamespace(Popen=PolledRun, STDOUT=subprocess.STDOUT,
                                                            TimeoutExpired=subprocess.TimeoutExpired))
    monkeypatch.setattr(tune, "time", SimpleNamespace(sleep=lambda seconds: None, time=time.time))
    reported, report = [], optuna.trial.Trial.report

    def recorded(trial, value, step):  # each step in the order tune.py reports it, stored or not
        reported.append((trial.number, step))
        report(trial, value, step)

    monkeypatch.setattr(optuna.trial.Trial, "report", recorded)
    made, make_study = [], tune.make_study
    monkeypatch.setattr(tune, "make_study", lambda *args: made.append(make_study(*args)) or made[-1])
    ranges = {"CartPole-v1": (0.0, 500.0), "Acrobot-v1": (-500.0, 0.0)}
    monkeypatch.setattr(sys, "argv", [
        "tune.py", "ppo_torch.py", "--out", str(tmp_path), "--space", "learning_rate=log:1e-4:1e-2", "--sampler",
        "random", "--trials", "1", "--env-ids", *ranges, "--seeds", "1", "2", "--score-range",
        *(f"{env}={low:g}:{high:g}" for env, (low, high) in ranges.items()), "--", "--num-iterations", "3"])
    tune.main()
    [trial] = trials(tmp_path)
    assert trial.state == TrialState.COMPLETE and made[0].pruner._max_resource == 12
    norm = lambda env, seed, i: (run_return(env, seed, i) - ranges[env][0]) / (ranges[env][1] - ranges[env][0])
    runs, expected = [(env, seed) for env in ranges for seed in (1, 2)], {}
    for k, (env, seed) in enumerate(runs):  # iteration 1 has no return: 2 and 3 are reported
        done = sum(norm(*run, 3) for run in runs[:k])
        expected |= {3 * k + i: (done + norm(env, seed, i)) / (k + 1) for i in (2, 3)}
    steps = [step for number, step in reported if number == trial.number]
    assert all(a < b for a, b in zip(steps, steps[1:])), steps
    assert steps == list(expected) and trial.intermediate_values == pytest.approx(expected, rel=1e-12, abs=1e-12)
    assert trial.value == pytest.approx(sum(norm(*run, 3) for run in runs) / 4, rel=1e-12)


def test_a_killed_study_resumes_without_redoing_finished_trials(tmp_path):
    command = ["--space", "learning_rate=log:1e-4:1e-2", "--sampler", "random", "--pruner", "none", "--trials", "3",
               *SHORT]
    proc = subprocess.Popen([sys.executable, str(ROOT / "tune.py"), "ppo_torch.py", "--out", str(tmp_path), *command],
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.time() + 600
        while not (list(tmp_path.glob("trials/0/*/summary.json")) and list(tmp_path.glob("trials/1/*/run.json"))):
            assert time.time() < deadline and proc.poll() is None, "the first trial never finished"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # tune.py and its run, as a crash would
        proc.wait()
    first = trials(tmp_path)
    assert [t.state for t in first] == [TrialState.COMPLETE, TrialState.RUNNING]
    assert not (tmp_path / "summary.json").exists()  # bench.sh's sign that the sweep ended: not yet
    resumed = study(*command, out=tmp_path)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert "1 of 3 trials done" in resumed.stdout
    after = trials(tmp_path)
    assert [t.state for t in after] == [TrialState.COMPLETE, TrialState.FAIL, TrialState.COMPLETE,
                                        TrialState.COMPLETE]
    assert after[0].params == first[0].params and after[0].value == first[0].value
    assert after[2].params == first[1].params  # the trial cut off ran again, first
    assert len(list(tmp_path.glob("trials/0/*/summary.json"))) == 1  # the finished one did not
    assert json.loads((tmp_path / "summary.json").read_text())["trials"] == {"complete": 3, "fail": 1}


@pytest.mark.parametrize("script, args, says", [("ppo_torch.py", *case) for case in [
    (["--space", "learning_rte=log:1e-4:1e-2"], "'learning_rte' is not an argument"),
    (["--space", "learning_rate=float:1e-3:1e-3"], "an empty range"),
    (["--space", "learning_rate=log:0:1e-2"], "above 0"),
    (["--space", "learning_rate=log:1e-4:1e-2", "--", "--num-iterations", "0"], "below one iteration"),
    (["--space", "clip_coef=float:-1:0.3"], "clip_coef must be"),  # the script's own check, at each end
    (["--space", "learning_rate=log:1e-4:1e-2", "--env-ids", "CartPole-v1", "Acrobot-v1"], "--score-range"),
    (["--space", "learning_rate=log:1e-4:1e-2", "--sampler", "grid"], "a space of choices"),
    (["--space", "learning_rate=log:1e-4:1e-2", "--", "--seed", "3"], "tune.py sets them"),
    (["--population", "2", "--space", "learning_rate=log:1e-4:1e-2"], "not an agent script"),
]] + [("ppo_torch_agents.py", ["--population", "2", *case], says) for case, says in [
    (["--space", "num_envs=int:2:8"], "num_envs is one value per process"),
    (["--space", "learning_rate=log:1e-4:1e-2", "--", "--num-agents", "4"], "sets --num-agents"),
    (["--space", "learning_rate=log:1e-4:1e-2", "--", "--clip-coefs", "0.1", "0.2"], "values per agent"),
]])
def test_bad_input_is_refused_in_one_line(tmp_path, monkeypatch, capsys, script, args, says):
    monkeypatch.chdir(ROOT)  # in this process: each case would otherwise start torch and JAX again
    monkeypatch.setattr(sys, "argv", ["tune.py", script, "--out", str(tmp_path / "study"), *args])
    with pytest.raises(SystemExit) as refused:
        tune.main()
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert refused.value.code == 2 and len(lines) == 1 and lines[0].startswith("error:") and says in lines[0], err
    assert not (tmp_path / "study").exists()
