"""TD3 and SAC (issue 53, docs/offpolicy.md): each script's time per 1,000 env steps against Linen's in its
algorithm, with the replay buffer on the device or on the host and the env in Gymnax or in torch, while it only
fills the buffer, while it trains (an update every env step) and over a whole run; and the same runs' learning
on Pendulum-v1 (bench.sh offpolicy). An iteration is --log-frequency env steps, as DQN's: its steady state,
filling phase and run length are dqn.py's."""

import math

import numpy as np

from .dqn import (FINAL_STEPS, cleanrl_final, counterpart, filling, finals, learning_table, level_with_cleanrl,
                  run_length, steady)
from .learning import plot_learning_curves
from .output import NAMES, fmt, listed, variant_order
from .stats import below, median_range, not_below, pair_ratios, ratio_row, session_of, sessions_note
from .target import target_of, time_to

ALGORITHMS = {"td3": "TD3", "sac": "SAC"}
SOLVED = -200  # Pendulum-v1's return the issue asks of every script
RUN_STEPS = 1_000_000  # CleanRL's runs' length: the whole run the table compares


def algorithm(variant: str) -> str:
    return variant.split("_", 1)[0]


def linen(variant: str) -> str:
    return f"{algorithm(variant)}_linen"


def where(variant: str) -> tuple[str, str]:
    """(the buffer's place, the env's language) of a variant."""
    return "host" if variant.endswith("-host") else "device", "torch" if variant.endswith("-torchenv") else "Gymnax"


def ratios(runs, a: str, value) -> list | None:
    """a's value over its algorithm's Linen's, one per repeat, on Pendulum-v1."""
    return pair_ratios(runs, a, linen(a), value).get(("Pendulum-v1", "small"))


def offpolicy_section(runs, out):
    a = runs[0].info["args"]  # bench.sh gives every run the same settings
    out.heading("TD3 and SAC: time per env step, each buffer, each env",
                f"Every TD3 and SAC script on Pendulum-v1, small networks (CleanRL's 256 and 256 units), CleanRL's "
                f"settings but {a['total_timesteps']:,} env steps of which the first {a['learning_starts']:,} only fill "
                f"the buffer, an update at every env step after (bench.sh offpolicy). Steady: seconds per 1,000 env "
                f"steps over the iterations that train throughout; filling: over those before learning starts; a "
                f"{RUN_STEPS / 1e6:g}M-step run (CleanRL's length): start-up and the measured iterations up to the "
                f"steady state, then the steady rate.", sessions_note(runs))
    whole = lambda r: run_length(r, RUN_STEPS)
    rows = []
    for v in variant_order({r.variant for r in runs}):
        mine = [x for r in runs if r.variant == v and (x := steady(r)) is not None]
        cell = lambda value: "1" if v == linen(v) else median_range(x, ratio=True) if (
            x := ratios(runs, v, value)) is not None else "–"
        rows.append([ALGORITHMS[algorithm(v)], NAMES.get(v, v), *where(v), median_range(mine) if mine else "too short",
                     cell(steady), cell(filling), cell(whole)])
    out.table("TD3 and SAC on Pendulum-v1: seconds per 1,000 env steps while training, and each script's time over "
              "Linen's in its algorithm (time of A / time of B, median (range, n repeats), pairs from one repeat of one "
              "session)", ["algorithm", "script", "buffer", "env", "steady s / 1,000 steps", "over Linen, steady",
                           "over Linen, filling the buffer", f"over Linen, a {RUN_STEPS / 1e6:g}M-step run"],
              rows, block="offpolicy")
    offpolicy_claims(runs, out)
    out.heading("TD3 and SAC learning Pendulum-v1",
                f"The same runs' returns. Final: the mean return of the episodes that ended in the last 10 iterations "
                f"({10 * a['log_frequency']:,} env steps); solved: {SOLVED} or more, the issue's bar.")
    for alg, name in ALGORITHMS.items():
        if not (mine := [r for r in runs if algorithm(r.variant) == alg]):
            continue
        learning_table(out, mine, SOLVED, f"{alg}-learning", f"{name} on Pendulum-v1: ")
        ended = [f for v in {r.variant for r in mine} for f in finals(mine, v)]
        out.claim(f"{alg}-every-run-ends-at-minus-{-SOLVED}", len(ended) == len(mine) and min(ended) >= SOLVED, (),
                  f"{sum(f >= SOLVED for f in ended)} of {len(mine)} runs ended at {SOLVED} or more; the lowest "
                  f"{fmt(min(ended, default=float('nan')), 4)}")
        reached = sum(time_to(r, SOLVED) is not None for r in mine)
        out.claim(f"{alg}-every-run-reached-minus-{-SOLVED}", reached == len(mine), (),
                  f"{reached} of {len(mine)} runs had 1,000 steps whose episodes averaged {SOLVED} or more")


