"""The answer first: what the study is made of (machines, runs), the headline table and chart
that README.md shows, generated like every other figure."""

import json
from collections import defaultdict

import numpy as np

from . import agents, continuous, cpuenv, expensive, pixels
from .exp1 import REFERENCE, linen_seconds, model_size_table, pairs_for, runs_behind
from .output import NAMES, color, fmt, markdown_table, name, variant_order
from .runs import EXPERIMENTS
from .stats import (MODELS, TOO_SHORT, TOO_SHORT_NOTE, below, bucket_means, missing, models_in, not_below, one_ratio,
                    ratio_cell, session_of, steady, total_time)

STEADY = steady("time/iteration")


def study_section(runs, skipped, out):
    seen = defaultdict(int)
    for r in runs:
        key = (r.info.get("device"), r.info.get("cpu"), json.dumps(r.info.get("versions", {}), sort_keys=True))
        seen[key] += 1
    rows = [[n, device, cpu, ", ".join(f"{k} {val}" for k, val in json.loads(versions).items() if val)]
            for (device, cpu, versions), n in sorted(seen.items(), key=lambda kv: -kv[1])]
    out.table("Machines and versions", ["runs", "device", "CPU", "versions"], rows, block="machines")
    sessions_table(runs, out)
    rows = []
    for exp in EXPERIMENTS:
        for model in (*MODELS, "cnn"):  # cnn: the pixel presets' CNN
            sel = [r for r in runs if r.experiment == exp and r.model == model]
            if sel:
                its = sorted({r.num_iterations for r in sel})
                rows.append([exp, model, len(sel), len({r.env_id for r in sel}), len({r.variant for r in sel}),
                             len({r.seed for r in sel}), "/".join(map(str, its))])
    out.table("What ran", ["experiment", "model", "runs", "envs", "variants", "seeds", "iterations"], rows,
              block="what-ran", note=f"{len(runs)} runs analysed, {len(skipped)} skipped.")


def sessions_table(runs, out):
    """Each session (one bench.sh sitting) with what its runs recorded of the machine and what its
    calibration measured, so that a change of machine between sessions shows."""
    rows = []
    for session in sorted({session_of(r) for r in runs}, key=lambda s: s or ""):
        sel = [r for r in runs if session_of(r) == session]
        info = sel[0].info
        loads = [r.info["load_average"][0] for r in sel if "load_average" in r.info]
        cal = next((r.calibration for r in sel if r.calibration), None)
        ms = lambda x: f"{x * 1e3:.2f}" if x else "–"
        rows.append([session or "not recorded", len(sel), ", ".join(sorted({r.experiment for r in sel})),
                     info.get("cpu"), info.get("cores", "–"), " ".join(info.get("cpu_flags", [])) or "–",
                     fmt(info.get("cpu_mhz")), f"{np.median(loads):.2f} ({max(loads):.2f})" if loads else "–",
                     *(ms(cal["minibatch_step_seconds"][fw]) if cal else "–" for fw in ("torch", "jax")),
                     *(ms(cal["layer_seconds"][fw]["large"]) if cal else "–" for fw in ("torch", "jax"))])
    out.table("Sessions: the machine as each sitting's runs found it (load: the 1-minute load average as a run "
              "started, median and max) and its calibration (calibrate.py, ms: one small-model minibatch step; "
              "one 1024-wide layer)", ["session", "runs", "experiments", "CPU", "cores", "AVX flags", "MHz",
                                       "load at start", "step torch", "step jax", "layer torch", "layer jax"],
              rows, block="sessions")
    # one layer's time depends on the host (its vector units): the claim is decided per host, on every CPU session there
    wide = {session_of(r): r.calibration["layer_seconds"] for r in runs
            if r.calibration and "avx512f" in r.info.get("cpu_flags", []) and r.info.get("device") == "cpu"}
    ratios = [layers["torch"]["large"] / layers["jax"]["large"] for layers in wide.values()]
    out.claim("torch-large-layer-slower-on-avx512", ratios and min(ratios) > 1, ("slower",),
              "torch / jax, one 1024-wide layer, each session on an AVX-512 host: " + ", ".join(f"{x:.2f}" for x in ratios))



def headline_section(exp1, cpuenv_runs, agent_runs, expensive_runs, continuous_runs, pixel_runs, out):
    """README's table: each variant's steady-state time against Linen's at each model size."""
    models = models_in(exp1)
    variants = [v for v in variant_order({r.variant for r in exp1}) if v != REFERENCE]
    seconds = lambda m: s if (s := linen_seconds(exp1, m)) in (TOO_SHORT, "not run") else f"{s} s"
    rows = [[f"{NAMES[REFERENCE]}: seconds per iteration", *(seconds(m) for m in models)]]
    for v in variants:
        rows.append([f"{name(v, exp1)} / Linen", *(ratio_cell(row) if (row := one_ratio(exp1, v, REFERENCE, STEADY, m))
                                                   else missing(exp1, (v,), m) for m in models)])
    for v in ("torch", "torch_compile"):
        if v in variants:
            rows.append([f"whole run, {name(v, exp1)} / Linen",
                         *(ratio_cell(one_ratio(exp1, v, REFERENCE, total_time, m)) for m in models)])
    out.heading("The answer first")
    out.table("Time per iteration against Flax Linen's, steady state (iterations 8..end)",
              ["time, A / B", *models], rows, block="headline",
              note=f"Runs per variant — {runs_behind(exp1)}. A ratio above 1: that variant takes longer than "
                   f"Linen. 95% intervals over envs; fewer than 5 envs give their number and the range instead. "
                   f"{TOO_SHORT_NOTE}")
    compile_cells = [f"{name(v, exp1)} {fmt(bucket_means(exp1, v, 'small')[0])} s"
                     for v in (REFERENCE, "torch", "torch_compile")
                     if bucket_means(exp1, v, "small")]
    groups = {"compilation": [["iteration 0 (small model, mean over runs)", ", ".join(compile_cells)]],
              "CPU environments": cpuenv.headline_rows(cpuenv_runs), "many agents": agents.headline_rows(agent_runs),
              "expensive env": expensive.headline_rows(expensive_runs),
              "continuous actions": continuous.headline_rows(continuous_runs), "pixels": pixels.headline_rows(pixel_runs)}
    lines = []  # one short table per topic, README's block all of them
    for topic, rows in groups.items():
        rows = [[text.removeprefix(f"{topic}, ").removeprefix(f"{topic}: "), value] for text, value in rows]
        if rows and rows[0][1]:
            out.table(f"What else a user weighs: {topic} (small model, unless a line names another)",
                      [topic, "measured"], rows)
            lines += [*markdown_table([topic, "measured"], rows), ""]
    out.block("headline-more", lines[:-1])
    plot_headline(exp1, models, variants, out)
    model_size_table(exp1, pairs_for({r.variant for r in exp1}), out)
    size_claims(exp1, out)


