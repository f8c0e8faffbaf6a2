"""What the study says, as sentences whose every figure is computed here, and benchback-rl's
claims (its README, measured on a GPU) next to what these runs say."""

import numpy as np

from .exp1 import REFERENCE, runs_behind
from .output import fmt
from .stats import (MIN_STEADY, MODELS, STEADY_FROM, TOO_SHORT, below, bucket_means, first_iteration, geomean,
                    includes_one, median_of, missing, models_in, not_below, one_ratio, pair_ratios, ratio_cell, startup,
                    steady, total_time)

STEADY = steady("time/iteration")
JAX_VARIANTS = ("nnx", "nnx_cached", "equinox")
THEIR_TORCH_OVER_LINEN = 5.88  # benchback-rl's README: eager PyTorch / Linen, small model, geometric mean


def cell(runs, a, b, value, model, envs=None) -> str:
    row = one_ratio(runs, a, b, value, model, envs)
    return ratio_cell(row) if row else missing(runs, (a, b), model)


def why_empty(exp1, model) -> str:
    """Too short if any JAX variant ran, with Linen, at this size; not run otherwise."""
    reasons = {missing(exp1, (v, REFERENCE), model) for v in JAX_VARIANTS}
    return TOO_SHORT if TOO_SHORT in reasons else "not run"


def jax_variants(exp1) -> str:
    parts = []
    for model in models_in(exp1):
        cells = []
        for v in JAX_VARIANTS:
            if row := one_ratio(exp1, v, REFERENCE, STEADY, model):
                cells.append(f"{v} / {REFERENCE} {ratio_cell(row)}"
                             + (f", {includes_one(row)}" if row["envs"] >= 5 else ""))
        parts.append(f"At {model}, " + ("; ".join(cells) or why_empty(exp1, model)))
    return "In steady state: " + ". ".join(parts) + "."


def torch_gap(exp1, model="small") -> str:
    return (f"At {model}, eager PyTorch takes {cell(exp1, 'torch', REFERENCE, STEADY, model)} of Linen's steady-state "
            f"time and torch.compile {cell(exp1, 'torch_compile', REFERENCE, STEADY, model)}; over whole runs, "
            f"start-up and compilation included, {cell(exp1, 'torch', REFERENCE, total_time, model)} and "
            f"{cell(exp1, 'torch_compile', REFERENCE, total_time, model)}.")


def compile_payback(exp1, exp2, model="small") -> str:
    """What torch.compile costs up front and when it has paid for itself."""
    start = lambda v: median_of([r for r in exp1 if r.variant == v and r.model == model], startup, first_iteration)
    eager, compiled = bucket_means(exp1, "torch", model), bucket_means(exp1, "torch_compile", model)
    if None in (eager, compiled, start("torch"), start("torch_compile")):
        return (f"At {model}, torch.compile / torch in steady state "
                f"{cell(exp1, 'torch_compile', 'torch', STEADY, model)}.")
    extra, saved = start("torch_compile") - start("torch"), eager[2] - compiled[2]
    payback = f"after about {extra / saved:.0f} iterations" if saved > 0 else "never (no steady-state gain)"
    text = (f"At {model}, a steady iteration of torch.compile takes "
            f"{cell(exp1, 'torch_compile', 'torch', STEADY, model)} of eager's; start-up and iteration 0 take "
            f"{start('torch_compile'):.1f} s against eager's {start('torch'):.1f} s (medians of their sums), so "
            f"compiling pays back {payback}, and a whole {model} run takes {cell(exp1, 'torch_compile', 'torch', total_time, model)} "
            "of eager's time.")
    for m in models_in(exp1)[1:]:
        text += f" At {m}: steady {cell(exp1, 'torch_compile', 'torch', STEADY, m)}."
    if exp2:
        text += (f" Synced (Experiment 2), the compiled update alone takes "
                 f"{cell(exp2, 'torch_compile', 'torch', steady('time/update'), 'small')} of eager's and the "
                 f"compiled rollout {cell(exp2, 'torch_compile', 'torch', steady('time/rollout'), 'small')}.")
    return text


def secondary_overhead(exp1) -> str:
    parts = []
    for model in models_in(exp1):
        ratios = {v: m[1] / m[2] for v in sorted({r.variant for r in exp1})
                  if (m := bucket_means(exp1, v, model)) and m[2] > 0}
        if not ratios:  # its runs are too short for a steady state
            parts.append(f"{model} unmeasured (fewer than {STEADY_FROM + MIN_STEADY} iterations)")
            continue
        n = min(sum(r.variant == v and r.model == model for r in exp1) for v in ratios)
        lo, hi = min(ratios, key=ratios.get), max(ratios, key=ratios.get)
        parts.append(f"{model} {ratios[lo]:.2f}x ({lo}) to {ratios[hi]:.2f}x ({hi})"
                     + (" from one run each" if n == 1 else ""))
    return "Iterations 1..7 take, of a variant's iterations 8..end: " + "; ".join(parts) + "."


