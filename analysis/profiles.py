"""Where the time goes (issue 56; folder profile, bench.sh's preset of that name): the traces --profile
writes, one iteration of each, read into a table per workload and framework (the iteration's length
traced and untraced, Python's calls and time, what it dispatched, the time in compiled code or ops)
and drawn side by side; a TD3 or SAC step split into its env's, policy's, buffer's and update's time
(issue 53).

A run's trace is cut to its last traced iteration, from its `rollout` (PPO) or `iteration` range to
the trace's end, and thinned to what a reader and this module use: complete events, times from the
iteration's start, the program of an XLA op; no Python-tracer events, no flows, no `end:` markers.
`analyze.py archive` packs that cut (TRACE), so a committed profile is a trace Perfetto opens."""

import gzip
import json
import pstats
from pathlib import Path

import numpy as np

from .output import NAMES, color, fmt, name, variant_order

TRACE = "trace.json"  # the cut trace, as the archive holds it
PACKED = ("python.prof",)  # what else of a profile the archive holds (besides run.json, summary.json, events)
RAW = ("trace.json.gz", "plugins/profile/*/perfetto_trace.json.gz")  # torch.profiler's, jax.profiler's
STARTS = ("rollout", "iteration")  # the range that opens an iteration: PPO's, the off-policy scripts'
DROPPED = ("end: ", "ThreadpoolListener", "$")  # XLA's end markers, its thread pool's, JAX's Python tracer
LAUNCH = "PjitFunction("  # JAX: a compiled program called from Python (the trace nests two such events per call)
REGIONS = ("rollout", "update", "policy_step", "env_step", "minibatch_step")  # the scripts' named ranges
PHASES = ("env_step", "policy_step", "buffer", "update")  # an off-policy step's named ranges, in their order
LOOP, REST = "loop", "rest"  # an off-policy iteration's time in its one compiled program, and in none of the above
PROGRAMS = {"jit_policy": "policy_step", "jit_greedy": "policy_step", "jit_add": "buffer",  # a JAX program's phase,
            "jit_train_step": "update"}  # where the loop is Python's (a CPU env)
WORK = "ops"  # the chart's row of the time in XLA's ops or torch's


def raw_events(run_dir: Path) -> list[dict]:
    for pattern in RAW:
        for path in sorted(run_dir.glob(pattern)):
            return json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    raise ValueError("traced, but no trace.json.gz or perfetto_trace.json.gz")