def size_claims(runs, out, small="small", medium="medium"):
    """How each PyTorch ratio moves from the small to the medium model, decided from the model-size
    table: smaller, larger, or level (the ranges, or intervals, overlap). Exactly one of the three
    holds where both sizes ran."""
    row = lambda a, value, m, b: one_ratio(runs, a, b, value, m)
    for a, b, value, what in (("torch", REFERENCE, STEADY, "eager-steady-ratio"),
                              ("torch_compile", REFERENCE, STEADY, "compiled-steady-ratio"),
                              ("torch", REFERENCE, total_time, "eager-whole-run-ratio"),
                              ("torch_compile", REFERENCE, total_time, "compiled-whole-run-ratio"),
                              ("torch_compile", "torch", STEADY, "compiled-over-eager-steady-ratio")):
        at_small, at_medium = row(a, value, small, b), row(a, value, medium, b)
        said = (f"{a} / {b}, {'steady' if value is STEADY else 'whole runs'}: {small} {ratio_cell(at_small)}, "
                f"{medium} {ratio_cell(at_medium)}")
        out.claim(f"{what}-smaller-at-{medium}", below(at_medium, at_small), ("smaller",), said)
        out.claim(f"{what}-larger-at-{medium}", below(at_small, at_medium), ("larger",), said)
        out.claim(f"{what}-level-across-sizes", not_below(at_medium, at_small) and not_below(at_small, at_medium),
                  ("level",), said)


def plot_headline(exp1, models, variants, out):
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    fig, ax = plt.subplots(figsize=(9, 5.2))
    width = 0.8 / len(variants)
    top = 1.0
    for j, v in enumerate(variants):
        for i, m in enumerate(models):
            row = one_ratio(exp1, v, REFERENCE, STEADY, m)
            if not row:
                continue
            x = i + (j - (len(variants) - 1) / 2) * width
            has_ci = row["envs"] >= 5
            err = [[row["geomean"] - row["ci_low"]], [row["ci_high"] - row["geomean"]]] if has_ci else None
            # from the line at 1: up when slower than Linen, down when faster
            ax.bar(x, row["geomean"] - 1, width, bottom=1, color=color(v), label=name(v, exp1) if i == 0 else None,
                   yerr=err, capsize=2, ecolor="black")
            above = max(row["geomean"], row["ci_high"] if has_ci else 0, 1)
            ax.text(x, above * 1.03, f"{row['geomean']:.2f}", ha="center", va="bottom", fontsize=7)
            top = max(top, row["ci_high"] if has_ci else row["geomean"])
    ax.axhline(1, color="black", lw=0.8)
    ax.set_yscale("log")
    ticks = [t for t in (0.5, 0.75, 1, 1.5, 2, 3, 4, 6) if t <= top * 1.3]
    ax.yaxis.set_major_locator(FixedLocator(ticks))
    ax.yaxis.set_minor_locator(NullLocator())
    ax.set_yticklabels([f"{t:g}x" for t in ticks])
    labels = []
    for m in models:
        sel = [r for r in exp1 if r.model == m and r.variant == REFERENCE]
        envs, seeds = len({r.env_id for r in sel}), len({r.seed for r in sel})
        its = "/".join(map(str, sorted({r.num_iterations for r in sel})))
        labels.append(f"{m} model\n{envs} env{'s' * (envs > 1)} × {seeds} seed{'s' * (seeds > 1)}\n{its} iterations\n"
                      f"= {len(sel)} run{'s' * (len(sel) > 1)} per bar")
    ax.set_xticks(range(len(models)), labels)
    ax.set_ylabel("time per iteration / Flax Linen's\n(steady state; above 1: slower)")
    ax.set_ylim(top=top * 1.4)
    ax.legend(fontsize=8, loc="upper left", ncols=2)
    machines = sorted({f"{r.info.get('cpu')} ({r.info.get('device')})" for r in exp1})
    ax.set_title(f"How long each framework takes against Flax Linen\non {', '.join(machines)}", fontsize=10)
    fig.tight_layout()
    out.chart(fig, "headline.png", "Each framework's steady-state time per iteration against Flax Linen's at "
              "each model size: bars above the line are slower; black whiskers are 95% intervals over envs "
              "(none where fewer than 5 envs ran).")
