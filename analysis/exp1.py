"""Experiment 1 (benchback-rl's): every env x the variants as meant to run x model sizes, timed
asynchronously. Total run time, benchback-rl's overhead buckets, and the steady state."""

import math

import numpy as np

from .output import MODEL_MARKERS, color, fmt, variant_order
from .stats import (MODELS, TOO_SHORT_NOTE, bucket_means, first_iteration, iteration_buckets, median_of, missing,
                    models_in, pair_ratios, ratio_cell, sessions_note, speedup_table, spread, startup, steady,
                    total_time)

REFERENCE = "linen"  # ratios are quoted against Linen: "torch / linen 2.8x" = torch takes 2.8x Linen's time
COMPILED_VS_EAGER = [("torch_compile", "torch"), ("nnx_cached", "nnx")]  # what compiling buys in a framework
RATIO_HEADER = ["time, A / B", "model", "geometric mean", "95% CI (or the range)", "median", "envs", "run pairs"]


def pairs_for(variants: set[str]) -> list[tuple[str, str]]:
    pairs = [(v, REFERENCE) for v in variant_order(variants) if v != REFERENCE and REFERENCE in variants]
    return pairs + [(a, b) for a, b in COMPILED_VS_EAGER if a in variants and b in variants]


def ratio_rows(rows) -> list[list]:
    return [[r["pair"], r["model"], f"{r['geomean']:.2f}x", spread(r), f"{r['median']:.2f}x", r["envs"],
             r["ratios"]] for r in rows]


def plot_durations(runs, cx, out):
    import matplotlib.pyplot as plt

    models = models_in(runs)
    fig, axes = plt.subplots(1, len(models), figsize=(5 * len(models) + 1.5, 4.5), sharey=True, squeeze=False)
    for ax, model in zip(axes[0], models):
        subset = [r for r in runs if r.model == model]
        for v in variant_order({r.variant for r in subset}):
            pts = [(cx[r.env_id], total_time(r)) for r in subset if r.variant == v]
            ax.scatter(*zip(*pts), color=color(v), marker=MODEL_MARKERS[model], label=v, alpha=0.8)
        ax.set(xscale="log", yscale="log", title=f"{model} model ({len(subset)} runs)",
               xlabel="env complexity (step time / fastest env's)")
    axes[0][0].set_ylabel("total run time (s)")
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle("Experiment 1: total duration of training (async timing)")
    fig.tight_layout()
    out.chart(fig, "exp1_durations.png", "Total run time of every Experiment 1 run against its env's step "
              "time: read the vertical gap between colours, the framework's share of the time.")


