"""analyze.py: benchback's TensorBoard logs -> the seed's charts and tables, ours, and REPORT.md.

    python analyze.py runs/ [more run folders...] --out results
    python analyze.py results/study.tar.xz --out results   # the same, from an archive
    python analyze.py archive runs/study --out results/study.tar.xz   # pack what it reads
    python analyze.py envtime --out results       # env step times (the charts' x axis), cached

Reads every run directory below the given folders (one with a run.json) with
TensorBoard's own event reader, without down-sampling; skips, with one warning
each, runs that are partial (no summary.json), corrupt or empty. Never writes
into a run directory. Warm-up runs (under a folder named warmup) are ignored.
"""

import json
import math
import os
import sys
import tarfile
import tempfile
import time
import warnings
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import tyro
from rich.console import Console
from rich.table import Table

console = Console(stderr=True, width=None if sys.stderr.isatty() else 150)  # logs: no wrapped tables

# one colour per variant in every chart; the order is the order of legends and tables
VARIANT_COLORS = {
    "linen": "#1f77b4", "linen-nojit": "#aec7e8", "nnx": "#ff7f0e", "nnx-nojit": "#ffbb78",
    "nnx_cached": "#d62728", "equinox": "#2ca02c", "equinox-nojit": "#98df8a", "torch": "#9467bd",
    "torch-nojitenv": "#c5b0d5", "torch_compile": "#8c564b", "torch_compile-default": "#c49c94",
    "torch_compile-reduce-overhead": "#e377c2", "torch_compile-max-autotune": "#f7b6d2",
    "torch_gymnasium": "#17becf", "linen_gymnasium": "#bcbd22", "linen_gymnasium-nojit": "#dbdb8d",
}
MODELS = ("small", "medium", "large")
MODEL_MARKERS = {"small": "o", "medium": "s", "large": "^"}
REFERENCE = "linen"  # speedups are quoted as "X -> linen": how much faster linen is than X
PAIRS_EXTRA = [("torch", "torch_compile"), ("nnx", "nnx_cached")]  # what compilation buys within a framework
EXPERIMENTS = ("exp1", "exp2", "exp3", "cpuenv", "envscale")  # bench.sh's folders
# the CPU-environment experiment's 2x2 {torch, linen} x {CPU env, JAX env}: the speedups a user weighs
CPU_ENV_PAIRS = [
    ("torch_gymnasium", "torch", "the environment moved to JAX"),
    ("torch_gymnasium", "linen", "everything moved to JAX"),
    ("torch_gymnasium", "linen_gymnasium", "the framework alone, CPU env"),
    ("torch", "linen", "the framework alone, JAX env"),
    ("linen_gymnasium", "linen", "Linen's environment moved to JAX"),
]


# ---- reading runs
@dataclass
class Run:
    path: Path
    variant: str
    env_id: str
    model: str
    seed: int
    synced: bool
    summary: dict
    info: dict
    experiment: str = ""
    scalars: dict = field(default_factory=dict)  # tag -> (steps, values, wall times)

    def series(self, tag):
        return self.scalars.get(tag, (np.array([]), np.array([]), np.array([])))


def read_scalars(run_dir: Path) -> dict:
    """Every scalar of every event file in run_dir, merged, with TensorBoard's own reader."""
    from tensorboard.backend.event_processing import event_accumulator as ea
    from tensorboard.util import tensor_util

    acc = ea.EventAccumulator(str(run_dir), size_guidance={ea.TENSORS: 0, ea.SCALARS: 0})
    acc.Reload()
    points = defaultdict(list)
    for tag in acc.Tags()["scalars"]:
        points[tag] += [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)]
    for tag in acc.Tags()["tensors"]:
        points[tag] += [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)), e.wall_time)
                        for e in acc.Tensors(tag)]
    return {tag: tuple(np.array(col) for col in zip(*sorted(pts))) for tag, pts in points.items()}


def load_run(run_dir: Path) -> Run:
    """One run, or ValueError saying why it cannot be used."""
    try:
        info = json.loads((run_dir / "run.json").read_text())
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"corrupt run.json ({e})")
    if not (run_dir / "summary.json").exists():
        raise ValueError("partial: no summary.json (interrupted or still running)")
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        args = info["args"]
        run = Run(run_dir, summary["variant"], summary["env_id"], summary["model"], int(summary["seed"]),
                  bool(args["sync_timing"]), summary, info)
        run.experiment = experiment_of(run)
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as e:
        raise ValueError(f"corrupt summary.json or run.json ({type(e).__name__}: {e})")
    if not any(run_dir.glob("*tfevents*")):
        raise ValueError("empty: no event file")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run.scalars = read_scalars(run_dir)
    except Exception as e:  # the reader raises many kinds on a damaged file
        raise ValueError(f"corrupt event file ({type(e).__name__}: {e})")
    if "time/iteration" not in run.scalars:
        raise ValueError("empty: the event files hold no time/iteration scalars")
    return run


def experiment_of(run: Run) -> str:
    """The bench.sh folder a run ran in; for a run from elsewhere, a guess from its settings."""
    named = [part for part in run.path.parts if part in EXPERIMENTS]
    if named:
        return named[-1]
    if run.info["args"].get("num_envs", 32) != 32:
        return "envscale"
    if run.variant.startswith(("torch_gymnasium", "linen_gymnasium")):
        return "cpuenv"
    if not run.synced:
        return "exp1"
    return "exp3" if run.env_id == "Acrobot-v1" and run.model != "small" else "exp2"


