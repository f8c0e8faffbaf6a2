"""Expensive environments (bench.sh expensive): the two Craftax envs and, in the same shuffled
session, three cheap envs as the yardstick; and longer runs on Craftax that show the scripts
learn it (folder craftax-learning). Does the framework gap survive an env whose own step
dominates? The x axis is each env's own step time (envtime: 32 envs, random actions), the y axis
an iteration of each framework over Linen's (one ratio per repeat of one env and size), and the
rollout's share of an iteration says why."""

import numpy as np

from .output import color
from .stats import below, first_iteration, median_of, median_range, not_below, pair_ratios, ratio_row, sessions_note, steady

REFERENCE = "linen"
OTHERS = ("nnx", "nnx_cached", "equinox", "torch", "torch_compile")
ITERATION, ROLLOUT, UPDATE = (steady(tag) for tag in ("time/iteration", "time/rollout", "time/update"))


def rollout_share(run) -> float | None:
    rollout, update = ROLLOUT(run), UPDATE(run)
    return None if rollout is None or update is None else rollout / (rollout + update)


def plot_expensive(runs, times, out):
    import matplotlib.pyplot as plt
    from matplotlib.ticker import ScalarFormatter

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    small = [r for r in runs if r.model == "small"]
    for v in OTHERS:
        ratios = {env: x for (env, _), x in pair_ratios(small, v, REFERENCE, ITERATION).items()}
        envs = sorted(ratios, key=times.get)
        if envs:
            x = [times[e] * 1e6 for e in envs]
            mid = [np.median(ratios[e]) for e in envs]
            spread = [[m - ratios[e].min() for e, m in zip(envs, mid)], [ratios[e].max() - m for e, m in zip(envs, mid)]]
            left.errorbar(x, mid, yerr=spread, marker="o", ls="", capsize=2, color=color(v), label=f"{v} / {REFERENCE}")
    left.axhline(1, color="grey", lw=0.8)
    left.set(xscale="log", yscale="log", xlabel="env's own step time, 32 envs (µs)",
             ylabel=f"iteration time / {REFERENCE}'s", title="framework ratio (median, range over repeats)")
    left.yaxis.set_major_formatter(ScalarFormatter())  # the ratios span less than a decade: 2 and 3, not 2x10^0
    left.yaxis.set_minor_formatter(ScalarFormatter())
    for v in (REFERENCE, "torch", "torch_compile"):
        by_env = {e: median_of([r for r in small if r.variant == v and r.env_id == e], rollout_share)
                  for e in sorted({r.env_id for r in small}, key=times.get)}
        pts = [(times[e] * 1e6, s) for e, s in by_env.items() if s is not None]
        if pts:
            right.plot(*zip(*pts), marker="o", color=color(v), label=v)
    right.set(xscale="log", ylim=(0, 1), xlabel="env's own step time, 32 envs (µs)",
              ylabel="rollout / (rollout + update)", title="the rollout's share of an iteration")
    craftax = [e for e in times if e.startswith("Craftax") and any(r.env_id == e for r in small)]
    for ax in (left, right):
        for e in craftax:
            ax.axvline(times[e] * 1e6, color="grey", ls=":", lw=0.8)
            ax.annotate(e.removesuffix("-Symbolic-v1"), (times[e] * 1e6, 0.02), xycoords=("data", "axes fraction"),
                        rotation=90, fontsize=7, ha="right", va="bottom")
    left.legend(fontsize=8)
    right.legend(fontsize=8)
    fig.suptitle("Expensive environments: the framework gap against the env's own cost (small model, synced)")
    fig.tight_layout()
    out.chart(fig, "expensive.png", "Left: each framework's iteration time over Linen's, one point per env, "
              "cheapest env left, the two Craftax envs marked; right: how much of an iteration the rollout "
              "takes (were the env's step all of the rollout and the rollout all of the iteration, every ratio "
              "would be 1).")


