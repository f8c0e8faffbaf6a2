"""Time to a target return (issue 33): what a reader waits for is a good policy, not an iteration. From each
run's learning curve, the wall-clock time from the process's start (imports, compilation and all) to the
first iteration whose mean episodic return reaches the env's target: SHARE of the way from where the runs
start to the best variant's final return there (the best of the variants' medians over their runs, so that
one lucky seed does not set it). Runs that never reach it are counted as such."""

import json

import numpy as np

from .exp1 import REFERENCE
from .output import NAMES, color, fmt, variant_order

SHARE = 0.9  # of the way from the start to the best final return: 90%
# the experiments whose runs learn for a whole run of the scripts' length, every variant as long: the newer first
LEARNING = ("headline", "exp1", "continuous-learning", "pixels-learning")
OFFPOLICY_LEARNING = {"dqn": ("dqn-learning",), "td3": ("offpolicy-learning", "offpolicy"),
                      "sac": ("offpolicy-learning", "offpolicy")}  # the other algorithms' learning runs


def algorithm_of(run) -> str:
    """ppo, dqn, td3 or sac: an off-policy variant's name starts with its algorithm (dqn_linen, sac_torch-host)."""
    prefix = run.variant.split("_")[0]
    return prefix if prefix in OFFPOLICY_LEARNING else "ppo"


def env_steps(run) -> int | None:
    """The env steps a run took (each agent's), as the scripts count them (their harness's total_steps); None
    where run.json does not say."""
    args = run.info["args"]
    if "total_timesteps" in args:
        return args["total_timesteps"]
    return args["num_iterations"] * args["num_envs"] * args["num_steps"] if "num_envs" in args else None


def first_return(run) -> float | None:
    returns = run.series("charts/episodic_return")[1]
    return float(returns[0]) if len(returns) else None


def target_of(runs) -> float | None:
    """One env's target, or None where no run ended above where the runs start (nothing learned)."""
    starts = [x for r in runs if (x := first_return(r)) is not None]
    finals = [np.median(xs) for v in {r.variant for r in runs}
              if (xs := [x for r in runs if r.variant == v and (x := r.summary.get("charts/episodic_return_final")) is not None])]
    if not starts or not finals or max(finals) <= np.median(starts):
        return None
    return float(np.median(starts) + SHARE * (max(finals) - np.median(starts)))


def pair_targets(runs) -> dict:
    """Each (env, model)'s target from these runs, with the runs it came from; a pair with none left out."""
    found = {}
    for env, model in sorted({(r.env_id, r.model) for r in runs}):
        sel = [r for r in runs if (r.env_id, r.model) == (env, model)]
        if (target := target_of(sel)) is not None:
            found[env, model] = target, sel
    return found


def study_targets(by_experiment: dict, algorithm: str = "ppo") -> dict:
    """Each (env, model)'s target for the algorithm from the first of its learning experiments that ran it, with
    what it came from: what a run's end line compares its return with (results/targets.json) and, PPO's, the
    decision table times."""
    targets = {}
    for experiment in OFFPOLICY_LEARNING.get(algorithm, LEARNING):
        runs = [r for r in by_experiment.get(experiment, []) if algorithm_of(r) == algorithm]
        for pair, (target, sel) in pair_targets(runs).items():
            if pair not in targets:
                targets[pair] = {"target": round(target, 2), "share": SHARE, "experiment": experiment, "runs": len(sel),
                                 "iterations": max(r.num_iterations for r in sel),
                                 "steps": max((n for r in sel if (n := env_steps(r))), default=None)}
    return targets


def write_targets(by_experiment: dict, folder) -> None:
    """results/targets.json: {algorithm: {env: {model: target}}}, which a run's end line reads where it sits
    beside the script."""
    nested = {}
    for algorithm in ("ppo", *OFFPOLICY_LEARNING):
        for (env, model), target in study_targets(by_experiment, algorithm).items():
            nested.setdefault(algorithm, {}).setdefault(env, {})[model] = target
    (folder / "targets.json").write_text(json.dumps(nested, indent=1, sort_keys=True) + "\n")