def plot_ratios(runs, pairs, value, title, name, caption, out):
    """One box per pair and model size: every repeat's ratio, over envs."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(pairs) + 2), 4.5))
    ticks, labels = [], []
    for i, (a, b) in enumerate(pairs):
        for j, model in enumerate(MODELS):
            vals = [x for (env, m), rr in pair_ratios(runs, a, b, value).items() if m == model for x in rr]
            if not vals:
                continue
            x = i * 4 + j
            ax.boxplot([vals], positions=[x], widths=0.7, showfliers=False)
            jitter = np.random.default_rng(x).uniform(-0.2, 0.2, len(vals))
            ax.scatter(x + jitter, vals, s=10, color=color(a), marker=MODEL_MARKERS[model], alpha=0.7)
        ticks.append(i * 4 + 1)
        labels.append(f"{a}\n/ {b}")
    ax.axhline(1, color="grey", lw=0.8, ls="--")
    ax.set(yscale="log", ylabel="time of A / time of B (above 1: A is slower)", title=title)
    ax.set_xticks(ticks, labels, fontsize=8)
    fig.tight_layout()
    out.chart(fig, name, caption)


def plot_overhead(runs, out):
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
                    ax.scatter(i + jitter, vals, color=color(v), marker=MODEL_MARKERS[model], s=14, alpha=0.8,
                               label=model if i == 0 and bucket == 0 else None)
        ax.set(yscale="log", title=name)
        ax.set_xticks(range(len(variants)), variants, rotation=45, ha="right", fontsize=8)
    axes[0].set_ylabel("seconds per iteration")
    axes[0].legend(title="model", fontsize=8)
    fig.suptitle("Overhead: iteration durations by bucket, one point per run")
    fig.tight_layout()
    out.chart(fig, "exp1_overhead.png", "Seconds per iteration in benchback-rl's buckets: compilation shows "
              "in iteration 0; a variant whose 1..7 sits above its 8..end has a secondary overhead.")


def runs_behind(runs) -> str:
    """'small: 12 envs × 3 seeds, 100 iterations; ...' for the runs of one variant."""
    parts = []
    for model in MODELS:
        sel = [r for r in runs if r.model == model and r.variant == REFERENCE]
        if sel:
            envs, seeds = {r.env_id for r in sel}, {r.seed for r in sel}
            iterations = sorted({r.num_iterations for r in sel})
            where = f"{len(envs)} envs" if len(envs) > 1 else next(iter(envs))
            parts.append(f"{model}: {where} × {len(seeds)} seed{'s' * (len(seeds) > 1)}, "
                         f"{'/'.join(map(str, iterations))} iterations")
    return "; ".join(parts)


def section(exp1, cx, out):
    out.heading("Experiment 1: total duration (async timing)",
                f"Runs per variant — {runs_behind(exp1)}. Ratios are time of A / time of B, one per repeat "
                "of an env (above 1: A is slower).", sessions_note(exp1))
    pairs = pairs_for({r.variant for r in exp1})
    plot_durations(exp1, cx, out)
    plot_ratios(exp1, pairs, total_time, "Total run time (every repeat, every env)", "exp1_speedups.png",
                "Total run time of each variant against Linen's, per run pair: above the dashed line the "
                "variant took longer; start-up and compilation are included.", out)
    out.table("Total run time", RATIO_HEADER, ratio_rows(speedup_table(exp1, total_time, pairs)))
    plot_overhead(exp1, out)
    rows = []
    for v in variant_order({r.variant for r in exp1}):
        for model in MODELS:
            if means := bucket_means(exp1, v, model):
                rows.append([v, model, sum(r.variant == v and r.model == model for r in exp1), *means])
    out.table("Overhead: mean seconds per iteration by bucket",
              ["variant", "model", "runs", "iteration 0", "iterations 1..7", "iterations 8..end"], rows)
    plot_ratios(exp1, pairs, steady("time/iteration"), "Steady state (iterations 8..end)",
                "exp1_steady_speedups.png", "Steady-state iteration time of each variant against Linen's, "
                "per run pair: what each framework costs once compiled and warm.", out)
    out.table("Steady state: mean iteration time of iterations 8..end", RATIO_HEADER,
              ratio_rows(speedup_table(exp1, steady("time/iteration"), pairs)))
    costs_table(exp1, out)
    model_size_table(exp1, pairs, out, block="exp1-model-size")


def costs_table(exp1, out, model="small"):
    """What a run costs besides its steady iterations: start-up, compilation, the whole run."""
    rows = []
    for v in variant_order({r.variant for r in exp1 if r.model == model}):
        sel = [r for r in exp1 if r.variant == v and r.model == model]
        means = bucket_means(exp1, v, model)
        rows.append([v, len(sel), median_of(sel, startup), means[0], median_of(sel, startup, first_iteration),
                     means[2], median_of(sel, total_time)])
    out.table(f"What a {model}-model run costs (seconds; iteration 0 and 8..end: means over runs; the rest: "
              "medians over runs, of the sum where two are added)",
              ["variant", "runs", "start-up (imports, set-up)", "iteration 0 (compilation)",
               "start-up + iteration 0", "iterations 8..end, each", "whole run"], rows, block="run-costs")


def model_size_table(exp1, pairs, out, block="model-size"):
    models = models_in(exp1)
    rows = []
    for label, value in (("steady state", steady("time/iteration")), ("whole run", total_time)):
        for a, b in pairs:
            cells = {r["model"]: ratio_cell(r) for r in speedup_table(exp1, value, [(a, b)], models)}
            rows.append([f"{a} / {b}", label, *(cells.get(m) or missing(exp1, (a, b), m) for m in models)])
    rows.append([f"{REFERENCE}, seconds per iteration", "steady state", *(linen_seconds(exp1, m) for m in models)])
    out.table("By model size", ["time, A / B", "measure", *models], rows, block=block,
              note=f"Runs per variant — {runs_behind(exp1)}. {TOO_SHORT_NOTE}")


def linen_seconds(runs, model, variant=REFERENCE) -> str:
    means = bucket_means(runs, variant, model)
    return fmt(means[2]) if means and np.isfinite(means[2]) else missing(runs, (variant,), model)
