"""tune.py: Optuna over any benchback script's arguments, as CleanRL's tuner does it.

Each trial runs the script in a fresh process (as bench.sh runs it) once per env and seed, and is scored by
the runs' final return (the script's charts/episodic_return_final: the episodes of its last 10 iterations),
averaged over the runs; with several envs each env's return is first normalized by --score-range. While a run
trains, tune.py reads its event file and reports every iteration's return to the pruner, which may stop the
trial early. The study is an SQLite file: the same command again resumes it (a trial cut off by a kill or
Ctrl-C runs again; finished ones are kept), and `optuna-dashboard sqlite:///OUT/study.db` opens it. When every
trial is done, OUT/summary.json says what the study found and how long it took (bench.sh's tunesweep preset
takes it as the sign that a sweep ended).

    python tune.py ppo_linen.py --space learning_rate=log:1e-4:1e-2 ent_coef=float:0:0.05 \\
        --env-ids CartPole-v1 Acrobot-v1 --score-range CartPole-v1=0:500 Acrobot-v1=-500:0 --trials 40 \\
        -- --num-iterations 50

After --, the script's own arguments, which every trial runs with.

--population N trains N trials at once, as the N agents of one process of an agent script (ppo_*_agents.py):
Optuna is asked for N trials, the script runs them with --num-agents N and each agent's own values (it takes
learning_rate, ent_coef and clip_coef per agent), and each trial is told its agent's final return. No trial is
pruned (the agents run as one program, to its end); agent i is seeded seed + i.

A search space entry is NAME=KIND:..., NAME one of the script's arguments: log:LOW:HIGH (log-uniform),
float:LOW:HIGH, int:LOW:HIGH, or choice:A,B,... (--space-file: one entry per line, # comments).
"""

import contextlib
import dataclasses
import importlib.util
import io
import json
import math
import os
import shlex
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

START_TIME = time.time()  # before the heavy imports: summary.json's time/total is the sweep's whole wall time

import tyro

try:
    import optuna
    from optuna.trial import TrialState
except ImportError:
    print("error: tune.py needs Optuna: pip install -r requirements-dev.txt (it pins optuna)", file=sys.stderr)
    sys.exit(2)

from analysis.runs import python_value


@dataclass
class Args:
    script: tyro.conf.Positional[str]
    """the script to tune (ppo_linen.py, dqn_torch.py, ...)"""
    space: tuple[str, ...] = ()
    """the search space: NAME=log:LOW:HIGH, NAME=float:LOW:HIGH, NAME=int:LOW:HIGH or NAME=choice:A,B,..."""
    space_file: str | None = None
    """a file of more search space entries, one per line (# starts a comment)"""
    env_ids: tuple[str, ...] = ()
    """the envs each trial runs on (default: the script's default env)"""
    seeds: tuple[int, ...] = (1,)
    """the seeds each trial runs with, on each env"""
    score_range: tuple[str, ...] = ()
    """ENV=LOW:HIGH per env, a return mapped to (return - LOW) / (HIGH - LOW); needed with several envs"""
    trials: int = 20
    """trials in the study, counting those a resumed study already finished"""
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    """TPE (Optuna's default), uniform random, or every combination of a space of choices"""
    pruner: Literal["hyperband", "median", "none"] = "hyperband"
    """stop poor trials early from their iterations' returns: Hyperband, the median rule, or never"""
    sampler_seed: int = 0
    """the sampler's seed (a study resumed with the same seed samples anew from where it was)"""
    out: str | None = None
    """the study's folder: study.db, trials/<number>/ (each run and its log), best.sh, summary.json
    (default: runs/tune/<script>)"""
    population: int = 0
    """train this many trials at once, as the agents of one process of an agent script (0: a process per trial)"""


SPACE_KINDS = ("log", "float", "int", "choice")
OWN_ARGS = ("env_id", "seed", "log_dir")  # set by tune.py for each run


def fail(message: str):
    """Bad input: one line on stderr, exit code 2, nothing written."""
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


class RunFailed(Exception):
    """A trial's run that did not give a score: the trial is recorded as failed, the study goes on."""