def find_runs(roots: list[str]) -> tuple[list[Run], list[tuple[Path, str]]]:
    runs, skipped = [], []
    for root in roots:
        if not Path(root).exists():
            skipped.append((Path(root), "does not exist"))
        elif Path(root).is_file() and tarfile.is_tarfile(root):
            with tempfile.TemporaryDirectory() as tmp:  # every run is read whole before it goes
                with tarfile.open(root) as tar:
                    tar.extractall(tmp, filter="data")
                found, bad = runs_below(Path(tmp))
            # named inside the archive, so the report is the same wherever it was unpacked
            inside = lambda path: Path(root) / path.relative_to(tmp)
            for run in found:
                run.path = inside(run.path)
            runs += found
            skipped += [(inside(path), why) for path, why in bad]
        else:
            found, bad = runs_below(Path(root))
            runs += found
            skipped += bad
    return runs, skipped


def runs_below(root: Path) -> tuple[list[Run], list[tuple[Path, str]]]:
    runs, skipped = [], []
    for run_json in sorted(root.rglob("run.json")):
        run_dir = run_json.parent
        if "warmup" in run_dir.parts:
            continue
        try:
            runs.append(load_run(run_dir))
        except ValueError as e:
            skipped.append((run_dir, str(e)))
    return runs, skipped


def variant_order(variants) -> list[str]:
    known = [v for v in VARIANT_COLORS if v in variants]
    return known + sorted(set(variants) - set(known))


def color(variant: str) -> str:
    if variant in VARIANT_COLORS:
        return VARIANT_COLORS[variant]
    import matplotlib

    return matplotlib.colormaps["tab20b"](abs(hash(variant)) % 20)


# ---- env complexity: each env's step time with random actions, relative to the fastest
@dataclass
class EnvTime:
    """Measures each env's step time with random actions and caches it in OUT/envtime.json."""

    out: str = "results"
    """folder of the cache (and of the report)"""
    envs: tuple[str, ...] = ()
    """env ids to measure (default: the seed's 12 environments)"""
    num_envs: int = 32
    """parallel environments, as in training"""
    steps: int = 2000
    """steps per measurement, inside one jitted lax.scan"""
    force: bool = False
    """measure again even if the cache has the env"""


SEED_ENVS = ("CartPole-v1", "Acrobot-v1", "MountainCar-v0", "DiscountingChain-bsuite", "MemoryChain-bsuite",
             "UmbrellaChain-bsuite", "BernoulliBandit-misc", "GaussianBandit-misc", "Asterix-MinAtar",
             "Breakout-MinAtar", "Freeway-MinAtar", "SpaceInvaders-MinAtar")


def measure_env_step(env_id: str, num_envs: int, steps: int) -> float:
    """Seconds per step of num_envs envs (auto-reset included), best of 5, compile excluded."""
    import gymnax
    import jax

    env, params = gymnax.make(env_id)
    n = env.action_space(params).n

    @jax.jit
    def run(key):
        obs, state = jax.vmap(env.reset, in_axes=(0, None))(jax.random.split(key, num_envs), params)

        def step(carry, key):
            state, total = carry
            act_key, step_key = jax.random.split(key)
            action = jax.random.randint(act_key, (num_envs,), 0, n)
            obs, state, reward, *_ = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
                jax.random.split(step_key, num_envs), state, action, params)
            return (state, total + reward.sum() + obs.sum()), None

        # Everything the step computes reaches the output: otherwise XLA drops what it can
        # (MountainCar's reward is a constant -1, and its whole physics was dead code).
        return jax.lax.scan(step, (state, 0.0), jax.random.split(key, steps))[0]

    jax.block_until_ready(run(jax.random.key(0)))
    best = math.inf
    for i in range(5):
        start = time.perf_counter()
        jax.block_until_ready(run(jax.random.key(i + 1)))
        best = min(best, time.perf_counter() - start)
    return best / steps


def env_times(out: Path, env_ids, num_envs=32, steps=2000, force=False) -> dict[str, float]:
    """Step times from OUT/envtime.json, measuring (and caching) the envs it lacks."""
    cache_file = out / "envtime.json"
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    missing = [e for e in env_ids if force or e not in cache]
    for env_id in missing:
        console.print(f"measuring the step time of {env_id} ...")
        cache[env_id] = measure_env_step(env_id, num_envs, steps)
    if missing:
        out.mkdir(parents=True, exist_ok=True)
        cache_file.write_text(json.dumps(cache, indent=2, sort_keys=True))
    return {e: cache[e] for e in env_ids}


def complexity(times: dict[str, float]) -> dict[str, float]:
    fastest = min(times.values())
    return {e: t / fastest for e, t in times.items()}


# ---- statistics
def pair_ratios(runs: list[Run], slow: str, fast: str, value) -> dict[tuple[str, str], np.ndarray]:
    """{(env, model): value(slow run) / value(fast run) for every pair of repeats}."""
    by = defaultdict(lambda: defaultdict(list))
    for r in runs:
        v = value(r)
        if v is not None and v > 0:
            by[(r.env_id, r.model)][r.variant].append(v)
    out = {}
    for key, per_variant in by.items():
        if per_variant.get(slow) and per_variant.get(fast):
            out[key] = np.array([a / b for a in per_variant[slow] for b in per_variant[fast]])
    return out


def geomean(x) -> float:
    return float(np.exp(np.mean(np.log(x))))