def offpolicy_learning_section(runs, out, cleanrl=()):
    """TD3's and SAC's CPU-env twins on MuJoCo (bench.sh offpolicy-learning): their learning beside CleanRL's own
    scripts at the same settings and seeds, and their time per 1,000 env steps against Linen's."""
    env, a = runs[0].env_id, runs[0].info["args"]  # bench.sh gives every run the same env and length
    theirs = [r for r in cleanrl if r.env_id == env]
    for r in theirs:
        r.summary["charts/episodic_return_final"] = cleanrl_final(r)
    ran = sorted({r.variant.removeprefix("cleanrl_") + ".py" for r in theirs})  # those run so far, seeds in the tables
    cleanrl_note = (f" CleanRL's own {listed(ran)} ran at "
                    "the same settings and seeds; their final return is computed from "
                    "their logged episodes the same way, and each script's finals are set against those of CleanRL's "
                    "script in its framework (SAC's Linen against CleanRL's PyTorch SAC, CleanRL having no JAX one; "
                    "Welch's t-test, two-sided p). CleanRL's scripts are not timed here.")
    out.heading(f"TD3 and SAC learning {env}",
                f"TD3's and SAC's CPU-env twins on {env} at CleanRL's settings for {a['total_timesteps']:,} env steps, "
                f"one env, an update at every env step once learning starts (TD3 at 25,000, SAC at 5,000), one run "
                f"per seed (bench.sh offpolicy-learning). Final: the mean return of the episodes that ended in the "
                f"last {FINAL_STEPS:,} env steps; target: 90% of the way from the runs' first return to the best "
                f"script's median final one, as the PPO targets are set." + (cleanrl_note if theirs else ""),
                sessions_note(runs))
    plot_learning_curves(runs + theirs, "steps", out, name="offpolicy_learning.png",
                         caption=f"Return against env steps on {env}, TD3's and SAC's twins"
                                 + (" and CleanRL's own scripts" if theirs else "") + ": mean and min..max over "
                                 "seeds, SAC's dashed. The scripts of one algorithm run it at the same settings, so "
                                 "their curves should overlap.", style=lambda v: "--" if "sac_" in v else "-")
    for alg, name in ALGORITHMS.items():
        if mine := [r for r in runs if algorithm(r.variant) == alg]:
            with_theirs = mine + [r for r in theirs if r.variant.startswith(f"cleanrl_{alg}")]
            target = target_of(mine) or math.inf  # none: no run ended above where the runs start
            learning_table(out, with_theirs, target, f"{alg}-mujoco-learning", f"{name} on {env}: ")
    if theirs:
        level_with_cleanrl(out, "offpolicy-mujoco-finals-level-with-cleanrl", runs, theirs)
    rows = []
    for v in variant_order({r.variant for r in runs}):
        mine, twin = [x for r in runs if r.variant == v and (x := steady(r)) is not None], v.replace("torch", "linen")
        x = pair_ratios(runs, v, twin, steady).get((env, "small")) if v != twin else None
        rows.append([ALGORITHMS[algorithm(v)], NAMES.get(v, v), median_range(mine) if mine else "too short",
                     "1" if v == twin else median_range(x, ratio=True) if x is not None else "–"])
    out.table(f"TD3 and SAC on {env}: seconds per 1,000 env steps while training, and PyTorch's over Linen's in the "
              f"same algorithm (time of A / time of B, median (range, n repeats), pairs from one repeat of one "
              f"session)",
              ["algorithm", "script", "steady s / 1,000 steps", "over Linen, steady"], rows, block="offpolicy-mujoco")


def steadies(runs, variant: str) -> list:
    """(run, its steady time) for each of the variant's runs long enough to have one."""
    return [(r, x) for r in runs if r.variant == variant and (x := steady(r)) is not None]


def over_cleanrl(mine: list, cleanrl: list) -> np.ndarray | None:
    """A variant's steady time over its CleanRL counterpart's (steadies() of each), one ratio per repeat whose
    session ran both."""
    def by_repeat(timed):
        return {(r.env_id, r.seed, session_of(r)): x for r, x in timed}
    mine, cleanrl = by_repeat(mine), by_repeat(cleanrl)
    found = [x / cleanrl[key] for key, x in sorted(mine.items()) if key in cleanrl and key[2] is not None]
    return np.array(found) if found else None


