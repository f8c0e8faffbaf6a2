"""Guards on what every timing relies on (the graph-break guard of torch.compile is in
test_compilation.py):

- no host read inside an iteration beyond the one fetch of its statistics and, in a rollout, the
  action's hand-over to the environment: an .item(), .tolist(), .cpu(), .numpy(), float(), int()
  or Python `if` on a tensor, and an .item(), .tolist(), float() or `if` on a JAX array, is
  counted and fails the test (np.asarray of a JAX array reads its buffer directly and is not
  seen: inside jit, where the JAX scripts' rollout and update run, it fails to trace anyway);
  so is a call into either framework's profiler: a run without --profile makes none;
- --sync-timing measures the work: with known work put into every env step and every minibatch
  step (XLA's, which JAX runs asynchronously, in the JAX steps; a sleep in the host's), time/rollout
  and time/update each hold their work, and together they are the iteration (a deleted
  block_until_ready turns a phase's time into its dispatch time).
Both read one run per case (Breakout-MinAtar's flat grids, --sync-timing, the known work in):
its reads are counted with the work in, which makes none."""

import collections
import contextlib
import functools
import subprocess
import sys
import time

import pytest
from helpers import (AGENT_SCRIPTS, GYMNASIUM_SCRIPTS, OFFPOLICY_REGIONS, REGIONS, ROOT, SCRIPTS, TINY_ARGS,
                     load, train_in_process)

TORCH_READS = ("item", "tolist", "numpy", "cpu", "__float__", "__bool__", "__int__")
STEPS = TINY_ARGS["num_steps"]
case_id = lambda script, changes: " ".join([script, *(f"{k}={v}" for k, v in changes.items())])


def expected_reads(script, changes) -> collections.Counter:
    """The host reads of one iteration by design: the statistics' one fetch, and the actions the
    rollout hands to the environment each step (torch on a CPU to JAX as a NumPy view; to a CPU
    env as a host array; to the env in torch, none)."""
    if "torch" not in script:  # JAX: the fetch is one jax.device_get of every statistic
        return collections.Counter({"device_get": 1})  # (the CPU env's np.asarray(action) is not seen)
    reads = collections.Counter({"cpu": STEPS, "numpy": STEPS} if script in GYMNASIUM_SCRIPTS else {"numpy": STEPS})
    if changes.get("torch_env"):
        reads = collections.Counter()
    reads["numpy" if script in AGENT_SCRIPTS else "tolist"] += 1  # the agents' fetch: one stacked array, to NumPy
    return reads


@contextlib.contextmanager
def counting_host_reads(counts: collections.Counter, active: list):
    """Counts, while active[0], every host read of a torch tensor, every conversion of a JAX array,
    each jax.device_get (as one fetch), and each call into a profiler (--profile's ranges and traces)."""
    import jax
    import torch
    from jax._src.array import ArrayImpl

    originals = {name: getattr(torch.Tensor, name) for name in TORCH_READS}
    value = ArrayImpl._value

    def counted(name, method):
        @functools.wraps(method)
        def read(*args, **kwargs):
            if active[0]:
                counts[name] += 1
            return method(*args, **kwargs)
        return read

    def jax_value(self):
        if active[0]:
            counts["jax array"] += 1
        return value.fget(self)

    def device_get(tree):  # one fetch, however many arrays it holds
        if not active[0]:
            return get(tree)
        counts["device_get"] += 1
        active[0] = False
        try:
            return get(tree)
        finally:
            active[0] = True

    get = jax.device_get
    # JAX's public profiler functions (JAX itself calls its private ones); torch's classes stay classes, which
    # torch.compile checks against, and torch's own ranges (an optimizer's step opens one) are not --profile's
    profilers = {(jax.profiler, "TraceAnnotation"): jax.profiler.TraceAnnotation,
                 (jax.profiler, "start_trace"): jax.profiler.start_trace,
                 (torch.profiler.profile, "start"): torch.profiler.profile.start,
                 (torch.profiler.record_function, "__init__"): torch.profiler.record_function.__init__}
    regions = counted("torch.profiler.record_function", lambda *args, **kwargs: None)

    def record_function(self, name, *args, **kwargs):
        if name in REGIONS:
            regions(name)
        profilers[torch.profiler.record_function, "__init__"](self, name, *args, **kwargs)
    try:
        for name, method in originals.items():
            setattr(torch.Tensor, name, counted(name, method))
        for (owner, name), function in profilers.items():
            setattr(owner, name, counted(f"{owner.__name__}.{name}", function))
        torch.profiler.record_function.__init__ = record_function
        ArrayImpl._value, jax.device_get = property(jax_value), device_get
        yield
    finally:
        for name, method in originals.items():
            setattr(torch.Tensor, name, method)
        for (owner, name), function in profilers.items():
            setattr(owner, name, function)
        ArrayImpl._value, jax.device_get = value, get


