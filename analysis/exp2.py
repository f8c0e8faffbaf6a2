"""Experiment 2 (benchback-rl's): every compile mode, small model, synced, so that rollout and
update are timed apart; and Experiment 3: the same modes on Acrobot-v1 at each model size."""

import math

import numpy as np

from .exp1 import RATIO_HEADER, pairs_for, ratio_rows
from .output import color, variant_order
from .stats import MODELS, geomean, speedup_table, steady


def plot_rollout_update(runs, x_of, xlabel, title, name, caption, out, xlog=True):
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
    out.chart(fig, name, caption)


def exp2_section(exp2, cx, out):
    envs = sorted({r.env_id for r in exp2})
    out.heading("Experiment 2: rollout and update (synced, small model)",
                f"{len(envs)} env{'s' * (len(envs) > 1)} ({', '.join(envs)}), one run per variant and env "
                "unless the table says more.")
    plot_rollout_update(exp2, lambda r: cx[r.env_id], "env complexity (step time / fastest env's)",
                        "Experiment 2: rollout and update durations by env", "exp2_rollout_update.png",
                        "Synced rollout and update time of every compile mode: the no-jit modes sit an order "
                        "of magnitude above the rest; read rollout and update apart.", out)
    rows = []
    for v in variant_order({r.variant for r in exp2}):
        sel = [r for r in exp2 if r.variant == v]
        rollout = [x for x in map(steady("time/rollout"), sel) if x]
        update = [x for x in map(steady("time/update"), sel) if x]
        rows.append([v, len(sel), geomean(rollout) if rollout else None, geomean(update) if update else None])
    out.table("Synced rollout and update: seconds per iteration (8..end), geometric mean over envs",
              ["variant", "runs", "rollout", "update"], rows, block="exp2-synced")
    pairs = pairs_for({r.variant for r in exp2})
    for tag in ("time/rollout", "time/update"):
        out.table(f"{tag[5:].capitalize()} time (synced, small model)", RATIO_HEADER,
                  ratio_rows(speedup_table(exp2, steady(tag), pairs)))


def exp3_section(exp3, out):
    out.heading("Experiment 3: compile modes (Acrobot-v1, synced)")
    size = {m: i for i, m in enumerate(MODELS)}
    plot_rollout_update(exp3, lambda r: size[r.model], "model size (0 small, 1 medium, 2 large)",
                        "Experiment 3: compile modes by model size (Acrobot-v1)", "exp3_compile_modes.png",
                        "Synced rollout and update time of every compile mode as the model grows: read how "
                        "the gap between modes changes with size.", out, xlog=False)
    rows = []
    for v in variant_order({r.variant for r in exp3}):
        for model in MODELS:
            sel = [r for r in exp3 if r.variant == v and r.model == model]
            if sel:
                mean = lambda tag: float(np.mean([steady(tag)(r) or math.nan for r in sel]))
                rows.append([v, model, len(sel), mean("time/rollout"), mean("time/update")])
    out.table("Compile modes: seconds per rollout and update (8..end, Acrobot-v1)",
              ["variant", "model", "runs", "rollout", "update"], rows, block="exp3-modes")
