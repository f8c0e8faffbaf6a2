"""What the tests share: the scripts, running them, reading what a run wrote."""

import collections
import gzip
import importlib.util
import json
import math
import os
import pstats
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the analysis package, as analyze.py imports it
SCRIPTS = sorted(p.name for p in ROOT.glob("ppo_*.py"))  # later scripts join every test by themselves
GYMNASIUM_SCRIPTS = [s for s in SCRIPTS if s.endswith("_gymnasium.py")]  # their envs step on the CPU
GYMNAX_SCRIPTS = [s for s in SCRIPTS if s not in GYMNASIUM_SCRIPTS]  # JAX envs: Gymnax and Craftax
AGENT_SCRIPTS = [s for s in SCRIPTS if s.endswith("_agents.py")]  # N agents per process: tests/test_agents.py
# each eager torch script's compiled twin, which with --compile-mode none is the eager script (tests/test_compilation.py)
COMPILED_TWINS = {"ppo_torch.py": "ppo_torch_compile.py", "ppo_torch_gymnasium.py": "ppo_torch_compile_gymnasium.py"}
DQN_SCRIPTS = sorted(p.name for p in ROOT.glob("dqn_*.py"))  # off-policy: tests/test_dqn.py
TD3_SCRIPTS = sorted(p.name for p in ROOT.glob("td3_*.py"))  # off-policy, continuous: tests/test_td3.py
SAC_SCRIPTS = sorted(p.name for p in ROOT.glob("sac_*.py"))  # off-policy, continuous, stochastic: tests/test_sac.py
# the compiled off-policy CPU-env twins: their functions are the compiled Gymnax script's text and their loop the eager
# twin's, line for line (tests/test_shape.py), so a test that proves only those runs them in the originals alone
TEXT_COPIES = {f"{algo}_torch_compile_gymnasium.py" for algo in ("dqn", "td3", "sac")}


def originals(scripts: list[str]) -> list[str]:
    return [s for s in scripts if s not in TEXT_COPIES]
ONE_AGENT_SCRIPTS = [s for s in SCRIPTS if s not in AGENT_SCRIPTS]  # what the framework adapters load
CONTINUOUS_SCRIPTS = ONE_AGENT_SCRIPTS  # the Gaussian head: every script (the agent scripts: tests/test_agents.py)


def frameworks(script: str) -> set[str]:
    """The frameworks a script imports (the torch scripts step Gymnax envs in JAX)."""
    source = (ROOT / script).read_text()
    return {name for name in ("jax", "torch") if f"\nimport {name}\n" in source}

# small enough for seconds on 2 CPU cores, large enough for every overhead bucket (0, 1..7, 8..end)
TINY_ARGS = dict(num_envs=4, num_steps=16, num_minibatches=2, update_epochs=2, num_iterations=10)
TINY = [a for name, value in TINY_ARGS.items() for a in (f"--{name.replace('_', '-')}", str(value))]
STEADY = ["--num-iterations", "18"]  # after TINY: the fewest iterations with a steady state (analyze.py)

SUMMARY_KEYS = {
    "time/total", "charts/episodic_return_final", "saved_model", "eval/episodic_return", "eval/episodic_returns",
}
TAGS = {
    "charts/episodic_return", "charts/episodic_length", "charts/SPS", "charts/learning_rate",
    "losses/policy_loss", "losses/value_loss", "losses/entropy", "losses/approx_kl", "losses/clipfrac",
    "losses/explained_variance", "time/iteration", "memory/peak_rss_mb",
}
SYNC_TAGS = {"time/rollout", "time/update"}
AGENT_SUMMARY_KEYS = SUMMARY_KEYS | {"charts/episodic_return_final_per_agent"}


def summary_keys(script: str) -> set[str]:
    return AGENT_SUMMARY_KEYS if script in AGENT_SCRIPTS else SUMMARY_KEYS