# %% the script and the search space
def load_script(path: str):
    """The script as a module (its Args, check_args and defaults), without running it."""
    if not path.endswith(".py") or not os.path.isfile(path):
        fail(f"{path!r} is not a script here (one of benchback's *.py files)")
    spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not hasattr(module, "Args") or not hasattr(module, "check_args"):
        fail(f"{path} has no Args and check_args: not one of benchback's training scripts")
    return module


def parse_space(entries: list[str], fields: dict) -> dict[str, tuple]:
    """{name: (kind, values)} from NAME=KIND:..., each checked against the script's arguments."""
    space = {}
    for entry in entries:
        name, _, spec = entry.partition("=")
        name, (kind, _, rest) = name.strip().replace("-", "_"), spec.partition(":")
        if name not in fields or name in OWN_ARGS:
            fail(f"--space {entry!r}: {name!r} is not an argument tune.py can set in the script"
                 f"{' (tune.py sets it per run)' if name in OWN_ARGS else ''}; its arguments: {', '.join(fields)}")
        if kind not in SPACE_KINDS:
            fail(f"--space {entry!r}: the kind must be one of {', '.join(SPACE_KINDS)}, got {kind!r}")
        if kind == "choice":
            values = tuple(python_value(v) for v in rest.split(",") if v)
            if not values:
                fail(f"--space {entry!r}: no choices")
        else:
            try:
                low, high = (int(v) if kind == "int" else float(v) for v in rest.split(":"))
            except ValueError:
                fail(f"--space {entry!r}: a range is {kind}:LOW:HIGH")
            if not low < high:
                fail(f"--space {entry!r}: an empty range ({low} is not below {high})")
            if kind == "log" and low <= 0:
                fail(f"--space {entry!r}: a log range must be above 0")
            values = (low, high)
        space[name] = (kind, values)
    if not space:
        fail("no search space: give --space NAME=KIND:... or --space-file")
    return space


def flags(params: dict) -> list[str]:
    """The script's command-line flags for these values."""
    out = []
    for name, value in params.items():
        flag = name.replace("_", "-")
        out += [f"--{flag}" if value else f"--no-{flag}"] if isinstance(value, bool) else [f"--{flag}", str(value)]
    return out


def check_space(module, fixed: list[str], space: dict, env_ids) -> int:
    """Refuse what the script would refuse, at each end of each range; return the iterations of a run."""
    args = parse_script_args(module, fixed)
    iterations = args.num_iterations if hasattr(args, "num_iterations") else args.total_timesteps // args.log_frequency
    if iterations < 1:
        fail(f"a budget below one iteration ({' '.join(fixed)}): a trial would report nothing")
    for env_id in env_ids:
        args = parse_script_args(module, fixed + ["--env-id", env_id])
        for name, (_, values) in space.items():
            for value in values:  # the script's own check, each end of each range (it exits 2, naming the fault)
                module.check_args(dataclasses.replace(args, **{name: value}))
    return iterations


def parse_script_args(module, argv: list[str]):
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
            return tyro.cli(module.RunArgs, args=argv)
    except SystemExit:
        fail(f"the script does not take the arguments {' '.join(argv)!r} (its --help lists what it takes)")


# %% a trial: the script's runs
def stop(proc: subprocess.Popen):
    """As bench.sh stops a run: SIGINT (it closes its logs), then harder."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass


class Returns:
    """A running script's iterations' returns, read from its event file as it writes them."""

    def __init__(self, folder: Path, env_id: str, seed: int):
        self.pattern, self.folder, self.loaders, self.iterations = f"{env_id}__*__s{seed}__*/*tfevents*", folder, {}, 0

    def new(self) -> list[tuple[int, float]]:
        """(iterations so far, return) for each return written since the last call."""
        from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
        from tensorboard.util import tensor_util

        for path in self.folder.glob(self.pattern):
            self.loaders.setdefault(path, EventFileLoader(str(path)))
        out = []
        for loader in self.loaders.values():
            for event in loader.Load():
                for v in event.summary.value:
                    if v.tag == "time/iteration":
                        self.iterations += 1
                    elif v.tag == "charts/episodic_return":
                        out.append((self.iterations, float(tensor_util.make_ndarray(v.tensor))))
        return out


def run(command: list[str], folder: Path, env_id: str, seed: int, report=None) -> dict:
    """One run, reporting its iterations' returns as it goes (report: None, not at all); its summary."""
    folder.mkdir(parents=True, exist_ok=True)
    log = folder / f"{env_id}__s{seed}.log"
    with open(log, "w") as f:
        proc = subprocess.Popen(command, stdout=f, stderr=subprocess.STDOUT)
    returns = Returns(folder, env_id, seed)
    try:
        while proc.poll() is None:
            time.sleep(0.5)
            for iteration, episodic_return in returns.new() if report else ():
                if report(iteration, episodic_return):
                    stop(proc)
                    raise optuna.TrialPruned(f"pruned at iteration {iteration}")
    finally:
        stop(proc)  # Ctrl-C, a pruned or a failed trial: no run is left behind
    summaries = list(folder.glob(f"{env_id}__*__s{seed}__*/summary.json"))
    if proc.returncode or not summaries:
        raise RunFailed(f"{env_id} seed {seed}: exit {proc.returncode}, see {log}")
    return json.loads(summaries[0].read_text())