def bootstrap_geomean_ci(ratios_by_env: list[np.ndarray], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of the geometric mean, resampling environments (the main source of spread)."""
    if len(ratios_by_env) < 2:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    logs = [np.log(r) for r in ratios_by_env]
    means = []
    for _ in range(n):
        pick = rng.integers(0, len(logs), len(logs))
        means.append(np.mean(np.concatenate([logs[i] for i in pick])))
    return float(np.exp(np.percentile(means, 2.5))), float(np.exp(np.percentile(means, 97.5)))


def speedup_table(runs: list[Run], value, pairs) -> list[dict]:
    """Per pair and model size: geometric mean (with CI) and median of every ratio over envs."""
    rows = []
    for slow, fast in pairs:
        ratios = pair_ratios(runs, slow, fast, value)
        for model in MODELS:
            per_env = [r for (env, m), r in sorted(ratios.items()) if m == model]
            if not per_env:
                continue
            flat = np.concatenate(per_env)
            low, high = bootstrap_geomean_ci(per_env)
            rows.append({"pair": f"{slow} → {fast}", "model": model, "geomean": geomean(flat),
                         "median": float(np.median(flat)), "ci_low": low, "ci_high": high,
                         "envs": len(per_env), "ratios": len(flat)})
    return rows


def bucket_means(runs: list[Run], variant: str, model: str) -> tuple[float, float, float] | None:
    """The buckets' means over a variant's runs of one model size."""
    buckets = [iteration_buckets(r) for r in runs if r.variant == variant and r.model == model]
    return tuple(float(np.nanmean(col)) for col in zip(*buckets)) if buckets else None


def iteration_buckets(run: Run) -> tuple[float, float, float]:
    """Mean iteration time in the seed's buckets: 0, 1..7, 8..end."""
    t = run.series("time/iteration")[1]
    mean = lambda x: float(np.mean(x)) if len(x) else math.nan
    return float(t[0]), mean(t[1:8]), mean(t[8:])


def steady(tag: str):
    """The mean of a per-iteration time over iterations 8..end, from the event file."""
    def value(run: Run):
        t = run.series(tag)[1]
        return float(np.mean(t[8:])) if len(t) > 8 else None
    return value


def total_time(run: Run):
    return run.summary.get("time/total")


# ---- charts
def plot_durations(runs, cx, path):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for ax, model in zip(axes, MODELS):
        subset = [r for r in runs if r.model == model]
        for v in variant_order({r.variant for r in subset}):
            pts = [(cx[r.env_id], total_time(r)) for r in subset if r.variant == v]
            ax.scatter(*zip(*pts), color=color(v), marker=MODEL_MARKERS[model], label=v, alpha=0.8)
        ax.set(xscale="log", yscale="log", title=f"{model} model", xlabel="env complexity (step time / fastest)")
    axes[0].set_ylabel("total run time (s)")
    axes[-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle("Experiment 1: total duration of training (async timing)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_speedups(runs, pairs, value, title, path):
    """One box per pair and model size: the distribution of every repeat pair's ratio over envs."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(pairs) + 2), 4.5))
    ticks, labels = [], []
    for i, (slow, fast) in enumerate(pairs):
        ratios = pair_ratios(runs, slow, fast, value)
        for j, model in enumerate(MODELS):
            vals = [r for (env, m), rr in ratios.items() if m == model for r in rr]
            if not vals:
                continue
            x = i * 4 + j
            ax.boxplot([vals], positions=[x], widths=0.7, showfliers=False)
            jitter = np.random.default_rng(x).uniform(-0.2, 0.2, len(vals))
            ax.scatter(x + jitter, vals, s=10, color=color(slow), marker=MODEL_MARKERS[model], alpha=0.7)
        ticks.append(i * 4 + 1)
        labels.append(f"{slow}\n→ {fast}")
    ax.axhline(1, color="grey", lw=0.8, ls="--")
    ax.set(yscale="log", ylabel="speedup (time of left / time of right)", title=title)
    ax.set_xticks(ticks, labels, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_overhead(runs, path):
    import matplotlib.pyplot as plt

    variants = variant_order({r.variant for r in runs})
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.5), sharey=True)
    for ax, bucket, name in zip(axes, range(3), ("iteration 0 (compile)", "iterations 1..7", "iterations 8..end")):
        for i, v in enumerate(variants):
            for model in MODELS:
                vals = [iteration_buckets(r)[bucket] for r in runs if r.variant == v and r.model == model]
                vals = [x for x in vals if not math.isnan(x)]
                if vals:
                    jitter = np.random.default_rng(i).uniform(-0.25, 0.25, len(vals))
                    ax.scatter(i + jitter, vals, color=color(v), marker=MODEL_MARKERS[model], s=14, alpha=0.8)
        ax.set(yscale="log", title=name)
        ax.set_xticks(range(len(variants)), variants, rotation=45, ha="right", fontsize=8)
    axes[0].set_ylabel("seconds per iteration")
    fig.suptitle("Overhead: iteration durations by bucket (o small, s medium, ^ large)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_rollout_update(runs, x_of, xlabel, title, path, xlog=True):
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    for ax, tag in zip(axes, ("time/rollout", "time/update")):
        for v in variant_order({r.variant for r in runs}):
            pts = sorted((x_of(r), steady(tag)(r)) for r in runs if r.variant == v and steady(tag)(r))
            if pts:
                ax.plot(*zip(*pts), marker="o", ls="", color=color(v), label=v, alpha=0.8)
        ax.set(yscale="log", title=f"{tag[5:]} (mean of iterations 8..end, synced)", xlabel=xlabel,
               ylabel="seconds")
        if xlog:
            ax.set_xscale("log")
    axes[1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_learning_curves(runs, path, against: str):
    """Episodic return against env steps or wall time: mean and min..max over repeats, per env."""
    import matplotlib.pyplot as plt

    envs = sorted({r.env_id for r in runs})
    cols = min(4, len(envs))
    rows = math.ceil(len(envs) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.5 * cols + 2.5, 3.4 * rows + 0.8), squeeze=False)
    for ax, env in zip(axes.flat, envs):
        for v in variant_order({r.variant for r in runs if r.env_id == env}):
            curves = []
            for r in runs:
                if r.env_id != env or r.variant != v:
                    continue
                steps, returns, wall = r.series("charts/episodic_return")
                if len(steps):
                    x = steps if against == "steps" else wall - r.info.get("start_time", wall[0])
                    curves.append((x, returns))
            if not curves:
                continue
            grid = np.linspace(0, min(c[0][-1] for c in curves), 50)
            ys = np.array([np.interp(grid, x, y) for x, y in curves])
            ax.plot(grid, ys.mean(0), color=color(v), label=v, lw=1.2)
            ax.fill_between(grid, ys.min(0), ys.max(0), color=color(v), alpha=0.15)
        ax.set(title=env, xlabel="env steps" if against == "steps" else "wall time (s)", ylabel="return")
    for ax in axes.flat[len(envs):]:
        ax.axis("off")
    legend = {label: h for ax in axes.flat for h, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(legend.values(), legend.keys(), fontsize=8, loc="center right")
    fig.suptitle(f"Return against {against}: small model, mean and min..max over repeats")
    fig.tight_layout(rect=(0, 0, 1 - 2.3 / fig.get_figwidth(), 1))
    fig.savefig(path, dpi=100)
    plt.close(fig)


# ---- tables: rich on the console, Markdown in REPORT.md
def fmt(x, digits=3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}" if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def emit(title: str, header: list[str], rows: list[list], md: list[str]):
    table = Table(title=title)
    for h in header:
        table.add_column(h)
    for row in rows:
        table.add_row(*[fmt(c) for c in row])
    console.print(table)
    md += [f"### {title}", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    md += ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows] + [""]


def speedup_rows(rows):
    return [[r["pair"], r["model"], f"{r['geomean']:.2f}x", f"[{fmt(r['ci_low'])}, {fmt(r['ci_high'])}]",
             f"{r['median']:.2f}x", r["envs"], r["ratios"]] for r in rows]


SPEEDUP_HEADER = ["pair (slow → fast)", "model", "geometric mean", "95% CI", "median", "envs", "ratios"]


def hardware_section(runs: list[Run]) -> list[str]:
    seen = defaultdict(int)
    for r in runs:
        key = (r.info.get("device"), r.info.get("cpu"), json.dumps(r.info.get("versions", {}), sort_keys=True))
        seen[key] += 1
    md = ["## Machines and versions", "", "| runs | device | CPU | versions |", "|---|---|---|---|"]
    for (device, cpu, versions), n in sorted(seen.items(), key=lambda kv: -kv[1]):
        v = ", ".join(f"{k} {val}" for k, val in json.loads(versions).items() if val)
        md.append(f"| {n} | {device} | {cpu} | {v} |")
    return md + [""]


# ---- the report
@dataclass
class Report:
    """Reads benchback run directories and writes charts, tables and REPORT.md."""

    runs: tyro.conf.Positional[tuple[str, ...]] = ("runs",)
    """folders holding run directories (searched recursively)"""
    out: str = "results"
    """where the PNG charts, REPORT.md and envtime.json go"""


def pairs_for(variants: set[str]) -> list[tuple[str, str]]:
    pairs = [(v, REFERENCE) for v in variant_order(variants) if v != REFERENCE and REFERENCE in variants]
    return pairs + [(a, b) for a, b in PAIRS_EXTRA if a in variants and b in variants and (a, b) not in pairs]


def exp1_section(exp1: list[Run], cx: dict, out: Path, md: list[str]) -> list[str]:
    md += ["## Experiment 1: total duration (async timing)", ""]
    pairs = pairs_for({r.variant for r in exp1})
    plot_durations(exp1, cx, out / "exp1_durations.png")
    plot_speedups(exp1, pairs, total_time, "Speedup of total run time (all repeat pairs, all envs)",
                  out / "exp1_speedups.png")
    emit("Speedup of total run time", SPEEDUP_HEADER, speedup_rows(speedup_table(exp1, total_time, pairs)), md)
    plot_overhead(exp1, out / "exp1_overhead.png")
    rows = []
    for v in variant_order({r.variant for r in exp1}):
        for model in MODELS:
            if means := bucket_means(exp1, v, model):
                rows.append([v, model, sum(r.variant == v and r.model == model for r in exp1), *means])
    emit("Overhead: mean seconds per iteration by bucket",
         ["variant", "model", "runs", "iteration 0", "iterations 1..7", "iterations 8..end"], rows, md)
    plot_speedups(exp1, pairs, steady("time/iteration"), "Steady-state speedup (iterations 8..end)",
                  out / "exp1_steady_speedups.png")
    emit("Steady-state speedup (mean iteration time of iterations 8..end)", SPEEDUP_HEADER,
         speedup_rows(speedup_table(exp1, steady("time/iteration"), pairs)), md)
    return ["exp1_durations.png", "exp1_speedups.png", "exp1_overhead.png", "exp1_steady_speedups.png"]


def exp2_section(exp2: list[Run], cx: dict, out: Path, md: list[str]) -> list[str]:
    md += ["## Experiment 2: rollout and update (synced, small model)", ""]
    plot_rollout_update(exp2, lambda r: cx[r.env_id], "env complexity",
                        "Experiment 2: rollout and update durations by env", out / "exp2_rollout_update.png")
    rows = []
    for v in variant_order({r.variant for r in exp2}):
        sel = [r for r in exp2 if r.variant == v]
        rollout = [x for x in map(steady("time/rollout"), sel) if x]
        update = [x for x in map(steady("time/update"), sel) if x]
        rows.append([v, len(sel), geomean(rollout) if rollout else None, geomean(update) if update else None])
    emit("Synced rollout and update: geometric mean over envs of seconds per iteration (8..end)",
         ["variant", "runs", "rollout", "update"], rows, md)
    pairs = pairs_for({r.variant for r in exp2})
    for tag in ("time/rollout", "time/update"):
        emit(f"Speedup of {tag[5:]} (synced, small model)", SPEEDUP_HEADER,
             speedup_rows(speedup_table(exp2, steady(tag), pairs)), md)
    return ["exp2_rollout_update.png"]


def exp3_section(exp3: list[Run], out: Path, md: list[str]) -> list[str]:
    md += ["## Experiment 3: compile modes (Acrobot-v1, synced)", ""]
    size = {m: i for i, m in enumerate(MODELS)}
    plot_rollout_update(exp3, lambda r: size[r.model], "model size (0 small, 1 medium, 2 large)",
                        "Experiment 3: compile modes by model size (Acrobot-v1)", out / "exp3_compile_modes.png",
                        xlog=False)
    rows = []
    for v in variant_order({r.variant for r in exp3}):
        for model in MODELS:
            sel = [r for r in exp3 if r.variant == v and r.model == model]
            if sel:
                mean = lambda tag: float(np.mean([steady(tag)(r) or math.nan for r in sel]))
                rows.append([v, model, len(sel), mean("time/rollout"), mean("time/update")])
    emit("Compile modes: seconds per rollout and update (8..end, Acrobot-v1)",
         ["variant", "model", "runs", "rollout", "update"], rows, md)
    return ["exp3_compile_modes.png"]


def plot_cpuenv(runs, variants, path):
    """Per model: each env's synced iteration split into rollout (dark) and update (light), per variant."""
    import matplotlib.pyplot as plt

    models = [m for m in MODELS if any(r.model == m for r in runs)]
    envs = sorted({r.env_id for r in runs})
    fig, axes = plt.subplots(1, len(models), figsize=(max(7, 1.6 * len(envs)) * len(models), 4.8), squeeze=False)
    width, lowest = 0.8 / len(variants), math.inf
    for ax, model in zip(axes[0], models):
        for j, v in enumerate(variants):
            for i, env in enumerate(envs):
                sel = [r for r in runs if r.env_id == env and r.variant == v and r.model == model]
                rollout = [x for x in map(steady("time/rollout"), sel) if x]
                update = [x for x in map(steady("time/update"), sel) if x]
                if not rollout or not update:
                    continue
                x = i + (j - (len(variants) - 1) / 2) * width
                lowest = min(lowest, np.median(rollout))
                ax.bar(x, np.median(rollout), width, color=color(v), label=v if i == 0 else None)
                ax.bar(x, np.median(update), width, bottom=np.median(rollout), color=color(v), alpha=0.45)
        ax.set(yscale="log", title=f"{model} model", ylabel="seconds per iteration (rollout dark, update light)")
        ax.set_xticks(range(len(envs)), envs, rotation=30, ha="right", fontsize=8)
    for ax in axes[0]:
        ax.set_ylim(bottom=lowest / 2)  # every rollout bar visible on the log scale
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle("CPU env (Gymnasium) or JAX env (Gymnax): synced, iterations 8..end")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def cpuenv_section(runs: list[Run], out: Path, md: list[str]) -> list[str]:
    md += ["## CPU environments: is it the framework or the environment?", "",
           "`*_gymnasium` variants step the Gymnasium twin of each env on the CPU (NumPy, sync vector env, "
           "same-step autoreset); the others step Gymnax in JAX. Synced, mean of iterations 8..end.", ""]
    corners = ("torch_gymnasium", "torch", "torch_compile", "linen_gymnasium", "linen")
    present = {r.variant for r in runs}
    variants = [v for v in corners if v in present] + variant_order(present - set(corners))
    plot_cpuenv(runs, variants, out / "cpuenv_2x2.png")
    rows = []
    for model in MODELS:
        for env in sorted({r.env_id for r in runs}):
            for v in variants:
                sel = [r for r in runs if r.env_id == env and r.variant == v and r.model == model]
                if sel:
                    median = lambda tag: float(np.median([x for x in map(steady(tag), sel) if x] or [math.nan]))
                    rows.append([env, model, v, len(sel), median("time/iteration"), median("time/rollout"),
                                 median("time/update")])
    emit("The 2x2 per env and model: median seconds per iteration (8..end)",
         ["env", "model", "variant", "runs", "iteration", "rollout", "update"], rows, md)
    pairs = [(slow, fast) for slow, fast, _ in CPU_ENV_PAIRS]
    meaning = {f"{slow} → {fast}": what for slow, fast, what in CPU_ENV_PAIRS}
    table = speedup_table(runs, steady("time/iteration"), pairs)
    emit("The speedups a user weighs (steady iteration time; geometric mean over envs, 95% CI)",
         ["what changes", *SPEEDUP_HEADER], [[meaning[row[0]], *row] for row in speedup_rows(table)], md)
    for tag in ("time/rollout", "time/update"):
        table = speedup_table(runs, steady(tag), pairs)
        emit(f"The same speedups, {tag[5:]} alone", ["what changes", *SPEEDUP_HEADER],
             [[meaning[row[0]], *row] for row in speedup_rows(table)], md)
    return ["cpuenv_2x2.png"]


# ---- env scaling: rollout throughput against the number of environments
def rollout_throughput(run: Run):
    """Env steps per second of a synced rollout, iterations 1..end (iteration 0 compiles)."""
    seconds = run.series("time/rollout")[1][1:]
    args = run.info["args"]
    return args["num_envs"] * args["num_steps"] / float(np.mean(seconds)) if len(seconds) else None


def measure_env_throughput(env_id: str, kind: str, num_envs: int, steps: int = 64) -> float:
    """Env steps per second with random actions and nothing else: Gymnax (one jitted lax.scan),
    Gymnasium's sync vector env (what the *_gymnasium scripts step), or its NumPy-vectorized
    CartPole (next-step autoreset, so the scripts cannot learn on it)."""
    if kind == "gymnax":
        return num_envs / measure_env_step(env_id, num_envs, steps)
    import gymnasium as gym

    twin = load_script("ppo_torch_gymnasium.py")
    if kind == "gymnasium":
        envs = twin.make_env(env_id, num_envs)
    else:
        envs = gym.make_vec(twin.TWINS[env_id][0], num_envs, vectorization_mode="vector_entry_point")
    rng = np.random.default_rng(0)
    actions = rng.integers(0, envs.single_action_space.n, (steps, num_envs))
    envs.reset(seed=0)
    for a in actions[:8]:
        envs.step(a)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        for a in actions:
            envs.step(a)
        best = min(best, time.perf_counter() - start)
    envs.close()
    return num_envs * steps / best


def load_script(script: str):
    import importlib.util

    spec = importlib.util.spec_from_file_location(script.removesuffix(".py"), Path(__file__).parent / script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def env_throughputs(out: Path, env_ids, counts) -> dict[str, float]:
    """{"env|kind|n": steps per second} from OUT/envscale.json, measuring (and caching) what it lacks."""
    cache_file = out / "envscale.json"
    cache = json.loads(cache_file.read_text()) if cache_file.exists() else {}
    kinds = lambda env: ("gymnax", "gymnasium") + (("gymnasium-numpy",) if env == "CartPole-v1" else ())
    wanted = [(e, k, n) for e in env_ids for k in kinds(e) for n in counts]
    missing = [w for w in wanted if "|".join(map(str, w)) not in cache]
    for env_id, kind, n in missing:
        console.print(f"measuring the throughput of {kind} {env_id} with {n} envs ...")
        cache["|".join((env_id, kind, str(n)))] = measure_env_throughput(env_id, kind, n)
    if missing:
        cache_file.write_text(json.dumps(cache, indent=2, sort_keys=True))
    return cache


def saturation(points: dict[int, float]) -> int:
    """The fewest envs that reach 90% of the best throughput: where it stops growing."""
    best = max(points.values())
    return min(n for n, x in points.items() if x >= 0.9 * best)


def envscale_section(runs: list[Run], out: Path, md: list[str]) -> list[str]:
    import matplotlib.pyplot as plt

    md += ["## Environment scaling: rollout throughput against the number of environments", "",
           "Synced rollout, iterations 1..end; env steps per second (num_envs x num_steps / rollout time). "
           "Dashed: the environment alone with random actions (Gymnax in one jitted scan; Gymnasium's sync "
           "vector env; Gymnasium's NumPy-vectorized CartPole, which autoresets a step late and so serves "
           "no script).", ""]
    envs = sorted({r.env_id for r in runs})
    counts = sorted({r.info["args"]["num_envs"] for r in runs})
    raw = env_throughputs(out, envs, counts)
    fig, axes = plt.subplots(1, len(envs), figsize=(6.5 * len(envs) + 2, 4.8), squeeze=False)
    rows = []
    for ax, env in zip(axes[0], envs):
        for v in variant_order({r.variant for r in runs if r.env_id == env}):
            per_count = defaultdict(list)
            for r in runs:
                if r.env_id == env and r.variant == v and (x := rollout_throughput(r)):
                    per_count[r.info["args"]["num_envs"]].append(x)
            points = {n: float(np.median(xs)) for n, xs in sorted(per_count.items())}
            if points:
                ax.plot(list(points), list(points.values()), marker="o", color=color(v), label=v)
                rows.append([env, v, *(points.get(n) for n in counts), saturation(points)])
        for kind, style in (("gymnax", "--"), ("gymnasium", ":"), ("gymnasium-numpy", "-.")):
            points = {n: raw[f"{env}|{kind}|{n}"] for n in counts if f"{env}|{kind}|{n}" in raw}
            if points:
                ax.plot(list(points), list(points.values()), ls=style, color="grey", label=f"{kind} env alone")
                rows.append([env, f"({kind} env alone)", *(points.get(n) for n in counts), saturation(points)])
        ax.set(xscale="log", yscale="log", title=env, xlabel="num_envs", ylabel="env steps per second")
        ax.set_xticks(counts, [str(n) for n in counts], minor=False)
        ax.xaxis.set_minor_locator(plt.NullLocator())
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle("Rollout throughput against the number of environments")
    fig.tight_layout()
    fig.savefig(out / "envscale.png", dpi=110)
    plt.close(fig)
    emit("Rollout throughput (env steps per second) by num_envs; saturates: fewest envs within 10% of the best",
         ["env", "variant", *map(str, counts), "saturates"], rows, md)
    return ["envscale.png"]


# ---- the seed's findings (its README, measured on a GPU) next to what these runs say
def speedup_cell(runs: list[Run], slow: str, fast: str, value, model: str, envs=None) -> str:
    """'2.75x [2.54, 2.95], 12 envs' for one pair and model size, or 'not run'."""
    rows = [r for r in speedup_table([r for r in runs if envs is None or r.env_id in envs], value, [(slow, fast)])
            if r["model"] == model]
    if not rows:
        return "not run"
    r = rows[0]
    return f"{r['geomean']:.2f}x [{fmt(r['ci_low'])}, {fmt(r['ci_high'])}], {r['envs']} env{'s' * (r['envs'] > 1)}"


def size_trend(exp1: list[Run], slow: str, fast: str) -> str:
    """The speedup at each model size, on the envs run at every size (so only the size differs)."""
    sizes = [m for m in MODELS if any(r.model == m and r.variant == slow for r in exp1)]
    envs = set.intersection(*[{r.env_id for r in exp1 if r.model == m and r.variant == v}
                              for m in sizes for v in (slow, fast)]) if sizes else set()
    if len(sizes) < 2 or not envs:
        return "not run"
    cells = [speedup_cell(exp1, slow, fast, total_time, m, envs).split(" [")[0] for m in sizes]
    return f"{' / '.join(cells)} ({' / '.join(sizes)}; on {', '.join(sorted(envs))})"


def complexity_trend(exp1: list[Run], slow: str, fast: str, cx: dict, model: str = "small") -> str:
    """How the speedup changes with env complexity: the log-log slope over envs, and the two ends."""
    per_env = {env: geomean(r) for (env, m), r in pair_ratios(exp1, slow, fast, total_time).items()
               if m == model and env in cx}
    if len(per_env) < 3:
        return "not run"
    envs = sorted(per_env, key=cx.get)
    slope = np.polyfit(np.log10([cx[e] for e in envs]), np.log10([per_env[e] for e in envs]), 1)[0]
    return (f"{10 ** slope:.2f}x per 10x env complexity over {len(envs)} envs: {per_env[envs[0]]:.2f}x on "
            f"{envs[0]} (simplest), {per_env[envs[-1]]:.2f}x on {envs[-1]} (most complex)")


def overhead_cell(exp1: list[Run], variants, model: str = "small", bucket: int | None = None) -> str:
    """Per variant: iterations 1..7 against 8..end (bucket None), or one bucket's seconds."""
    cells = []
    for v in variants:
        if means := bucket_means(exp1, v, model):
            cells.append(f"{v} {means[1] / means[2]:.2f}x" if bucket is None else f"{v} {fmt(means[bucket])} s")
    return ", ".join(cells) or "not run"


def findings_section(exp1: list[Run], exp2: list[Run], cx: dict, md: list[str]):
    md += ["## The seed's findings next to ours", "",
           "The seed's claims as its README states them (on a GPU); ours from these runs. Speedups are "
           "geometric means of total run time (Experiment 1) with 95% bootstrap intervals over envs.", ""]
    steady_time = steady("time/iteration")
    rows = [
        ["Linen vs NNX, small model", "1.2x (geometric mean 1.25x)", speedup_cell(exp1, "nnx", "linen", total_time, "small")],
        ["Linen vs NNX, large model", "1.05x", speedup_cell(exp1, "nnx", "linen", total_time, "large")],
        ["Linen vs NNX without overheads (iterations 8..end), small", "1.02x",
         speedup_cell(exp1, "nnx", "linen", steady_time, "small")],
        ["Linen vs PyTorch, small model", "6x (geometric mean 5.88x)",
         speedup_cell(exp1, "torch", "linen", total_time, "small")],
        ["Linen vs PyTorch (compiled), small model", "– (its torch.compile compiled nothing)",
         speedup_cell(exp1, "torch_compile", "linen", total_time, "small")],
        ["Linen vs PyTorch, large model", "1.7x (geometric mean 1.69x)",
         speedup_cell(exp1, "torch", "linen", total_time, "large")],
        ["The gap shrinks with model size (torch → linen)", "5.88x / 4.62x / 1.69x (small / medium / large)",
         size_trend(exp1, "torch", "linen")],
        ["The gap shrinks with env complexity (torch → linen, small)", "smaller speedup on more complex envs",
         complexity_trend(exp1, "torch", "linen", cx)],
        ["NNX vs Linen grows with env complexity (nnx → linen, small)", "larger speedup on more complex envs",
         complexity_trend(exp1, "nnx", "linen", cx)],
        ["NNX has extra overhead in iterations 1..7 (their mean against 8..end, small)",
         "NNX yes, growing with model and env; Linen little", overhead_cell(exp1, ("nnx", "nnx_cached", "linen"))],
        ["PyTorch's iteration times are flat from iteration 1 (1..7 against 8..end, small)",
         "no secondary overhead", overhead_cell(exp1, ("torch", "torch_compile", "linen"))],
        ["PyTorch has the smallest first-iteration overhead (iteration 0, small)", "for most envs",
         overhead_cell(exp1, ("torch", "torch_compile", "linen", "nnx"), bucket=0)],
        ["Without jit, Linen and NNX fall behind PyTorch (synced iteration, small)",
         "slower than torch on all but one env",
         "; ".join(f"{v} → torch {speedup_cell(exp2, v, 'torch', steady_time, 'small')}"
                   for v in ("linen-nojit", "nnx-nojit"))],
    ]
    emit("One row per claim of the seed's README", ["claim", "seed (GPU)", "ours"], rows, md)


def bootstrap_mean_ci(x, n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of the mean, resampling runs (one per seed)."""
    if len(x) < 2:
        return (math.nan, math.nan)
    means = np.random.default_rng(seed).choice(np.asarray(x, float), (n, len(x))).mean(axis=1)
    return float(np.percentile(means, 2.5)), float(np.percentile(means, 97.5))


def learning_section(small: list[Run], parity: list[Run], out: Path, md: list[str]) -> list[str]:
    plot_learning_curves(small, out / "learning_curves.png", "steps")
    plot_learning_curves(small, out / "learning_curves_time.png", "wall time")
    md += ["## Learning parity", "",
           "Per run, the mean return of the episodes that ended in the last 10 iterations; per variant, the "
           "mean over runs (seeds) with a 95% bootstrap interval resampling runs. \"differs\" marks an "
           f"interval that does not overlap {REFERENCE}'s: the variants should learn alike.", ""]
    rows = []
    for env in sorted({r.env_id for r in parity}):
        for model in MODELS:
            finals = {v: [f for r in parity if (r.env_id, r.model, r.variant) == (env, model, v)
                          if (f := r.summary.get("charts/episodic_return_final")) is not None]
                      for v in variant_order({r.variant for r in parity if (r.env_id, r.model) == (env, model)})}
            ref = bootstrap_mean_ci(finals.get(REFERENCE, []))
            for v, f in finals.items():
                if not f:
                    continue
                low, high = bootstrap_mean_ci(f)
                differs = v != REFERENCE and (high < ref[0] or low > ref[1])  # False when either is NaN
                rows.append([env, model, v, len(f), float(np.mean(f)), f"[{fmt(low)}, {fmt(high)}]",
                             "differs" if differs else ""])
    emit("Final return", ["env", "model", "variant", "runs", "mean", "95% CI", f"vs {REFERENCE}"], rows, md)
    return ["learning_curves.png", "learning_curves_time.png"]


def report(args: Report) -> int:
    import matplotlib

    matplotlib.use("Agg")
    out = Path(args.out)
    runs, skipped = find_runs(list(args.runs))
    for path, why in skipped:
        console.print(f"[yellow]warning[/]: skipped {path}: {why}")
    if not runs:
        console.print("[red]error[/]: no complete run found in " + ", ".join(args.runs))
        return 1
    out.mkdir(parents=True, exist_ok=True)
    times = env_times(out, sorted({r.env_id for r in runs}))
    cx = complexity(times)
    md = ["# benchback report", "", f"{len(runs)} runs read from {', '.join(args.runs)}; {len(skipped)} skipped.", ""]
    md += hardware_section(runs)
    md += ["## Environment complexity", "", "| env | step time of 32 envs (µs) | relative |", "|---|---|---|"]
    md += [f"| {e} | {t * 1e6:.1f} | {cx[e]:.2f} |" for e, t in sorted(times.items(), key=lambda kv: kv[1])] + [""]

    charts = []
    of = lambda experiment: [r for r in runs if r.experiment == experiment]
    if exp1 := of("exp1"):
        charts += exp1_section(exp1, cx, out, md)
    if exp2 := of("exp2"):
        charts += exp2_section(exp2, cx, out, md)
    if exp3 := of("exp3"):
        charts += exp3_section(exp3, out, md)
    if cpuenv := of("cpuenv"):
        charts += cpuenv_section(cpuenv, out, md)
    if envscale := of("envscale"):
        charts += envscale_section(envscale, out, md)
    if exp1:
        findings_section(exp1, of("exp2"), cx, md)
    if small := [r for r in runs if r.model == "small" and r.experiment != "envscale"]:
        charts += learning_section(small, exp1 or small, out, md)  # parity over Experiment 1's seeds

    md += ["## Charts", ""] + [f"![{c}]({c})" for c in charts] + [""]
    if skipped:
        md += ["## Skipped runs", ""] + [f"- `{p}`: {why}" for p, why in skipped] + [""]
    (out / "REPORT.md").write_text("\n".join(md))
    console.print(f"wrote {out / 'REPORT.md'} and {len(charts)} charts")
    return 0


@dataclass
class Archive:
    """Packs what the report reads of every complete run (run.json, summary.json and the event
    files; not the console logs) into one .tar.xz that analyze.py reads as it reads a folder."""

    runs: tyro.conf.Positional[tuple[str, ...]] = ("runs",)
    """folders holding run directories; each goes in the archive under its own name"""
    out: str = "results/study.tar.xz"
    """the archive to write"""


def archive(args: Archive) -> int:
    count = 0
    with tarfile.open(args.out, "w:xz", preset=9) as tar:
        for root in map(Path, args.runs):
            runs, skipped = runs_below(root)
            for path, why in skipped:
                console.print(f"[yellow]warning[/]: left out {path}: {why}")
            for run in runs:
                for f in sorted([run.path / "run.json", run.path / "summary.json", *run.path.glob("*tfevents*")]):
                    tar.add(f, arcname=str(root.resolve().name / f.relative_to(root)))
            count += len(runs)
    console.print(f"wrote {args.out}: {count} runs, {Path(args.out).stat().st_size / 1e6:.1f} MB")
    return 0 if count else 1


def main() -> int:
    if sys.argv[1:2] == ["archive"]:
        return archive(tyro.cli(Archive, args=sys.argv[2:], prog="analyze.py archive"))
    if sys.argv[1:2] == ["envtime"]:
        args = tyro.cli(EnvTime, args=sys.argv[2:], prog="analyze.py envtime")
        times = env_times(Path(args.out), list(args.envs or SEED_ENVS), args.num_envs, args.steps, args.force)
        table = Table(title="env step time (32 envs, random actions)")
        for col in ("env", "µs per step", "relative"):
            table.add_column(col)
        for env, rel in sorted(complexity(times).items(), key=lambda kv: kv[1]):
            table.add_row(env, f"{times[env] * 1e6:.1f}", f"{rel:.2f}")
        console.print(table)
        return 0
    return report(tyro.cli(Report, description=__doc__))


if __name__ == "__main__":
    sys.exit(main())