def run(script: str, *args: str, log_dir, timeout: float = 900) -> subprocess.CompletedProcess:
    """The script as a user runs it: a fresh process, from the project root."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.run([sys.executable, str(ROOT / script), "--log-dir", str(log_dir), *args],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)


def refused_in_process(script: str, args, log_dir: Path, monkeypatch, capsys) -> str:
    """The script's own main() given these arguments, in this process (a fresh process per bad input would cost
    the suite minutes): exit 2, one line on stderr, no file written. Returns the line."""
    import pytest

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", [script, "--log-dir", str(log_dir), *args])  # a later --log-dir wins
    with pytest.raises(SystemExit) as exit_:
        load(script).main()
    return one_line_refusal(exit_.value.code, capsys.readouterr().err, log_dir)


def refused_in_a_fresh_process(script: str, args, log_dir: Path) -> str:
    """The same, as a user meets it: the command line, a fresh process."""
    proc = run(script, *args, log_dir=log_dir)
    return one_line_refusal(proc.returncode, proc.stderr, log_dir)


def one_line_refusal(code: int, err: str, log_dir: Path) -> str:
    assert code == 2 and len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not log_dir.exists() or not any(log_dir.iterdir()), "a bad run left files behind"
    return err


def bench(*args, python=sys.executable, timeout=900, env=None, **popen) -> subprocess.CompletedProcess:
    """bash bench.sh ARGS, its runs started with python."""
    return subprocess.run(["bash", str(ROOT / "bench.sh"), *map(str, args)], cwd=ROOT, capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, **(env or {}), "PYTHON": str(python)}, **popen)


def analyze(*args) -> subprocess.CompletedProcess:
    """python analyze.py ARGS, as a user runs it."""
    return subprocess.run([sys.executable, str(ROOT / "analyze.py"), *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


def run_ok(script: str, *args: str, log_dir) -> Path:
    """Runs the script, checks it succeeded, and returns the one run directory it made."""
    before = set(Path(log_dir).glob("*")) if Path(log_dir).exists() else set()
    proc = run(script, *args, log_dir=log_dir)
    assert proc.returncode == 0, f"{script} {args} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    made = set(Path(log_dir).glob("*")) - before
    assert len(made) == 1, f"expected one new run directory, got {made}"
    return made.pop()


JAX_SET_BY_SCRIPTS = ("jax_default_matmul_precision", "jax_cpu_enable_async_dispatch")  # jax.config, by main()


def ran_in_process(script: str, *args: str, log_dir, monkeypatch=None) -> Path:
    """run_ok's run through the script's own main() in this process, a fresh copy of the module (a process's start,
    seconds a run, saved where a test needs the run, not the command line): the one run directory it made."""
    import jax

    if monkeypatch is None:  # a fixture wider than a test's: a monkeypatch of this call's own
        with pytest.MonkeyPatch.context() as own:
            return ran_in_process(script, *args, log_dir=log_dir, monkeypatch=own)
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", [script, *args, "--log-dir", str(log_dir)])
    kept = {name: jax.config.values[name] for name in JAX_SET_BY_SCRIPTS}
    try:
        load(script, fresh=True).main()
    finally:  # what main() sets for its process, set back for the tests after it
        for name, value in kept.items():
            jax.config.update(name, value)
    (made,) = Path(log_dir).iterdir()
    return made


def read_json(path) -> dict:
    with open(path) as f:
        return json.load(f)


def scalars(run_dir) -> dict[str, list[tuple[int, float]]]:
    """Every scalar of a run directory, with TensorBoard's own reader and no down-sampling."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(run_dir), size_guidance={ea.TENSORS: 0, ea.SCALARS: 0})
    acc.Reload()
    out = {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    for tag in acc.Tags()["tensors"]:
        out[tag] = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
    return out


def wall_times(run_dir, tag="time/iteration") -> list[float]:
    """When each of a tag's events was written (its wall time), with TensorBoard's own reader."""
    from tensorboard.backend.event_processing import event_accumulator as ea

    acc = ea.EventAccumulator(str(run_dir), size_guidance={ea.TENSORS: 0, ea.SCALARS: 0})
    acc.Reload()
    return [e.wall_time for e in (acc.Tensors(tag) if tag in acc.Tags()["tensors"] else acc.Scalars(tag))]


def cleanrl_run(root, exp_name, seed, total_timesteps, returns, env_id="CartPole-v1", sps_times=None, **args) -> Path:
    """A run as CleanRL's scripts write one: its hyperparameters (args among them) as a text summary, an episode's
    return at the global step it ended on, and charts/SPS at each global step of sps_times with its wall time
    (torch's SummaryWriter, CleanRL's)."""
    from torch.utils.tensorboard import SummaryWriter

    run_dir = root / f"{env_id}__{exp_name}__{seed}__1700000000"
    writer = SummaryWriter(str(run_dir))
    args = dict(exp_name=exp_name, seed=seed, env_id=env_id, total_timesteps=total_timesteps, hf_entity="", **args)
    writer.add_text("hyperparameters", "|param|value|\n|-|-|\n" + "\n".join(f"|{k}|{v}|" for k, v in args.items()))
    for step, value in returns.items():
        writer.add_scalar("charts/episodic_return", value, step)
    for step, wall_time in (sps_times or {}).items():
        writer.add_scalar("charts/SPS", 100, step, walltime=wall_time)
    writer.close()
    return run_dir


REGIONS = ("rollout", "env_step", "policy_step", "update", "minibatch_step")  # --profile's names: PPO's
OFFPOLICY_REGIONS = ("iteration", "policy_step", "env_step", "buffer", "update")  # DQN's, TD3's and SAC's


def offpolicy_tiny(total_timesteps: int, learning_starts: int, log_frequency: int, profiled_log_frequency: int):
    """An off-policy test file's tiny run, and the same run with the shorter iterations --profile is given:
    --profile traces a run's last two iterations, and the trace's size (and the seconds the profilers take to
    write it, and the test to read it) grows with the steps in it."""
    def tiny(every):
        return ["--total-timesteps", str(total_timesteps), "--learning-starts", str(learning_starts),
                "--log-frequency", str(every), "--buffer-size", "1000", "--batch-size", "32"]
    return tiny(log_frequency), tiny(profiled_log_frequency)


def traced(run_dir) -> tuple[collections.Counter, bytes]:
    """What --profile wrote: its trace's ranges counted by name (jax.profiler's Perfetto trace or torch.profiler's
    Chrome trace, both gzipped JSON), and the compiled programs JAX describes beside it (the XPlane protobuf,
    where jax.named_scope's names are)."""
    traces = [*Path(run_dir).glob("plugins/profile/*/perfetto_trace.json.gz"), *Path(run_dir).glob("trace.json.gz")]
    assert len(traces) == 1, f"one trace expected in {run_dir}, found {traces}"
    with gzip.open(traces[0]) as f:
        events = json.load(f)["traceEvents"]
    names = collections.Counter(e["name"] for e in events if e.get("ph") == "X")
    return names, b"".join(p.read_bytes() for p in Path(run_dir).glob("plugins/profile/*/*.xplane.pb"))


def check_profiled(run_dir, script: str, regions: tuple[str, ...], once_per_iteration: tuple[str, ...]):
    """What --profile wrote: a trace of two iterations (each range in once_per_iteration twice), each named region
    in it (a range on the host) or in the compiled programs' metadata (a jax.named_scope's path), and Python's side,
    with the script's own RunLog.iteration, as a cProfile file."""
    names, compiled = traced(run_dir)
    assert [names[name] for name in once_per_iteration] == [2] * len(once_per_iteration), names.most_common(20)
    assert [r for r in regions if not names[r] and f"/{r}/".encode() not in compiled] == []
    python = pstats.Stats(str(Path(run_dir) / "python.prof")).stats  # (file, line, function) -> its times
    assert (script, "iteration") in {(os.path.basename(file), function) for file, _, function in python}
    if "iteration" in once_per_iteration:  # off-policy: analyze.py's split of a step, every µs of the iteration once
        from pytest import approx
        from analysis import profiles

        measured = profiles.measure(Path(run_dir))
        split = measured["split"]
        assert sum(split.values()) == approx(measured["iteration_ms"], rel=1e-3), split
        # the whole loop compiled as one program (Gymnax's JAX scripts), or a Python loop with every phase in it
        assert (split["loop"] > 0) != all(split[phase] > 0 for phase in profiles.PHASES), split
        modules = {e["args"]["hlo_module"] for e in profiles.read_trace(Path(run_dir))["traceEvents"]
                   if e.get("ph") == "X" and "args" in e}
        if modules and not split["loop"]:  # a JAX script's Python loop: its programs named as the split reads them
            assert {profiles.PROGRAMS[m] for m in modules & profiles.PROGRAMS.keys()} == set(profiles.PHASES[1:]), modules


def load(script: str, fresh: bool = False):
    """Imports a script as a module (its main() does not run). A fresh copy is private to its
    caller: what the caller changes in it (compiled functions, say) no other test sees."""
    name = script.removesuffix(".py")
    if name in sys.modules and not fresh:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / script)
    module = importlib.util.module_from_spec(spec)
    if not fresh:
        sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def script_args(m, continuous=False, **changes):
    """The script's own Args with these changes, each value left unset its action space's default."""
    import dataclasses

    return m.with_defaults(dataclasses.replace(m.RunArgs(), **changes), continuous)