def size_trend(exp1) -> str:
    models = models_in(exp1)
    common = set.intersection(*[{r.env_id for r in exp1 if r.model == m} for m in models]) if models else set()
    text = ("Steady state, eager PyTorch / Linen: "
            + ", ".join(f"{m} {cell(exp1, 'torch', REFERENCE, STEADY, m)}" for m in models) + ".")
    if len(models) > 1 and common:
        text += (f" On {', '.join(sorted(common))} alone, the one env run at every size: "
                 + ", ".join(f"{m} {cell(exp1, 'torch', REFERENCE, STEADY, m, common)}" for m in models)
                 + "; torch.compile / Linen "
                 + ", ".join(f"{m} {cell(exp1, 'torch_compile', REFERENCE, STEADY, m, common)}" for m in models)
                 + ".")
    return text


def complexity_trend(exp1, cx, a="torch", b=REFERENCE, model="small") -> str:
    """How a ratio changes with env complexity: the two ends and the log-log slope over envs."""
    per_env = {env: geomean(r) for (env, m), r in pair_ratios(exp1, a, b, total_time).items()
               if m == model and env in cx}
    if len(per_env) < 3:
        return "not run"
    envs = sorted(per_env, key=cx.get)
    slope = np.polyfit(np.log10([cx[e] for e in envs]), np.log10([per_env[e] for e in envs]), 1)[0]
    lo, hi = min(per_env, key=per_env.get), max(per_env, key=per_env.get)
    return (f"{a} / {b} per env from {per_env[lo]:.2f}x ({lo}) to {per_env[hi]:.2f}x ({hi}); "
            f"{10 ** slope:.2f}x per 10x env complexity over {len(envs)} envs, {per_env[envs[0]]:.2f}x on the "
            f"simplest ({envs[0]}), {per_env[envs[-1]]:.2f}x on the most complex ({envs[-1]})")


def no_jit(exp2, exp3) -> str:
    parts = []
    for label, runs, model in (("Experiment 2", exp2, "small"), ("Experiment 3", exp3, "small")):
        if not runs:
            continue
        envs = sorted({r.env_id for r in runs})
        seconds = lambda v, tag: [x for r in runs if r.variant == v and r.model == model
                                  if (x := steady(tag)(r))]
        cells = []
        for slow, fast in (("linen-nojit", "linen"), ("nnx-nojit", "nnx"), ("torch-nojitenv", "torch")):
            rs, us = seconds(slow, "time/rollout"), seconds(slow, "time/update")
            rf, uf = seconds(fast, "time/rollout"), seconds(fast, "time/update")
            if rs and rf:
                cells.append(f"{slow} rollout {fmt(geomean(rs))} s and update {fmt(geomean(us))} s against "
                             f"{fmt(geomean(rf))} s and {fmt(geomean(uf))} s for {fast}")
        vs_torch = "; ".join(f"{v} / torch {cell(runs, v, 'torch', STEADY, model)}"
                             for v in ("linen-nojit", "nnx-nojit") if one_ratio(runs, v, "torch", STEADY, model))
        over = f"{len(envs)} envs, synced, {model}; geometric means over envs" if len(envs) > 1 else \
            f"{envs[0]}, synced, {model}"
        parts.append(f"{label} ({over}): "
                     + "; ".join(cells) + (f". Per synced iteration, {vs_torch}" if vs_torch else "") + ".")
    return " ".join(parts)


def findings_section(exp1, exp2, exp3, cx, out):
    out.heading("What the study says", f"Every figure computed from the runs. Runs per variant in Experiment 1 — "
                f"{runs_behind(exp1)}.")
    out.text([f"- {jax_variants(exp1)}"], block="finding-jax")
    out.text([f"- {torch_gap(exp1)}"], block="finding-torch")
    if any(r.variant == "torch_compile" for r in exp1):
        out.text([f"- {compile_payback(exp1, exp2)}"], block="finding-compile")
    out.text([f"- {secondary_overhead(exp1)}"], block="finding-overhead")
    out.text([f"- {size_trend(exp1)}"], block="finding-size")
    out.text([f"- Env complexity (small, whole runs): {complexity_trend(exp1, cx)}."], block="finding-complexity")
    if exp2 or exp3:
        out.text([f"- Without jit: {no_jit(exp2, exp3)}"], block="finding-nojit")
    claims_section(exp1, exp2, cx, out)
    findings_claims(exp1, exp2, out)


