"""DQN (issue 52, docs/offpolicy.md): each DQN script's time per 1,000 env steps against Linen's, with its
replay buffer on the device or on the host, at each update-to-data ratio (bench.sh dqn); and learning at
CleanRL's defaults on CartPole-v1 (bench.sh dqn-learning). An iteration is --log-frequency env steps: the
steady state is the iterations that train throughout (every step past --learning-starts), "filling" the ones
before, that only act and store."""

import numpy as np

from .output import NAMES, fmt, variant_order
from .stats import MIN_STEADY, median_range, pair_ratios, sessions_note, startup
from .target import time_to

PER = 1_000  # env steps: the unit a time is given in
SOLVED = 475  # CartPole-v1's return the issue asks of every script (CleanRL reports about 488 at 500k steps)
LINEN = "dqn_linen"


def train_frequency(run) -> int:
    return run.info["args"]["train_frequency"]


def phases(run):
    """(filling, training): each iteration's seconds before and after --learning-starts. Iteration 0 (the
    compilation) is neither, nor is the iteration the first update falls in (torch.compile compiles there)."""
    steps, t, _ = run.series("time/iteration")
    a = run.info["args"]
    first = steps - a["log_frequency"]  # the global step each iteration starts at
    return t[(first > 0) & (steps <= a["learning_starts"])], t[first > a["learning_starts"]]


def per_thousand(run, seconds) -> float:
    return float(np.mean(seconds)) * PER / run.info["args"]["log_frequency"]


def steady(run) -> float | None:
    """Seconds per 1,000 env steps while it trains, from at least MIN_STEADY iterations."""
    training = phases(run)[1]
    return per_thousand(run, training) if len(training) >= MIN_STEADY else None


def filling(run) -> float | None:
    """Seconds per 1,000 env steps before learning starts: acting and storing only."""
    before = phases(run)[0]
    return per_thousand(run, before) if len(before) else None


def run_length(run, env_steps: int) -> float | None:
    """The seconds a run of env_steps takes at this run's settings: its start-up and every iteration as
    measured up to its steady state, then its steady iteration for the rest."""
    steps, t, _ = run.series("time/iteration")
    rate, start, a = steady(run), startup(run), run.info["args"]
    if rate is None or start is None:
        return None
    measured = steps - a["log_frequency"] <= a["learning_starts"]
    rest = max(0, env_steps - int(steps[measured].max(initial=0)))
    return start + float(t[measured].sum()) + rate * rest / PER


def dqn_section(runs, out):
    out.heading("DQN: time per env step, each buffer, each update-to-data ratio",
                "Every DQN script on CartPole-v1 (Gymnax; the torch scripts step it through DLPack), small network "
                "(CleanRL's 120 and 84 units), CleanRL's dqn.py settings but --train-frequency, 25,000 env steps of "
                "which the first 10,000 only fill the buffer (bench.sh dqn). Steady: seconds per 1,000 env steps over "
                "the iterations that train throughout; filling: over those before learning starts; a 500k-step run "
                "(CleanRL's CartPole length): start-up and the measured iterations up to the steady state, then the "
                "steady rate.", sessions_note(runs))
    rows = []
    for k in sorted({train_frequency(r) for r in runs}):
        sel = [r for r in runs if train_frequency(r) == k]
        whole = lambda r: run_length(r, 500_000)
        over = {part: {v: pair_ratios(sel, v, LINEN, value).get(("CartPole-v1", "small")) for v in
                       {r.variant for r in sel}} for part, value in (("steady", steady), ("filling", filling),
                                                                     ("whole", whole))}
        for v in variant_order({r.variant for r in sel}):
            mine = [x for r in sel if r.variant == v and (x := steady(r)) is not None]
            cell = lambda ratios: "1" if v == LINEN else median_range(ratios, ratio=True) if ratios is not None else "–"
            rows.append([k, NAMES.get(v, v), "host" if v.endswith("-host") else "device",
                         median_range(mine) if mine else "too short", cell(over["steady"][v]),
                         cell(over["filling"][v]), cell(over["whole"][v])])
    out.table("DQN on CartPole-v1: seconds per 1,000 env steps while training, and each script's time over Linen's "
              "(time of A / time of B, median (range, n repeats), pairs from one repeat of one session)",
              ["update every k env steps", "script", "buffer", "steady s / 1,000 steps", "over Linen, steady",
               "over Linen, filling the buffer", "over Linen, a 500k-step run"], rows, block="dqn")
    return rows


def dqn_learning_section(runs, out):
    out.heading("DQN learning at CleanRL's defaults",
                f"CartPole-v1, CleanRL's dqn.py settings (500,000 env steps, an update every 10), one run per seed "
                f"(bench.sh dqn-learning). Final: the mean return of the episodes that ended in the last 10,000 env "
                f"steps (exploring at epsilon 0.05, as CleanRL's logged returns); solved: {SOLVED} or more.",
                sessions_note(runs))
    rows = []
    for v in variant_order({r.variant for r in runs}):
        mine = sorted((r for r in runs if r.variant == v), key=lambda r: r.seed)
        finals = [r.summary.get("charts/episodic_return_final") for r in mine]
        reached = [t for r in mine if (t := time_to(r, SOLVED)) is not None]
        rows.append([NAMES.get(v, v), ", ".join(fmt(x, 4) for x in finals), f"{sum(x is not None and x >= SOLVED for x in finals)} of {len(mine)}",
                     median_range([r.summary["time/total"] for r in mine]),
                     f"{median_range(reached)} ({len(reached)} of {len(mine)} reached it)" if reached else f"none of {len(mine)}"])
    out.table(f"DQN on CartPole-v1 at CleanRL's defaults: the final return of each seed, how many reached {SOLVED}, "
              f"the whole run's seconds, and the seconds from the start to the first 1,000 steps whose episodes "
              f"averaged {SOLVED}", ["script", "final return, seeds 1, 2, 3", f"final >= {SOLVED}", "whole run (s)",
                                     f"seconds to {SOLVED}"], rows, block="dqn-learning")
    return rows