def time_to(run, target: float) -> float | None:
    """Seconds from the process's start to the end of the first iteration at or above the target."""
    _, returns, walls = run.series("charts/episodic_return")
    reached = np.flatnonzero(returns >= target)
    return float(walls[reached[0]] - run.info["start_time"]) if len(reached) and "start_time" in run.info else None


def target_rows(runs) -> tuple[list[str], list[list]]:
    """Per env: the target, then per variant the median seconds over the runs that reached it and how
    many of its runs did; and the median over envs of each variant's median over Linen's, with the envs
    where no run of the variant reached the target counted (they have no time to take a median of)."""
    variants = variant_order({r.variant for r in runs})
    rows, over, never = [], {v: [] for v in variants}, {v: 0 for v in variants}
    for env in sorted({r.env_id for r in runs}):
        sel = [r for r in runs if r.env_id == env]
        target = target_of(sel)
        if target is None:
            rows.append([env, "nothing learned", *("–" for _ in variants)])
            continue
        cells, medians = [], {}
        for v in variants:
            mine = [r for r in sel if r.variant == v]
            times = [t for r in mine if (t := time_to(r, target)) is not None]
            if times:
                medians[v] = float(np.median(times))
            cells.append(f"{fmt(medians[v])} s ({len(times)} of {len(mine)})" if times else f"never (0 of {len(mine)})")
            never[v] += bool(mine) and not times
        for v in variants:
            if v in medians and REFERENCE in medians:
                over[v].append(medians[v] / medians[REFERENCE])
        rows.append([env, fmt(target), *cells])
    rows.append(["median over envs, / Linen's", "", *(
        (f"{np.median(over[v]):.2f}x ({len(over[v])} envs)" if over[v] else "–") + (f"; never in {never[v]}" if never[v] else "")
        for v in variants)])
    return variants, rows


def plot_target(runs, out):
    import matplotlib.pyplot as plt

    variants = variant_order({r.variant for r in runs})
    envs = [e for e in sorted({r.env_id for r in runs}) if target_of([r for r in runs if r.env_id == e]) is not None]
    fig, ax = plt.subplots(figsize=(max(7, 1.1 * len(envs)), 4.4))
    width = 0.8 / len(variants)
    for i, env in enumerate(envs):
        sel = [r for r in runs if r.env_id == env]
        target = target_of(sel)
        for j, v in enumerate(variants):
            times = [t for r in sel if r.variant == v and (t := time_to(r, target)) is not None]
            if times:
                ax.bar(i + (j - (len(variants) - 1) / 2) * width, np.median(times), width, color=color(v),
                       label=NAMES.get(v, v) if i == 0 else None)
    ax.set_xticks(range(len(envs)), envs, rotation=30, ha="right", fontsize=8)
    ax.set(yscale="log", ylabel="seconds from start to the target (median)",
           title=f"Time to {SHARE:.0%} of the best variant's final return, start-up and compilation included")
    ax.legend(fontsize=7, ncols=3)
    fig.tight_layout()
    out.chart(fig, "time_to_target.png", f"Each variant's median wall-clock time, from its process's start, to the "
              f"first iteration whose return reached {SHARE:.0%} of the way from the start to the best variant's median "
              f"final return on that env; a missing bar: no run of that variant reached it.")


def target_section(runs, out):
    out.heading("Time to a target return", "What a reader waits for: a good policy. Experiment 1's small-model runs "
                "(their scripts' default length), from each process's start.")
    variants, rows = target_rows(runs)
    out.table(f"Seconds to reach {SHARE:.0%} of the way from the start to the best variant's median final return "
              "(median over the runs that reached it; how many did)", ["env", "target", *(NAMES.get(v, v)
                                                                                       for v in variants)],
              rows, block="time-to-target")
    plot_target(runs, out)