PLANTED = {  # script, Args changes, the function wrapped, the read it makes after each call
    "an .item() per minibatch step (benchback-rl's PyTorch)": ("ppo_torch.py", {}, "minibatch_step",
                                                               lambda stats: stats.sum().item(), "item"),
    "a float() of a statistic per update (Linen without jit)": ("ppo_linen.py", {"jit": False}, "update",
                                                                lambda out: float(out[1]["entropy"]), "jax array"),
}


@pytest.mark.parametrize("planted", PLANTED)
def test_a_planted_host_read_is_counted(planted, tmp_path):
    """The guard can fail."""
    script, changes, name, read, kind = PLANTED[planted]

    def plant(m):
        original = getattr(m, name)

        def reading(*args, **kwargs):
            out = original(*args, **kwargs)
            read(out)
            return out
        setattr(m, name, reading)
        return m.RunLog

    counts, active = collections.Counter(), [True]
    with counting_host_reads(counts, active):
        train_in_process(script, tmp_path, plant, **changes)
    calls = TINY_ARGS["update_epochs"] * TINY_ARGS["num_minibatches"] if name == "minibatch_step" else 1
    assert counts[kind] >= TINY_ARGS["num_iterations"] * calls, dict(counts)


# ---- --sync-timing measures the work
SLEEP = 0.010  # seconds a host-side step sleeps: torch's minibatch step, a CPU env's step (both synchronous)
WORK_SIZE, WORK_ROUNDS = 192, 12  # XLA's work added to a JAX step: this many matmuls of this size


def jax_work(x):
    """x, after a chain of matmuls that depends on it: XLA cannot finish what depends on x sooner,
    and, unlike a host callback (which JAX on a CPU runs synchronously), it runs asynchronously,
    as the real work does: a deleted block_until_ready returns before it is done."""
    import jax
    import jax.numpy as jnp

    y = jnp.ones((WORK_SIZE, WORK_SIZE)) * (jnp.sum(x) * 1e-9)  # (jnp.full of an array reads it, outside jit)
    y = jax.lax.fori_loop(0, WORK_ROUNDS, lambda i, y: jnp.tanh(y @ y), y)
    return x + 0 * y[0, 0]


@functools.cache
def jax_work_seconds() -> float:
    """What jax_work takes on this machine now: the fastest of a few calls."""
    import jax
    import jax.numpy as jnp

    work, x = jax.jit(jax_work), jnp.ones(4)
    work(x).block_until_ready()
    times = []
    for _ in range(5):
        t = time.perf_counter()
        work(x).block_until_ready()
        times.append(time.perf_counter() - t)
    return min(times)


UNDO = []  # what with_delays changed outside the script's private copy, put back after its run