def final_return(summary: dict, env_id: str, seed: int, agent: int | None = None) -> float:
    """The run's final return (agent: that agent's in an agent script's run), or RunFailed if it has none."""
    final = (summary["charts/episodic_return_final"] if agent is None else
             summary["charts/episodic_return_final_per_agent"][agent])
    if final is None:
        raise RunFailed(f"{env_id} seed {seed}: no episode ended in its last iterations, so no final return")
    return final


def suggest(trial, space: dict) -> dict:
    params = {}
    for name, (kind, values) in space.items():
        if kind == "choice":
            params[name] = trial.suggest_categorical(name, values)
        elif kind == "int":
            params[name] = trial.suggest_int(name, *values)
        else:
            params[name] = trial.suggest_float(name, *values, log=kind == "log")
    return params


def normalized(ranges: dict, env_id: str, x: float) -> float:
    return (x - ranges[env_id][0]) / (ranges[env_id][1] - ranges[env_id][0])


def objective(trial, args: Args, space: dict, fixed: list[str], ranges: dict, iterations: int, out: Path):
    params = suggest(trial, space)
    runs, folder = [(env_id, seed) for env_id in ranges for seed in args.seeds], out / "trials" / str(trial.number)
    scores = []
    for k, (env_id, seed) in enumerate(runs):
        def report(iteration, episodic_return):  # the runs done so far and this one's latest iteration
            latest = normalized(ranges, env_id, episodic_return)
            trial.report((sum(scores) + latest) / (k + 1), k * iterations + iteration)
            return trial.should_prune()

        command = [sys.executable, args.script, *fixed, *flags(params), "--env-id", env_id, "--seed", str(seed),
                   "--log-dir", str(folder)]
        try:
            summary = run(command, folder, env_id, seed, report)
            scores.append(normalized(ranges, env_id, final_return(summary, env_id, seed)))
        except RunFailed as e:
            trial.set_user_attr("error", str(e))  # failed, not interrupted: a resumed study keeps it
            raise
    return sum(scores) / len(scores)


def population(study, size: int, args: Args, space: dict, fixed: list[str], ranges: dict, out: Path):
    """size trials asked at once and trained as the agents of one process per env and seed, each told its
    agent's score (a run that fails fails them all; an agent without a final return, its own trial)."""
    trials = [study.ask() for _ in range(size)]
    params = [suggest(trial, space) for trial in trials]
    per_agent = [x for name in space for x in (f"--{name.replace('_', '-')}s", *(str(p[name]) for p in params))]
    folder, scores = out / "trials" / f"{trials[0].number}-{trials[-1].number}", {t.number: [] for t in trials}
    errors = {}
    for env_id in ranges:
        for seed in args.seeds:
            command = [sys.executable, args.script, *fixed, "--num-agents", str(size), *per_agent,
                       "--env-id", env_id, "--seed", str(seed), "--log-dir", str(folder)]
            try:
                summary = run(command, folder, env_id, seed)
            except RunFailed as e:
                errors.update({t.number: str(e) for t in trials})
                continue
            for agent, trial in enumerate(trials):
                try:
                    final = final_return(summary, env_id, seed, agent)
                    scores[trial.number].append(normalized(ranges, env_id, final))
                except RunFailed as e:
                    errors.setdefault(trial.number, f"agent {agent}: {e}")
    for trial in trials:
        if failed := trial.number in errors:
            trial.set_user_attr("error", errors[trial.number])  # failed, not interrupted: a resumed study keeps it
        score = None if failed else sum(scores[trial.number]) / len(scores[trial.number])
        try:
            study.tell(trial, score, state=TrialState.FAIL if failed else TrialState.COMPLETE)
        except RuntimeError as e:  # a grid sampler stops the study when its grid is done, which only inside
            if "Study.stop" not in str(e):  # optimize() it may: the trial was stored before it raised
                raise