def findings_claims(exp1, exp2, out, model="small"):
    """What results.md's findings say around the blocks above, decided from the same runs."""
    steady_, whole = (one_ratio(exp1, "torch", REFERENCE, v, model) for v in (STEADY, total_time))
    out.claim("whole-run-narrows-the-eager-gap", below(whole, steady_), ("narrow",),
              f"torch / linen at {model}: whole run {ratio_cell(whole)}, steady {ratio_cell(steady_)}")
    steady_, whole = (one_ratio(exp1, "torch_compile", REFERENCE, v, model) for v in (STEADY, total_time))
    out.claim("whole-run-widens-the-compiled-gap", below(steady_, whole), ("widen",),
              f"torch_compile / linen at {model}: whole run {ratio_cell(whole)}, steady {ratio_cell(steady_)}")
    if not exp2:
        return
    update, rollout = (one_ratio(exp2, "torch_compile", "torch", steady(t), model)
                       for t in ("time/update", "time/rollout"))
    out.claim("compiled-update-faster-rollout-not", below(update, 1) and not_below(rollout, 1), ("faster",),
              f"torch_compile / torch, synced, {model}: update {ratio_cell(update)}, rollout {ratio_cell(rollout)}")
    nojit = {v: one_ratio(exp2, v, "torch", STEADY, model) for v in ("linen-nojit", "nnx-nojit")}
    out.claim("jax-without-jit-falls-far-behind-torch", all(below(2, row) for row in nojit.values()), ("fall",),
              "; ".join(f"{v} / torch, synced iteration {ratio_cell(row)}" for v, row in nojit.items())
              + " (far: above 2 across the range)")


def overhead_cell(exp1, variants, model="small", bucket=None) -> str:
    """Per variant: iterations 1..7 against 8..end (bucket None), or one bucket's seconds."""
    cells = []
    for v in variants:
        if means := bucket_means(exp1, v, model):
            cells.append(f"{v} {means[1] / means[2]:.2f}x" if bucket is None else f"{v} {fmt(means[bucket])} s")
    return ", ".join(cells) or "not run"


def size_cells(exp1, a, b) -> str:
    """The whole-run ratio at each model size, on the envs run at every size (so only the size differs)."""
    models = [m for m in MODELS if any(r.model == m and r.variant == a for r in exp1)]
    envs = set.intersection(*[{r.env_id for r in exp1 if r.model == m and r.variant == v}
                              for m in models for v in (a, b)]) if models else set()
    if len(models) < 2 or not envs:
        return "not run"
    ratios = [f"{one_ratio(exp1, a, b, total_time, m, envs)['geomean']:.2f}x" for m in models]
    return f"{' / '.join(ratios)} ({' / '.join(models)}; on {', '.join(sorted(envs))})"


def claims_section(exp1, exp2, cx, out):
    out.heading("benchback-rl's findings next to ours",
                "benchback-rl's claims as its README states them (measured on a GPU); ours from these runs, as "
                "time of A / time of B over whole runs (Experiment 1) unless the claim says otherwise.")
    rows = [
        ["Linen vs NNX, small model (nnx / linen)", "1.2x (geometric mean 1.25x)",
         cell(exp1, "nnx", "linen", total_time, "small")],
        ["Linen vs NNX, large model", "1.05x", cell(exp1, "nnx", "linen", total_time, "large")],
        ["Linen vs NNX without overheads (iterations 8..end), small", "1.02x",
         cell(exp1, "nnx", "linen", STEADY, "small")],
        ["Linen vs PyTorch, small model (torch / linen)", f"6x (geometric mean {THEIR_TORCH_OVER_LINEN}x)",
         cell(exp1, "torch", "linen", total_time, "small")],
        ["Linen vs compiled PyTorch, small model (torch_compile / linen)", "– (its torch.compile compiled nothing)",
         cell(exp1, "torch_compile", "linen", total_time, "small")],
        ["Linen vs PyTorch, large model", "1.7x (geometric mean 1.69x)",
         cell(exp1, "torch", "linen", total_time, "large")],
        ["The gap shrinks with model size (torch / linen)", "5.88x / 4.62x / 1.69x (small / medium / large)",
         size_cells(exp1, "torch", "linen")],
        ["The gap shrinks with env complexity (small)", "smaller on more complex envs", complexity_trend(exp1, cx)],
        ["NNX vs Linen grows with env complexity (small)", "larger on more complex envs",
         complexity_trend(exp1, cx, "nnx")],
        ["NNX has extra overhead in iterations 1..7 (their mean / 8..end's, small)",
         "NNX yes, growing with model and env; Linen little", overhead_cell(exp1, ("nnx", "nnx_cached", "linen"))],
        ["PyTorch's iteration times are flat from iteration 1 (1..7 / 8..end, small)", "no secondary overhead",
         overhead_cell(exp1, ("torch", "torch_compile", "linen"))],
        ["PyTorch has the smallest first-iteration overhead (iteration 0, small)", "for most envs",
         overhead_cell(exp1, ("torch", "torch_compile", "linen", "nnx"), bucket=0)],
        ["Without jit, Linen and NNX fall behind PyTorch (synced iteration, small)",
         "slower than torch on all but one env",
         "; ".join(f"{v} / torch {cell(exp2, v, 'torch', STEADY, 'small')}" for v in ("linen-nojit", "nnx-nojit"))],
    ]
    out.claim("benchback-rl-reported-linen-several-times-faster", THEIR_TORCH_OVER_LINEN >= 2, ("faster",),
              f"benchback-rl's README: torch / linen {THEIR_TORCH_OVER_LINEN}x, small model, on a GPU (its words)")
    out.table("One row per claim of benchback-rl's README", ["claim", "benchback-rl (GPU)",
                                                             "ours (whole runs, unless the claim names another time)"],
              rows, block="benchback-rl-claims")