def expensive_section(runs, times, out):
    out.heading("Expensive environments (Craftax)",
                "Craftax-Classic-Symbolic-v1 and Craftax-Symbolic-v1 beside cheap envs as a yardstick, in one session "
                "(bench.sh expensive: the scripts' batch of 32 envs x 256 steps, synced, each repeat's runs in a "
                "shuffled order). Steady state: iterations 8..end.", sessions_note(runs))
    plot_expensive(runs, times, out)
    timed = [r for r in runs if ITERATION(r) is not None] or runs  # an env run only too short for a steady state: no row
    keys = sorted({(r.env_id, r.model) for r in timed}, key=lambda k: (times[k[0]], k[1] != "small"))
    ratios = {v: pair_ratios(runs, v, REFERENCE, ITERATION) for v in OTHERS}
    rows = []
    for env, model in keys:
        linen = [r for r in runs if r.env_id == env and r.model == model and r.variant == REFERENCE]
        rows.append([env, model, times[env] * 1e6, median_of(linen, ITERATION), median_of(linen, rollout_share),
                     *(median_range(ratios[v][(env, model)], ratio=True) if (env, model) in ratios[v] else "not run"
                       for v in OTHERS)])
    out.table(f"The framework gap against the env's own cost: each variant's steady iteration over {REFERENCE}'s, "
              "median (range, n repeats); the env's step time (32 envs, random actions), Linen's steady "
              "seconds per iteration and the rollout's share of it",
              ["env", "model", "env step (µs)", "Linen s/iter", "Linen rollout share",
               *(f"{v} / {REFERENCE}" for v in OTHERS)], rows, block="expensive-ratios")
    rows = []
    for env, model in keys:
        if not env.startswith("Craftax"):
            continue
        for v in (REFERENCE, *OTHERS):
            sel = [r for r in runs if r.env_id == env and r.model == model and r.variant == v]
            if sel:
                rows.append([env, model, v, len(sel), median_of(sel, first_iteration), median_of(sel, ITERATION),
                             median_of(sel, ROLLOUT), median_of(sel, UPDATE), median_of(sel, rollout_share)])
    out.table("Craftax: the first iteration (it compiles the env with the rest), then the steady iteration, "
              "rollout and update (seconds) and the rollout's share; medians over repeats",
              ["env", "model", "variant", "runs", "iteration 0", "iteration", "rollout", "update", "rollout share"],
              rows, block="expensive-costs")
    expensive_claims(ratios, out)


def expensive_claims(ratios, out):
    """What results.md says of these tables, decided from the same ratios: each one's range over
    repeats on each Craftax env against its range on each cheap env with a steady state, and against 1."""
    for v in OTHERS:
        found = {env: x for (env, model), x in ratios[v].items() if model == "small"}
        if not found:
            continue
        rows = {env: ratio_row([x]) for env, x in found.items()}
        craftax = [env for env in rows if env.startswith("Craftax")]
        cheap = [env for env in rows if env not in craftax]
        evidence = f"{v} / {REFERENCE}, small: " + ", ".join(f"{env} {median_range(x, ratio=True)}" for env, x in found.items())
        if v.startswith("torch"):
            out.claim(f"{v}-gap-smaller-on-craftax", craftax and cheap and all(
                below(rows[c], rows[e]) for c in craftax for e in cheap), ("smaller",), evidence)
            out.claim(f"{v}-still-slower-on-craftax", craftax and all(below(1, rows[c]) for c in craftax),
                      ("slower",), evidence)
            out.claim(f"{v}-gap-not-smaller-on-craftax", craftax and cheap and all(
                not_below(rows[c], rows[e]) for c in craftax for e in cheap), ("smaller",), evidence)
        else:
            out.claim(f"{v}-level-with-linen-on-craftax", craftax and all(
                not_below(rows[c], 1) and not_below(1, rows[c]) for c in craftax), ("level",), evidence)


def headline_rows(runs) -> list[list[str]]:
    """README's expensive-env lines: PyTorch against Linen on each Craftax env, small model, from
    at least three repeats."""
    rows = []
    for v, what in (("torch", "PyTorch, eager"), ("torch_compile", "PyTorch, torch.compile")):
        for (env, model), ratios in sorted(pair_ratios(runs, v, REFERENCE, ITERATION).items()):
            if env.startswith("Craftax") and model == "small" and len(ratios) >= 3:
                rows.append([f"expensive env, {env}: {what} / Linen (steady iteration)",
                             median_range(ratios, ratio=True)])
    return rows


def craftax_learning_section(runs, out):
    """Longer runs on Craftax: does the return rise? First and last tenth of each run."""
    import matplotlib.pyplot as plt

    out.heading("Learning Craftax", "One longer run per framework family on Craftax (small model, the scripts' "
                "defaults otherwise); the return is Craftax's reward, one point per achievement unlocked.")
    fig, ax = plt.subplots(figsize=(7, 4.2))
    rows = []
    for r in sorted(runs, key=lambda r: (r.env_id, r.variant)):
        steps, returns, _ = r.series("charts/episodic_return")
        if not len(steps):
            continue
        tenth = max(1, len(returns) // 10)
        rows.append([r.env_id, r.variant, r.model, r.num_iterations, int(steps[-1]),
                     float(np.mean(returns[:tenth])), float(np.mean(returns[-tenth:])), r.summary.get("time/total")])
        ax.plot(steps, returns, color=color(r.variant), label=f"{r.variant}, {r.env_id}", lw=1)
    ax.set(xlabel="env steps", ylabel="episodic return", title="Learning Craftax (one run each)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.chart(fig, "craftax_learning.png", "Episodic return against env steps on Craftax, one run per variant.")
    out.table("Learning Craftax: the mean episodic return over the first and the last tenth of the logged "
              "iterations, and the run's wall time (seconds)",
              ["env", "variant", "model", "iterations", "env steps", "return, first tenth", "return, last tenth",
               "wall time"], rows, block="craftax-learning")