def with_delays(m, script, torch_env=False):
    """Every env step and every minibatch step of the module takes its work more: (seconds per env
    step, seconds per minibatch step). Compiled with the policy, the env in torch takes none (a sleep
    cannot go inside a graph; on a CPU torch's work is done when its call returns)."""
    env_work = not (torch_env and "compile" in script)
    # the env in torch is torch_envs.py's TorchEnv (its step a method: the class's, put back by undo_delays)
    owner, name = (load("torch_envs.py").TorchEnv, "step") if torch_env else (m, "env_step")
    env_step, minibatch_step = getattr(owner, name), m.minibatch_step

    def slow_env_step(*args, **kwargs):
        if script in GYMNASIUM_SCRIPTS or torch_env:  # a step on the host, or torch's (synchronous on a CPU)
            time.sleep(SLEEP)
            return env_step(*args, **kwargs)
        state, out = env_step(*args, **kwargs)  # a JAX env, stepped inside jit
        return state, out._replace(reward=jax_work(out.reward))

    def slow_minibatch_step(*args, **kwargs):
        if "torch" in script:
            time.sleep(SLEEP)
        else:  # the work flows into the minibatch, so into the weights the update returns
            args = [a._replace(advantages=jax_work(a.advantages)) if isinstance(a, m.Batch) else a for a in args]
        return minibatch_step(*args, **kwargs)

    if env_work:
        setattr(owner, name, slow_env_step)
        UNDO.append(lambda: setattr(owner, name, env_step))
    m.minibatch_step = slow_minibatch_step
    return (0.0 if not env_work else SLEEP if script in GYMNASIUM_SCRIPTS or torch_env else jax_work_seconds(),
            SLEEP if "torch" in script else jax_work_seconds())


# ---- one guarded run per case, read by both tests: every script on MinAtar (flat 10x10x4 grids)
ENV = dict(env_id="Breakout-MinAtar", bootstrap_truncation=False, sync_timing=True)
CASES = [(s, {"num_agents": 2} if s in AGENT_SCRIPTS else {}) for s in SCRIPTS] + [
    # on CartPole: without jit every call lowers its scans again, and lowering reads the small arrays
    # the scan closes over to embed them (MinAtar's env has one): a read --no-jit pays by design
    ("ppo_linen.py", {"jit": False, "env_id": "CartPole-v1"})] + [
    # the Gaussian head in torch (its noise, torch.distributions' Normal) and the JAX normalization it steps
    (s, {"env_id": "Pendulum-v1"}) for s in ("ppo_torch.py", "ppo_torch_compile.py")] + [
    # the envs in torch: no hand-over at all; compiled, the policy and env steps as one graph (Pendulum: with
    # the normalization in torch); eager, with the sleep in its env step
    ("ppo_torch.py", {"env_id": "CartPole-v1", "torch_env": True}),
    ("ppo_torch_agents.py", {"num_agents": 2, "env_id": "Pendulum-v1", "torch_env": True}),
    *(("ppo_torch_compile.py", {"env_id": e, "torch_env": True}) for e in ("CartPole-v1", "Pendulum-v1"))]
IDS = [case_id(*c) for c in CASES]


@pytest.fixture(scope="module")
def guarded_runs(tmp_path_factory):
    """get(script, changes): a tiny run of the script with its host reads counted and the known
    work put into its steps: (host reads of each iteration after the first, which sets up and
    compiles, RunLog's own work on the fetched statistics left out; each iteration's times;
    the work per env step and per minibatch step). Made once, read by both tests."""
    made = {}

    def get(script, changes):
        key = case_id(script, changes)
        if key in made:
            return made[key]
        windows, timed, work, counts, active, bar = [], [], [], collections.Counter(), [True], []

        def watch(m):
            work.extend(with_delays(m, script, changes.get("torch_env", False)))

            class Bar(m.Progress):  # what the progress bar says before iteration 0 ends
                def add_task(self, description, *args, **kwargs):
                    bar.append(description)
                    return super().add_task(description, *args, **kwargs)
            m.Progress = Bar

            class Watching(m.RunLog):
                def iteration(self, iteration, times, stats):
                    windows.append(collections.Counter(counts))
                    timed.append(times)
                    counts.clear()
                    active[0] = False
                    try:
                        return super().iteration(iteration, times, stats)
                    finally:
                        active[0] = True
            return Watching

        try:
            with counting_host_reads(counts, active):
                train_in_process(script, tmp_path_factory.mktemp("guarded"), watch, **{**ENV, **changes})
        finally:
            while UNDO:
                UNDO.pop()()
        made[key] = windows[1:], timed[1:], work, bar
        return made[key]

    return get