def offpolicy_cleanrl_section(runs, out, cleanrl):
    """TD3's and SAC's CPU-env twins beside CleanRL's own scripts on MuJoCo, in the same sessions (bench.sh
    offpolicy-cleanrl): each one's time per 1,000 env steps while it trains over its CleanRL counterpart's."""
    env, a = runs[0].env_id, runs[0].info["args"]  # bench.sh gives every run the same env and length
    theirs = [r for r in cleanrl if r.env_id == env]
    out.heading(f"TD3 and SAC beside CleanRL's scripts on {env}",
                f"TD3's and SAC's CPU-env twins and CleanRL's own td3_continuous_action.py, "
                f"td3_continuous_action_jax.py and sac_continuous_action.py on {env} at CleanRL's settings for "
                f"{a['total_timesteps']:,} env steps, all of a repeat in one shuffled order (bench.sh "
                f"offpolicy-cleanrl). Steady: seconds per 1,000 env steps over the iterations that train; CleanRL's "
                f"from the wall times of the charts/SPS events it logs every 100 env steps while it trains. Each "
                f"script against CleanRL's in its framework (SAC's Linen against CleanRL's PyTorch SAC, CleanRL "
                f"having no JAX one).", sessions_note(runs + theirs))
    rows, found = [], {}
    for v in variant_order({r.variant for r in runs}):
        cp = counterpart(v)
        mine, their = steadies(runs, v), steadies(theirs, cp)
        found[v] = over_cleanrl(mine, their)
        rows.append([ALGORITHMS[algorithm(v)], NAMES.get(v, v),
                     median_range([x for _, x in mine]) if mine else "too short",
                     NAMES.get(cp, cp), median_range([x for _, x in their]) if their else "not run",
                     median_range(found[v], ratio=True) if found[v] is not None else "–"])
    out.table(f"TD3 and SAC on {env} beside CleanRL's scripts: seconds per 1,000 env steps while training, and "
              f"each script's over its CleanRL counterpart's (time of A / time of B, median (range, n repeats), pairs "
              f"from one repeat of one session)", ["algorithm", "script", "steady s / 1,000 steps", "CleanRL's script",
                                                   "its steady s / 1,000 steps", "over CleanRL's, steady"],
              rows, block="offpolicy-cleanrl")
    measured = {v: ratio_row([x]) for v, x in found.items() if x is not None}
    out.claim("offpolicy-twins-not-slower-than-cleanrl", bool(found) and len(measured) == len(found) and all(
        not_below(1, row) for row in measured.values()), ("as fast as",),
        "; ".join(f"{v} / {counterpart(v)}: {row['median']:.2f}x ({row['min']:.2f}–{row['max']:.2f})"
                  for v, row in measured.items()) or "no pair ran")


def offpolicy_claims(runs, out):
    """What results.md says of the table, each decided from the ranges over repeats: a claim holds only where
    every pair it names ran and bears it out."""
    def claim(name, pairs, rule, words):
        found = {(a, b): pair_ratios(runs, a, b, steady).get(("Pendulum-v1", "small")) for a, b in pairs}
        rows = {pair: ratio_row([x]) for pair, x in found.items() if x is not None}
        out.claim(name, len(rows) == len(pairs) and all(rule(row) for row in rows.values()), words,
                  "; ".join(f"{a} / {b}: {row['median']:.2f}x ({row['min']:.2f}–{row['max']:.2f})"
                            for (a, b), row in rows.items()) or "not run")

    for alg in ALGORITHMS:
        torch = [f"{alg}_{v}" for v in ("torch", "torch-host", "torch_compile", "torch_compile-host")]
        claim(f"{alg}-linen-faster-than-torch-on-gymnax", [(v, f"{alg}_linen") for v in torch],
              lambda r: below(1, r), ("faster",))
        claim(f"{alg}-linen-faster-than-torch-on-its-own-env",
              [(f"{alg}_{v}-torchenv", f"{alg}_linen") for v in ("torch", "torch_compile")], lambda r: below(1, r),
              ("faster",))
        claim(f"{alg}-nnx-within-20-percent-of-linen", [(f"{alg}_nnx", f"{alg}_linen")], lambda r: r["max"] <= 1.20,
              ("within",))
        claim(f"{alg}-equinox-slower-than-linen", [(f"{alg}_equinox", f"{alg}_linen")], lambda r: below(1, r),
              ("slower",))
        compiled = [(f"{alg}_torch_compile{where}", f"{alg}_torch{where}") for where in ("", "-host", "-torchenv")]
        claim(f"{alg}-compiled-faster-than-eager", compiled, lambda r: below(r, 1), ("faster",))
        claim(f"{alg}-compiled-not-faster-than-eager", compiled, lambda r: not_below(r, 1), ("faster",))
