"""Do the variants learn alike? Learning curves, and the final returns tested against Linen's:
per env, Welch's t-test over seeds (which can only fail to detect a difference with few seeds);
per variant, an equivalence test over envs (TOST) with a margin named in standard deviations."""

import math

import numpy as np

from .exp1 import REFERENCE
from .output import color, variant_order
from .stats import ALPHA, EQUIVALENCE_MARGIN, MODELS, tost_p, welch_p


def plot_learning_curves(runs, against: str, out, name: str | None = None, caption: str | None = None,
                         style=lambda variant: "-"):
    """Episodic return against env steps or wall time: mean and min..max over repeats, per env (style: each
    variant's line style, where two variants of one framework share a panel)."""
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
            ax.plot(grid, ys.mean(0), color=color(v), label=f"{v} ({len(curves)})", lw=1.2, ls=style(v))
            ax.fill_between(grid, ys.min(0), ys.max(0), color=color(v), alpha=0.15)
        ax.set(title=env, xlabel="env steps" if against == "steps" else "wall time (s)", ylabel="return")
        ax.legend(fontsize=6, title="variant (runs)", title_fontsize=6)
    for ax in axes.flat[len(envs):]:
        ax.axis("off")
    models = " and ".join(sorted({r.model for r in runs if not r.cleanrl}))  # CleanRL's runs have no size
    fig.suptitle(f"Return against {against}: {models} model, mean and min..max over runs")
    fig.tight_layout()
    name = name or ("learning_curves.png" if against == "steps" else "learning_curves_time.png")
    caption = caption or ("Return against env steps: the curves of one env should lie on top of each other, since "
                          "every variant runs the same algorithm." if against == "steps" else
                          "Return against wall time: the same learning, reached sooner by the faster variants.")
    out.chart(fig, name, caption, dpi=100)


def finals(runs, env, model, variant) -> list[float]:
    return [f for r in runs if (r.env_id, r.model, r.variant) == (env, model, variant)
            if (f := r.summary.get("charts/episodic_return_final")) is not None]


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p = {p:.2g}"


def verdict(p: float, n: int, n_ref: int) -> str:
    if math.isnan(p):
        return "not tested (fewer than 2 runs)" if min(n, n_ref) < 2 else "identical runs"
    seeds = f"{n} vs {n_ref} seeds"
    return f"differs ({p_text(p)}, {seeds})" if p < ALPHA else f"no difference detected (p = {p:.2f}, {seeds})"


def pooled_sd(runs, env, model) -> float:
    """The within-variant standard deviation of the final return on one env, pooled over variants."""
    variances = [np.var(f, ddof=1) for v in {r.variant for r in runs} if len(f := finals(runs, env, model, v)) > 1]
    return float(np.sqrt(np.mean(variances))) if variances else math.nan


def learning_section(small, parity, out):
    plot_learning_curves(small, "steps", out)
    plot_learning_curves(small, "wall time", out)
    out.heading("Learning parity",
                "Per run, the mean return of the episodes that ended in the last 10 iterations. Per env, each "
                f"variant against {REFERENCE} with Welch's t-test over seeds: with few seeds it can only fail to "
                "detect a difference, which is what \"no difference detected\" says. Per variant, an equivalence "
                f"test over envs (TOST, alpha {ALPHA}): the difference from {REFERENCE} on each env in pooled "
                "within-variant standard deviations, shown equivalent when its mean lies within "
                f"±{EQUIVALENCE_MARGIN}.")
    rows, tests, per_variant = [], 0, {}
    for env in sorted({r.env_id for r in parity}):
        for model in MODELS:
            here = {r.variant for r in parity if (r.env_id, r.model) == (env, model)}
            ref = finals(parity, env, model, REFERENCE)
            sd = pooled_sd(parity, env, model)
            for v in variant_order(here):
                f = finals(parity, env, model, v)
                if not f:
                    continue
                p = welch_p(f, ref) if v != REFERENCE and ref else math.nan
                rows.append([env, model, v, len(f), float(np.mean(f)),
                             "" if v == REFERENCE else verdict(p, len(f), len(ref))])
                if v != REFERENCE and ref:
                    summary = per_variant.setdefault((v, model), {"envs": 0, "differs": [], "d": []})
                    summary["envs"] += 1
                    if not math.isnan(p):
                        tests += 1
                        if p < ALPHA:
                            summary["differs"].append(env)
                    if sd > 0:
                        summary["d"].append((np.mean(f) - np.mean(ref)) / sd)
    out.table("Final return, per env", ["env", "model", "variant", "runs", "mean", f"against {REFERENCE}"], rows)
    rows = []
    order = variant_order({v for v, _ in per_variant})
    for (v, model), s in sorted(per_variant.items(), key=lambda kv: (MODELS.index(kv[0][1]), order.index(kv[0][0]))):
        p = tost_p(s["d"]) if len(s["d"]) > 1 else math.nan
        tost = ("not tested (one run per env)" if math.isnan(p) else
                f"{'equivalent' if p < ALPHA else 'not shown equivalent'} (mean {np.mean(s['d']):+.2f} SD over "
                f"{len(s['d'])} envs, {p_text(p)})")
        differs = ", ".join(s["differs"]) or "none"
        rows.append([f"{v} against {REFERENCE}", model, s["envs"], differs, tost])
    out.table("Learning parity, per variant", ["variant", "model", "envs", "envs where Welch's test detects a "
              "difference (p < 0.05)", f"equivalence within ±{EQUIVALENCE_MARGIN} SD (TOST)"], rows,
              block="learning-parity",
              note=(f"{sum(len(s['differs']) for s in per_variant.values())} of {tests} per-env tests detect a "
                    f"difference at p < {ALPHA}; about {ALPHA * tests:.1f} would by chance alone.") if tests else None)