# %% the study
def score_ranges(args: Args, env_ids: tuple[str, ...]) -> dict[str, tuple[float, float]]:
    ranges = {}
    for entry in args.score_range:
        env_id, _, rest = entry.partition("=")
        try:
            low, high = map(float, rest.split(":"))
        except ValueError:
            fail(f"--score-range {entry!r}: give ENV=LOW:HIGH")
        if not low < high or env_id not in env_ids:
            fail(f"--score-range {entry!r}: LOW must be below HIGH, for one of the envs tuned ({', '.join(env_ids)})")
        ranges[env_id] = (low, high)
    if len(env_ids) > 1 and set(ranges) != set(env_ids):
        fail(f"several envs need --score-range for each, to put their returns on one scale: "
             f"{', '.join(e for e in env_ids if e not in ranges)} has none")
    return {env_id: ranges.get(env_id, (0.0, 1.0)) for env_id in env_ids}


def make_study(args: Args, space: dict, setup: dict, iterations: int, out: Path):
    """The study in out/study.db: created, or resumed where it holds the same setup."""
    sampler = {"tpe": lambda: optuna.samplers.TPESampler(seed=args.sampler_seed),
               "random": lambda: optuna.samplers.RandomSampler(seed=args.sampler_seed),
               "grid": lambda: optuna.samplers.GridSampler({n: list(v) for n, (_, v) in space.items()},
                                                           seed=args.sampler_seed)}[args.sampler]()
    reports = iterations * len(args.seeds) * len(setup["env_ids"])  # the most a trial reports
    pruner = {"hyperband": lambda: optuna.pruners.HyperbandPruner(min_resource=max(1, iterations // 10),
                                                                  max_resource=reports),
              "median": lambda: optuna.pruners.MedianPruner(n_startup_trials=5, n_warmup_steps=iterations // 4),
              "none": optuna.pruners.NopPruner}[args.pruner]()
    existed = (out / "study.db").exists()
    out.mkdir(parents=True, exist_ok=True)
    study = optuna.create_study(storage=f"sqlite:///{out / 'study.db'}", study_name="tune", sampler=sampler,
                                pruner=pruner, direction="maximize", load_if_exists=True)
    if not existed:
        for key, value in setup.items():
            study.set_user_attr(key, value)
    elif {k: study.user_attrs.get(k) for k in setup} != setup:
        fail(f"{out / 'study.db'} holds a study of another setup ({study.user_attrs}); give another --out")
    return study


def resume(study) -> int:
    """Trials cut off by a kill or Ctrl-C run again (unless a later trial has their values); the trials done."""
    trials = study.get_trials(deepcopy=False)
    for t in trials:
        if t.state == TrialState.RUNNING:  # its process was killed
            study.tell(t.number, state=TrialState.FAIL)
    trials = study.get_trials(deepcopy=False)
    cut = [t for t in trials if t.state == TrialState.FAIL and "error" not in t.user_attrs]
    for t in cut:
        if not any(u.number > t.number and u.params == t.params for u in trials):
            study.enqueue_trial(t.params)
    return sum(t.state in (TrialState.COMPLETE, TrialState.PRUNED) or "error" in t.user_attrs for t in trials
               if t.state.is_finished())


def summarize(study, args: Args, fixed: list[str], out: Path):
    """The trials as a table, and once one is complete the best one's command (OUT/best.sh); OUT/summary.json."""
    from rich.console import Console
    from rich.table import Table

    trials = study.get_trials(deepcopy=False)
    states = [t.state.name.lower() for t in trials]
    best = study.best_trial if "complete" in states else None
    table = Table("trial", "state", "score", *next(iter([t.params for t in trials if t.params]), {}),
                  title=f"{args.script}: {len(trials)} trials ({out / 'study.db'})")
    for t in sorted(trials, key=lambda t: -t.value if t.value is not None else math.inf):
        table.add_row(str(t.number), t.state.name.lower(), f"{t.value:.4g}" if t.value is not None else "–",
                      *(f"{v:.4g}" if isinstance(v, float) else str(v) for v in t.params.values()))
    Console().print(table)
    if best is not None:
        command = shlex.join(["python", args.script, *fixed, *flags(best.params)])
        (out / "best.sh").write_text(f"# tune.py's best trial, {best.number}: score {best.value:.6g}\n{command}\n")
        print(f"best: trial {best.number}, score {best.value:.6g}\n{command}")
    (out / "summary.json").write_text(json.dumps(
        {"script": args.script, "trials": {state: states.count(state) for state in sorted(set(states))},
         "best_trial": best and best.number, "best_score": best and best.value, "best_params": best and best.params,
         "time/total": time.time() - START_TIME}, indent=2))


def main():
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)  # after --: the script's own arguments
    args, fixed = tyro.cli(Args, args=argv[:cut], description=__doc__), argv[cut + 1:]
    if args.trials < 1 or args.population < 0:
        fail(f"--trials must be at least 1 and --population at least 0, got {args.trials} and {args.population}")
    module = load_script(args.script)
    fields = {f.name: f for f in dataclasses.fields(module.RunArgs)}
    if args.population and "num_agents" not in fields:
        fail(f"--population trains trials as the agents of one process: {args.script} is not an agent script "
             "(ppo_linen_agents.py, ppo_nnx_agents.py, ppo_torch_agents.py)")
    if any(a.split("=")[0].lstrip("-").replace("-", "_") in OWN_ARGS for a in fixed if a.startswith("--")):
        fail(f"the script's arguments set one of {', '.join(OWN_ARGS)}: tune.py sets them (--env-ids, --seeds, --out)")
    entries = list(args.space)
    if args.space_file:
        try:
            lines = Path(args.space_file).read_text().splitlines()
        except OSError as e:
            fail(f"--space-file {args.space_file}: {e.strerror}")
        entries += [s for line in lines if (s := line.split("#")[0].strip())]
    space = parse_space(entries, fields)
    per_agent = [name for name in fields if f"{name}s" in fields]  # the values an agent script takes per agent
    if args.population and (shared := [name for name in space if name not in per_agent]):
        fail(f"--population: {', '.join(shared)} is one value per process, not per agent; "
             f"the agents' own: {', '.join(per_agent)}")
    if args.population and any(a.lstrip("-").replace("-", "_") in ("num_agents", *(f"{n}s" for n in per_agent))
                               for a in fixed):
        fail("--population sets --num-agents and the values per agent itself: leave them out of the script's arguments")
    if args.sampler == "grid" and any(kind != "choice" for kind, _ in space.values()):
        fail("--sampler grid needs a space of choices only (NAME=choice:A,B,...)")
    env_ids = args.env_ids or (fields["env_id"].default,)
    ranges = score_ranges(args, env_ids)
    iterations = check_space(module, fixed, space, env_ids)
    out = Path(args.out or os.path.join("runs", "tune", Path(args.script).stem))
    setup = {"script": args.script, "script_args": fixed, "space": entries, "env_ids": list(env_ids),
             "seeds": list(args.seeds), "score_range": {e: list(r) for e, r in ranges.items()}}
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = make_study(args, space, setup, iterations, out)
    done = resume(study)
    print(f"tune.py: {args.script}, {done} of {args.trials} trials done, study in {out / 'study.db'}")
    try:
        while args.population and done < args.trials:
            size = min(args.population, args.trials - done)
            population(study, size, args, space, fixed, ranges, out)
            done += size
        if done < args.trials:
            study.optimize(lambda t: objective(t, args, space, fixed, ranges, iterations, out),
                           n_trials=args.trials - done, catch=(RunFailed,))
    except KeyboardInterrupt:
        print("interrupted: the same command resumes the study", file=sys.stderr)
        sys.exit(130)
    summarize(study, args, fixed, out)


if __name__ == "__main__":
    main()