@pytest.mark.parametrize("script,changes", CASES, ids=IDS)
def test_no_host_read_but_the_fetch_and_the_handover(script, changes, guarded_runs):
    expected = expected_reads(script, changes)
    seen, *_ = guarded_runs(script, changes)
    assert len(seen) == TINY_ARGS["num_iterations"] - 1
    for i, reads in enumerate(seen, start=1):
        assert reads == expected, f"iteration {i}: host reads {dict(reads)}, by design {dict(expected)}"


@pytest.mark.parametrize("script,changes", CASES, ids=IDS)
def test_the_bar_says_iteration_0_compiles_where_it_does(script, changes, guarded_runs):
    """Iteration 0 may take seconds: until it ends the bar names it, and says it compiles where this run
    compiles (every JAX script; the torch scripts where torch.compile runs or a Gymnax env is jitted)."""
    torch_env = changes.get("torch_env", False)
    compiles = {"ppo_torch_gymnasium.py": False, "ppo_torch.py": not torch_env,
                "ppo_torch_agents.py": changes.get("compile", False) or not torch_env}.get(script, True)
    *_, bar = guarded_runs(script, changes)
    assert len(bar) == 1 and bar[0].startswith("iteration 0") and ("compiling" in bar[0]) == compiles, bar


@pytest.mark.parametrize("script,changes", CASES, ids=IDS)
def test_sync_timing_splits_measure_the_work(script, changes, guarded_runs):
    _, timed, work, _ = guarded_runs(script, changes)
    # at least a quarter of it (a missing sync leaves next to nothing): XLA's matmuls spread over every core, so
    # a calibration made while the other test worker was busy took twice a run's (CI: 0.49 of it), load adds more
    rollout_work = STEPS * work[0] / 4
    update_work = TINY_ARGS["update_epochs"] * TINY_ARGS["num_minibatches"] * work[1] / 4
    for i, times in enumerate(timed, start=1):
        rest = times["iteration"] - times["rollout"] - times["update"]
        assert times["rollout"] >= rollout_work, f"iteration {i}: the rollout's {rollout_work:.4f} s of work " \
            f"took {times['rollout']:.4f} s: timed before it finished?"
        assert times["update"] >= update_work, f"iteration {i}: the update's {update_work:.4f} s of work " \
            f"took {times['update']:.4f} s: timed before it finished?"
        assert 0 <= rest <= max(0.01, 0.2 * times["iteration"]), f"iteration {i}: {times}: rollout + update is " \
            "not the iteration"


# the off-policy scripts' runs, in a fresh process (their iterations are not RunLog's PPO ones): every call
# into either profiler counted, as above, with the script's main() run as `python script.py` runs it
UNPROFILED = """
import runpy, sys, jax.profiler, torch.profiler
calls, record = [], torch.profiler.record_function.__init__
def counted(name, function):
    return lambda *args, **kwargs: (calls.append(name), function(*args, **kwargs))[1]
jax.profiler.TraceAnnotation = counted("TraceAnnotation", jax.profiler.TraceAnnotation)
jax.profiler.start_trace = counted("start_trace", jax.profiler.start_trace)
torch.profiler.profile.start = counted("profile.start", torch.profiler.profile.start)
torch.profiler.record_function.__init__ = lambda self, name, *args: (
    calls.append(name) if name in sys.argv[1].split(",") else None, record(self, name, *args))[1]
sys.argv = sys.argv[2:]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    print("profiler calls:", calls)
"""


@pytest.mark.parametrize("script", ["td3_linen.py", "dqn_torch.py"])
def test_an_offpolicy_run_without_profile_calls_no_profiler(script, tmp_path):
    args = ["--total-timesteps", "600", "--learning-starts", "200", "--log-frequency", "200", "--buffer-size", "1000",
            "--batch-size", "32", "--log-dir", str(tmp_path)]
    proc = subprocess.run([sys.executable, "-c", UNPROFILED, ",".join(OFFPOLICY_REGIONS), str(ROOT / script), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines()[-1] == "profiler calls: []", proc.stdout[-2000:]
