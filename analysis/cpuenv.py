"""CPU environments: {PyTorch, Linen} x {CPU env (Gymnasium), JAX env (Gymnax)}, synced, so a
user can tell what the framework buys from what the environment buys; and env scaling, the
rollout's throughput against the number of environments."""

import math
from collections import defaultdict

import numpy as np

from .envs import env_throughputs
from .output import color, variant_order
from .stats import MODELS, models_in, ratio_cell, speedup_table, steady

# the speedups a user weighs, as time of A / time of B
CPU_ENV_PAIRS = [
    ("torch_gymnasium", "torch", "the environment moved to JAX, PyTorch kept"),
    ("torch_gymnasium", "linen", "everything moved to JAX"),
    ("torch_gymnasium", "linen_gymnasium", "the framework alone, CPU env"),
    ("torch", "linen", "the framework alone, JAX env"),
    ("linen_gymnasium", "linen", "the environment moved to JAX, Linen kept"),
]
CORNERS = ("torch_gymnasium", "torch", "torch_compile", "linen_gymnasium", "linen")
PARTS = (("whole iteration", "time/iteration"), ("rollout", "time/rollout"), ("update", "time/update"))


def plot_cpuenv(runs, variants, out):
    """Per model: each env's synced iteration split into rollout (dark) and update (light), per variant."""
    import matplotlib.pyplot as plt

    models = models_in(runs)
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
    out.chart(fig, "cpuenv_2x2.png", "Each corner's iteration split into rollout (dark) and update (light): "
              "compare the dark bars for what the environment costs, the light ones for the framework.")


def cpuenv_section(runs, out):
    out.heading("CPU environments: is it the framework or the environment?",
                "`*_gymnasium` variants step the Gymnasium twin of each env on the CPU (NumPy, sync vector env, "
                "same-step autoreset); the others step Gymnax in JAX. Synced, iterations 8..end.")
    present = {r.variant for r in runs}
    variants = [v for v in CORNERS if v in present] + variant_order(present - set(CORNERS))
    plot_cpuenv(runs, variants, out)
    rows = []
    for model in MODELS:
        for env in sorted({r.env_id for r in runs}):
            for v in variants:
                sel = [r for r in runs if r.env_id == env and r.variant == v and r.model == model]
                if sel:
                    median = lambda tag: float(np.median([x for x in map(steady(tag), sel) if x] or [math.nan]))
                    rows.append([env, model, v, len(sel), median("time/iteration"), median("time/rollout"),
                                 median("time/update")])
    out.table("Seconds per iteration, median over runs (8..end)",
              ["env", "model", "variant", "runs", "iteration", "rollout", "update"], rows, block="cpuenv-times")
    rows = []
    for a, b, what in CPU_ENV_PAIRS:
        for model in MODELS:
            cells = [next(iter(speedup_table(runs, steady(tag), [(a, b)], (model,))), None) for _, tag in PARTS]
            if cells[0]:
                rows.append([what, f"{a} / {b}", model, *map(ratio_cell, cells)])
    out.table("The ratios a user weighs (geometric mean over envs)",
              ["what changes", "time, A / B", "model", *(name for name, _ in PARTS)], rows, block="cpuenv-ratios")


# ---- env scaling
def rollout_throughput(run):
    """Env steps per second of a synced rollout, iterations 1..end (iteration 0 compiles)."""
    seconds = run.series("time/rollout")[1][1:]
    args = run.info["args"]
    return args["num_envs"] * args["num_steps"] / float(np.mean(seconds)) if len(seconds) else None


def saturation(points: dict[int, float]) -> int:
    """The fewest envs that reach 90% of the best throughput: where it stops growing."""
    best = max(points.values())
    return min(n for n, x in points.items() if x >= 0.9 * best)


def envscale_section(runs, out):
    import matplotlib.pyplot as plt

    out.heading("Environment scaling: rollout throughput against the number of environments",
                "Synced rollout, iterations 1..end; env steps per second (num_envs x num_steps / rollout time), "
                "one run per point. Grey: the environment alone with random actions (Gymnax in one jitted scan; "
                "Gymnasium's sync vector env; Gymnasium's NumPy-vectorized CartPole, which autoresets a step late "
                "and so serves no script), measured once by analyze.py.")
    envs = sorted({r.env_id for r in runs})
    counts = sorted({r.info["args"]["num_envs"] for r in runs})
    raw = env_throughputs(out.folder, envs, counts)
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
    out.chart(fig, "envscale.png", "Rollout throughput as the number of environments grows: where a line "
              "flattens, that setup has stopped scaling; the grey lines are the environments alone.")
    out.table("Rollout throughput (env steps per second) by num_envs; saturates: fewest envs within 10% of the best",
              ["env", "variant", *map(str, counts), "saturates"], rows, block="envscale")