def cut(events: list[dict]) -> dict:
    """The last traced iteration of a raw trace, thinned, with the number of iterations it held."""
    starts = sorted(e["ts"] for e in events if e.get("ph") == "X" and e.get("name") in STARTS)
    if not starts:
        raise ValueError("the trace holds no rollout or iteration range")
    t0 = starts[-1]
    kept = [e for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"]
    for e in events:
        if e.get("ph") != "X" or e["ts"] < t0 or e.get("name", "").startswith(DROPPED):
            continue
        thin = {k: e[k] for k in ("ph", "name", "cat", "pid", "tid") if k in e}
        thin |= {"ts": round(e["ts"] - t0, 1), "dur": round(e.get("dur", 0), 1)}
        if module := e.get("args", {}).get("hlo_module"):
            thin["args"] = {"hlo_module": module}
        kept.append(thin)
    return {"traceEvents": kept, "iterationsTraced": len(starts)}


def read_trace(run_dir: Path) -> dict:
    """The cut trace: the archive's, or cut now from the script's own."""
    if (run_dir / TRACE).exists():
        return json.loads((run_dir / TRACE).read_text())
    return cut(raw_events(run_dir))


def packed_trace(run_dir: Path) -> bytes:
    return json.dumps(read_trace(run_dir), separators=(",", ":")).encode()


def merged(intervals) -> list[tuple[float, float]]:
    """The (start, end) intervals merged where they overlap."""
    out = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def top_level(ops: list[dict]) -> list[dict]:
    """The events not inside another of their thread's: torch's ops called by Python or autograd's engine, not
    those an op calls; JAX's program launches, once each."""
    tops, ends = [], {}
    for e in sorted(ops, key=lambda e: (e["ts"], -e["dur"])):
        if e["ts"] >= ends.get(e["tid"], -np.inf):
            tops.append(e)
            ends[e["tid"]] = e["ts"] + e["dur"]
    return tops


def measure(run_dir: Path) -> dict:
    """One traced iteration: its length, what it dispatched and how long that ran, Python's share."""
    trace, info = read_trace(run_dir), json.loads((run_dir / "run.json").read_text())["args"]
    events = [e for e in trace["traceEvents"] if e.get("ph") == "X"]
    iterations = trace["iterationsTraced"]
    xla = [e for e in events if "args" in e]  # an XLA op: the program it belongs to
    if xla:  # JAX: programs launched from Python, their ops on XLA's threads
        dispatched, compiled = top_level([e for e in events if e["name"].startswith(LAUNCH)]), xla
    else:  # torch: ops called from Python (or by autograd), each ran where it was called
        dispatched = compiled = top_level([e for e in events if e.get("cat") == "cpu_op"])
    stats = pstats.Stats(str(run_dir / "python.prof")).stats  # both traced iterations
    python = [(calls, own) for (file, _, _), (_, calls, own, _, _) in stats.items() if file != "~"]  # not built-ins
    length = max(e["ts"] + e["dur"] for e in events) / 1e3
    busy = merged((e["ts"], e["ts"] + e["dur"]) for e in compiled)
    in_compiled = sum(b - a for a, b in busy) / 1e3
    return {"iteration_ms": length, "split": None if "num_iterations" in info else split(events),
            "python_calls": sum(c for c, _ in python) / iterations,
            "python_ms": 1e3 * sum(t for _, t in python) / iterations, "dispatched": len(dispatched),
            "xla_ops": len(xla), "compiled_ms": in_compiled,
            "host_per_dispatch_us": 1e3 * (length - in_compiled) / max(len(dispatched), 1),
            "spans": {**{r: [(e["ts"], e["dur"]) for e in events if e["name"] == r] for r in REGIONS},
                      WORK: [(a, b - a) for a, b in busy]}}  # what the chart draws


def split(events) -> dict[str, float]:
    """An off-policy iteration's milliseconds by phase. An instant belongs to the JAX program running then (its work
    runs on XLA's threads, after the call that launched it returned: the host waits for it later, elsewhere), else to
    the named range the host is in (PyTorch's ops run inside theirs), else to the rest."""
    length = max(e["ts"] + e["dur"] for e in events)  # from the iteration's start (the cut's 0) to the trace's end
    owner = np.full(int(length) + 1, len(PHASES) + 1, np.int8)  # µs by µs: REST
    ranges = [(e, PHASES.index(e["name"])) for e in events if e["name"] in PHASES]
    modules = [(e, e["args"]["hlo_module"]) for e in events if "args" in e]  # XLA's ops, by program
    programs = ([(e, PHASES.index(PROGRAMS[m])) for e, m in modules if m in PROGRAMS] if ranges else
                [(e, len(PHASES)) for e, _ in modules])  # no phase on the host: the loop is one program (Gymnax)
    for e, phase in ranges + programs:  # a program's work over the range it ran in
        owner[int(e["ts"]):int(e["ts"] + e["dur"]) + 1] = phase
    counts = np.bincount(owner, minlength=len(PHASES) + 2) / 1e3
    return dict(zip((*PHASES, LOOP, REST), map(float, counts)))


def untraced_ms(run) -> float | None:
    """The median iteration the run timed without a tracer: PPO's after its traced iterations (3 and 4); an off-policy
    script's that train, before its last two (traced) and after the first (torch.compile compiles in it)."""
    a = run.info["args"]
    steps, values, _ = run.series("time/iteration")
    if "num_iterations" in a:
        after = values[4:]
    else:
        after = values[steps - a["log_frequency"] > a["learning_starts"]][:-2]
    return 1e3 * float(np.median(after)) if len(after) else None


HEADER = ["env", "model", "framework", "iteration untraced (ms)", "iteration traced (ms)", "Python calls",
          "Python's own time, waits included (ms)", "calls into the framework", "XLA ops run",
          "in ops or compiled code (ms)",
          "outside them, per call (µs)"]


def row(r) -> list:
    p = r.profile
    jax = p["xla_ops"] > 0  # JAX: a call launches a program, which runs on XLA's threads while Python goes on
    return [r.env_id, r.model, name(r.variant, [r]), fmt(untraced_ms(r)), fmt(p["iteration_ms"]),
            f"{round(p['python_calls']):,}", fmt(p["python_ms"]), f"{p['dispatched']:,}",
            f"{p['xla_ops']:,}" if jax else "–",
            f"{fmt(p['compiled_ms'])} ({p['compiled_ms'] / p['iteration_ms']:.0%})",
            "–" if jax else fmt(p["host_per_dispatch_us"])]


def ordered(runs) -> list:
    order = variant_order({r.variant for r in runs})
    return sorted(runs, key=lambda r: (r.env_id, r.model, order.index(r.variant)))


def timeline_chart(runs, o):
    """Two traces side by side, one iteration each, on one time axis: the named ranges on the host, and
    the time in XLA's ops or torch's."""
    import matplotlib.pyplot as plt

    pair = sorted([r for r in runs if (r.env_id, r.model, r.variant) in {("CartPole-v1", "small", v)
                                                                         for v in ("linen", "torch")}],
                  key=lambda r: r.variant)
    if len(pair) != 2:
        return
    fig, axes = plt.subplots(2, 1, figsize=(10, 4.5), sharex=True)
    least = max(r.profile["iteration_ms"] for r in pair) * 2  # µs: a host range too short to see, drawn this wide
    for ax, r in zip(axes, pair):
        spans = {row: s for row, s in r.profile["spans"].items() if s}  # JAX's in-program names are not host ranges
        for i, row in enumerate(spans):
            widths = [(ts / 1e3, (dur if row == WORK else max(dur, least)) / 1e3) for ts, dur in spans[row]]
            ax.broken_barh(widths, (i - 0.4, 0.8), color=color(r.variant))
        ax.set_yticks(range(len(spans)), [("XLA " if r.profile["xla_ops"] else "torch ") + row if row == WORK else row
                                          for row in spans])
        ax.invert_yaxis()
        ax.set_title(f"{name(r.variant, [r])}: one iteration, {fmt(r.profile['iteration_ms'])} ms traced", fontsize=9)
    axes[-1].set_xlabel("ms from the iteration's start")
    fig.tight_layout()
    o.chart(fig, "profile_timeline.png", "One traced iteration of Flax Linen and of eager PyTorch on CartPole-v1, "
            "small model, on one time axis: the scripts' named ranges on the host, and the time in XLA's ops or "
            "torch's (JAX's policy_step, env_step and minibatch_step are inside its compiled programs, not host "
            "ranges)")


def claims(runs, o):
    """What docs/profiling.md reads from the table, each from one traced run per workload and framework."""
    at = {(r.env_id, r.model, r.variant): r for r in runs}
    get = lambda env, model, variant, key: at[env, model, variant].profile[key] if (env, model, variant) in at else None
    ratio = lambda env, model: (untraced_ms(at[env, model, "torch"]) / untraced_ms(at[env, model, "linen"])
                                if {(env, model, v) for v in ("torch", "linen")} <= set(at) else None)
    share = lambda env, model: (get(env, model, "torch", "compiled_ms") / get(env, model, "torch", "iteration_ms")
                                if (env, model, "torch") in at else None)
    pendulum, cartpole, cnn = ("Pendulum-v1", "small"), ("CartPole-v1", "small"), ("Breakout-MinAtar", "cnn")
    calls = {w: get(*w, "torch", "dispatched") for w in (pendulum, cartpole, cnn)}
    o.claim("eager-torch-pendulum-calls-several-times-cartpoles", None not in calls.values()
            and calls[pendulum] > 3 * calls[cartpole], ("more",),
            f"eager PyTorch's calls into torch per iteration: Pendulum-v1 {calls[pendulum]}, "
            f"CartPole-v1 {calls[cartpole]} "
            "(several: over 3 times)")
    gaps = {w: ratio(*w) for w in (pendulum, cartpole, cnn)}
    o.claim("eager-gap-larger-on-pendulum-than-with-the-cnn", None not in gaps.values() and gaps[pendulum] > gaps[cnn],
            ("larger",), "eager PyTorch / Linen, the untraced iteration: " + ", ".join(
                f"{env} {model} {fmt(g)}" for (env, model), g in gaps.items() if g))
    shares = {w: share(*w) for w in (pendulum, cnn)}
    o.claim("eager-torch-ops-share-larger-with-the-cnn", None not in shares.values() and shares[cnn] > shares[pendulum],
            ("larger",), "eager PyTorch's share of its traced iteration in torch's ops: " + ", ".join(
                f"{env} {model} {x:.0%}" for (env, model), x in shares.items() if x))
    outside = (get(*pendulum, "torch", "iteration_ms") - get(*pendulum, "torch", "compiled_ms")
               if (*pendulum, "torch") in at else None)
    o.claim("eager-torch-time-outside-ops-longer-than-linens-iteration", outside is not None
            and (*pendulum, "linen") in at and outside > get(*pendulum, "linen", "iteration_ms"), ("longer",),
            f"Pendulum-v1 small, traced: eager PyTorch's time outside its ops {fmt(outside)} ms, "
            "Linen's whole iteration "
            f"{fmt(get(*pendulum, 'linen', 'iteration_ms'))} ms")
    fewer = [(r.env_id, r.model) for r in runs if r.variant == "torch_compile" and (r.env_id, r.model, "torch") in at
             and r.profile["dispatched"] < at[r.env_id, r.model, "torch"].profile["dispatched"]]
    compiled = [(r.env_id, r.model) for r in runs if r.variant == "torch_compile"]
    o.claim("compiled-torch-calls-fewer-than-eager", compiled and len(fewer) == len(compiled), ("fewer",),
            f"torch.compile makes fewer calls into torch per iteration than eager on {len(fewer)} of {len(compiled)} "
            "workloads")


SPLIT_HEADER = ["env", "algorithm", "framework", "ms per 1,000 env steps, untraced", "traced", "env step",
                "policy step", "buffer", "update", "the loop as one program", "the rest"]


def algorithm_and_framework(r) -> tuple[str, str]:
    return tuple(r.variant.split("_", 1))  # td3_torch-torchenv: td3, torch-torchenv


def shares(r) -> dict[str, float]:
    split = r.profile["split"]
    return {phase: ms / sum(split.values()) for phase, ms in split.items()}


def split_row(r) -> list:
    per = 1e3 / r.info["args"]["log_frequency"]  # ms per iteration -> per 1,000 env steps
    untraced = untraced_ms(r)
    return [r.env_id, algorithm_and_framework(r)[0].upper(), NAMES.get(r.variant, r.variant),
            fmt(untraced and untraced * per), fmt(sum(r.profile["split"].values()) * per),
            *(f"{x:.0%}" if x else "–" for x in shares(r).values())]


def offpolicy_section(runs, o):
    """Issue 53's item 6: an off-policy step's time split into the env's, the policy's, the buffer's and the update's,
    per framework, from one traced iteration each."""
    order = variant_order({algorithm_and_framework(r)[1] for r in runs})
    key = lambda r: (r.env_id, algorithm_and_framework(r)[0] == "sac", order.index(algorithm_and_framework(r)[1]))
    o.table("TD3 and SAC, one traced iteration each: its time per 1,000 env steps and the share of each phase (an "
            "instant belongs to the JAX program running then, else to the host's named range, else to the rest)",
            SPLIT_HEADER, [split_row(r) for r in sorted(runs, key=key)], block="offpolicy-split")
    share = lambda r, phase: shares(r)[phase]
    loops = [r for r in runs if not share(r, LOOP)]  # a Python loop, its phases named
    o.claim("offpolicy-update-most-of-every-step", bool(loops) and all(share(r, "update") > 0.75 for r in loops), (),
            "the update's share of a traced step, least over the rows with named phases: "
            f"{min((share(r, 'update') for r in loops), default=0):.0%} (most: over three quarters)")
    mujoco = [r for r in loops if r.env_id.startswith("HalfCheetah")]
    o.claim("offpolicy-env-under-a-tenth-on-mujoco", bool(mujoco) and all(share(r, "env_step") < 0.1 for r in mujoco),
            (), f"MuJoCo's HalfCheetah step's share, most over its rows: "
            f"{max((share(r, 'env_step') for r in mujoco), default=1):.0%}")


def profiles_section(runs, o):
    offpolicy = [r for r in runs if r.profile["split"] is not None]
    runs = [r for r in runs if r.profile["split"] is None]
    o.heading("Where the time goes", "One traced iteration per run (bench.sh's profile preset), traced by the "
              "framework's profiler and cProfile at once (docs/profiling.md). A call into the framework: a compiled "
              "program launched (JAX), an op called by Python or autograd's engine (PyTorch, a compiled region one "
              "call); outside them: the iteration less the time in ops, per call (PyTorch only: its ops run on the "
              "calling thread, so that is the Python and dispatch between them).")
    if runs:
        o.table("One traced iteration, per workload and framework", HEADER, [row(r) for r in ordered(runs)],
                block="profile-table")
        claims(runs, o)
        timeline_chart(runs, o)
    if offpolicy:
        offpolicy_section(offpolicy, o)