def train_in_process(script: str, log_dir, watch=None, load_model=None, **changes):
    """Trains in this process, in a private copy of the script (training compiles torch's hot paths
    into its module), at the tiny size with these Args changes, from a saved model if given.
    watch(module) returns the RunLog class to log with (a subclass that watches each iteration),
    and may change the module first. Returns the module it trained in."""
    import inspect

    m = load(script, fresh=True)
    args = m.RunArgs(**{**TINY_ARGS, **changes}, log_dir=str(log_dir))
    env = ((m.make_env(args.env_id, args.num_envs),) if script in GYMNASIUM_SCRIPTS else
           m.make_torch_env(args.env_id, m.torch_device()) if getattr(args, "torch_env", False) else m.make_env(args.env_id))
    args = m.with_defaults(args, m.continuous(*env))
    saved = None
    if load_model:  # as main() reads it (Equinox's reader takes the env: its shapes make the model)
        saved = m.read_model(str(load_model), args, *(env if "env" in inspect.signature(m.read_model).parameters else ()))
    writer = m.Writer(str(log_dir))
    m.train(args, *env, (watch(m) if watch else m.RunLog)(writer, args, "in-process", str(log_dir)), saved)
    writer.close()
    return m


# where the twin tests draw start states: boxes of the state's entries (Gymnax's EnvState names; a
# Gymnasium or torch state vector holds them in this order), wide enough that many steps end the
# episode (pole down, cart out, goal reached)
STATE_BOXES = {
    "CartPole-v1": [{"x": 2.4, "x_dot": 2.0, "theta": 0.21, "theta_dot": 2.0}],
    "Acrobot-v1": [{"joint_angle1": math.pi, "joint_angle2": math.pi, "velocity_1": 4 * math.pi, "velocity_2": 9 * math.pi}],
    "MountainCar-v0": [{"position": (-1.2, 0.5), "velocity": 0.07},  # and at the goal, slow or not
                       {"position": (0.4, 0.5), "velocity": 0.07}, {"position": (0.48, 0.5), "velocity": 0.02}],
    "Pendulum-v1": [{"theta": math.pi, "theta_dot": 8.0}],  # never terminates: only the transition is compared
    "MountainCarContinuous-v0": [{"position": (-1.2, 0.6), "velocity": 0.07}, {"position": (0.4, 0.6), "velocity": 0.07}],
}


def random_state(rng, gymnax_env, params, boxes, t):
    """A state from the t-th box (in turn) that has not already ended its episode."""
    import jax

    while True:
        box = boxes[t % len(boxes)]
        fields = {f: np.float32(rng.uniform(*(r if isinstance(r, tuple) else (-r, r)))) for f, r in box.items()}
        state = gymnax_env.reset_env(jax.random.key(t), params)[1].replace(**fields, time=0)
        if not gymnax_env.is_terminal(state, params):
            return fields, state
