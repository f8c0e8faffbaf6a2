"""DQN (issue 52, docs/offpolicy.md): each DQN script's time per 1,000 env steps against Linen's, with its
replay buffer on the device or on the host, at each update-to-data ratio (bench.sh dqn); and learning at
CleanRL's defaults on CartPole-v1 and from Breakout-MinAtar's images (bench.sh dqn-learning). An iteration is --log-frequency env steps: the
steady state is the iterations that train throughout (every step past --learning-starts), "filling" the ones
before, that only act and store."""

import math

import numpy as np

from .output import NAMES, fmt, listed, variant_order
from .stats import ALPHA, MIN_STEADY, below, median_range, not_below, pair_ratios, ratio_row, sessions_note, startup, welch_p
from .target import first_return, target_of, time_to

PER = 1_000  # env steps: the unit a time is given in
FINAL_STEPS = 10_000  # env steps: a run's final return is the episodes that ended in its last 10 iterations
SOLVED = 475  # CartPole-v1's return the issue asks of every script (CleanRL reports about 488 at 500k steps)
LINEN = "dqn_linen"
ON_GYMNAX = ("dqn_torch", "dqn_torch-host", "dqn_torch_compile", "dqn_torch_compile-host")  # PyTorch through DLPack
RATIOS = (1, 4, 10)  # bench.sh dqn's train frequencies
MANY = 10  # bench.sh dqn's envs10: 10 envs, an update every 10 env steps (one per vector step)
LEARNED = 5  # Breakout-MinAtar: a run learned if it ended at this many times its first return (at least 1)


def train_frequency(run) -> int:
    return run.info["args"]["train_frequency"]


def num_envs(run) -> int:
    return run.info["args"].get("num_envs", 1)


def at(run, k: int, envs: int = 1) -> bool:
    """Whether a run updated every k env steps (counted over all envs) with this many envs."""
    return train_frequency(run) == k and num_envs(run) == envs


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
    for n, k in sorted({(num_envs(r), train_frequency(r)) for r in runs}):
        sel = [r for r in runs if at(r, k, n)]
        whole = lambda r: run_length(r, 500_000)
        over = {part: {v: pair_ratios(sel, v, LINEN, value).get(("CartPole-v1", "small")) for v in
                       {r.variant for r in sel}} for part, value in (("steady", steady), ("filling", filling),
                                                                     ("whole", whole))}
        for v in variant_order({r.variant for r in sel}):
            mine = [x for r in sel if r.variant == v and (x := steady(r)) is not None]
            cell = lambda ratios: "1" if v == LINEN else median_range(ratios, ratio=True) if ratios is not None else "–"
            rows.append([n, k, NAMES.get(v, v), "host" if v.endswith("-host") else "device",
                         median_range(mine) if mine else "too short", cell(over["steady"][v]),
                         cell(over["filling"][v]), cell(over["whole"][v])])
    out.table("DQN on CartPole-v1: seconds per 1,000 env steps while training, and each script's time over Linen's "
              "(time of A / time of B, median (range, n repeats), pairs from one repeat of one session)",
              ["envs", "update every k env steps", "script", "buffer", "steady s / 1,000 steps", "over Linen, steady",
               "over Linen, filling the buffer", "over Linen, a 500k-step run"], rows, block="dqn")
    dqn_claims(runs, out)
    return rows


def ratio_rows(runs, a: str, b: str, ks, envs: int = 1) -> dict:
    """{k: the steady ratio row of a over b at train frequency k with this many envs}, over the repeats that
    ran both."""
    found = {k: pair_ratios([r for r in runs if at(r, k, envs)], a, b, steady).get(("CartPole-v1", "small"))
             for k in ks}
    return {k: ratio_row([x]) for k, x in found.items() if x is not None}


def dqn_claims(runs, out):
    """What results.md says of the DQN table, each decided from the ranges over repeats, at every train
    frequency it names: a claim holds only where every pair it names ran there and bears it out."""
    def claim(name, pairs, ks, rule, words, envs=1):
        found = {(a, b): ratio_rows(runs, a, b, ks, envs) for a, b in pairs}
        said = "; ".join(f"{a} / {b}: " + ", ".join(f"{envs} envs, every {k}: {row['median']:.2f}x ({row['min']:.2f}–{row['max']:.2f})"
                                                   for k, row in sorted(rows.items())) for (a, b), rows in found.items())
        holds = all(len(rows) == len(ks) and all(rule(row) for row in rows.values()) for rows in found.values())
        out.claim(name, holds, words, said or "not run")

    over = lambda variants, b: [(a, b) for a in variants]
    claim("dqn-linen-faster-than-torch-on-gymnax", over(ON_GYMNAX, LINEN), RATIOS, lambda r: below(1, r), ("faster",))
    claim("dqn-linen-faster-than-torch-with-many-envs", over(ON_GYMNAX, LINEN), (MANY,), lambda r: below(1, r),
          ("faster",), envs=MANY)
    compiled = ("dqn_torch_compile", "dqn_torch_compile-host")
    one, many = ({a: ratio_rows(runs, a, LINEN, (MANY,), envs).get(MANY) for a in compiled} for envs in (1, MANY))
    out.claim("dqn-many-envs-narrow-the-compiled-gap", all(below(many[a], one[a]) for a in compiled), ("narrow",),
              "; ".join(f"{a} / {LINEN}, every {MANY}: 1 env {one[a]['median']:.2f}x, {MANY} envs {many[a]['median']:.2f}x"
                        for a in compiled if one[a] and many[a]) or "not run")
    claim("dqn-nnx-equinox-within-20-percent-of-linen", over(("dqn_nnx", "dqn_equinox"), LINEN), RATIOS,
          lambda r: r["max"] <= 1.20, ("within",))
    claim("dqn-linen-faster-than-torch-on-its-own-env", over(("dqn_torch-torchenv", "dqn_torch_compile-torchenv"), LINEN),
          RATIOS, lambda r: below(1, r), ("faster",))
    claim("dqn-compiled-torch-env-faster-than-gymnax-every-4-and-10", [("dqn_torch_compile-torchenv", "dqn_torch_compile")],
          (4, 10), lambda r: below(r, 1), ("faster",))
    claim("dqn-eager-torch-env-not-faster-than-gymnax", [("dqn_torch-torchenv", "dqn_torch")], RATIOS,
          lambda r: not_below(r, 1), ("faster",))
    claim("dqn-compiled-faster-than-eager-every-step", [("dqn_torch_compile", "dqn_torch"),
          ("dqn_torch_compile-host", "dqn_torch-host")], (1,), lambda r: below(r, 1), ("faster",))
    claim("dqn-compiled-not-faster-than-eager-every-10", [("dqn_torch_compile", "dqn_torch"),
          ("dqn_torch_compile-host", "dqn_torch-host")], (10,), lambda r: not_below(r, 1), ("faster",))
    twins = [("dqn_torch_gymnasium", "dqn_linen_gymnasium"), ("dqn_torch_gymnasium-host", "dqn_linen_gymnasium-host")]
    claim("dqn-cpu-env-torch-faster-than-linen-every-10", twins, (10,), lambda r: below(r, 1), ("faster",))
    claim("dqn-cpu-env-linen-faster-than-torch-every-step", twins, (1,), lambda r: below(1, r), ("faster",))
    claim("dqn-cpu-env-torch-host-buffer-faster", [("dqn_torch_gymnasium-host", "dqn_torch_gymnasium")], RATIOS,
          lambda r: below(r, 1), ("faster",))


def cleanrl_final(run) -> float | None:
    """What our scripts' summary gives, for a run of CleanRL's: the mean return of the episodes that ended in the
    last FINAL_STEPS env steps (CleanRL logs each episode at the global step it ended on, from 0)."""
    steps, returns, _ = run.series("charts/episodic_return")
    last = returns[steps >= run.info["args"]["total_timesteps"] - FINAL_STEPS]
    return float(last.mean()) if len(last) else None


COUNTERPARTS = {"dqn": ("cleanrl_dqn", "cleanrl_dqn_jax"),  # CleanRL's scripts: PyTorch's, then Flax Linen's
                "td3": ("cleanrl_td3_continuous_action", "cleanrl_td3_continuous_action_jax"),
                "sac": ("cleanrl_sac_continuous_action",) * 2}  # CleanRL has no JAX SAC: its PyTorch one for both


def counterpart(variant: str) -> str:
    """CleanRL's script of the algorithm in the same framework (SAC's: its PyTorch one)."""
    torch, jax = COUNTERPARTS[variant.split("_", 1)[0]]
    return torch if "torch" in variant else jax


def dqn_learning_section(runs, out, cleanrl=()):
    cartpole = [r for r in runs if r.env_id == "CartPole-v1"]
    if cartpole:
        theirs = [r for r in cleanrl if r.env_id == "CartPole-v1"]
        for r in theirs:
            r.summary["charts/episodic_return_final"] = cleanrl_final(r)
        out.heading("DQN learning at CleanRL's defaults",
                    f"CartPole-v1, CleanRL's dqn.py settings (500,000 env steps, an update every 10), one run per seed "
                    f"(bench.sh dqn-learning). Final: the mean return of the episodes that ended in the last "
                    f"{FINAL_STEPS:,} env steps (exploring at epsilon 0.05, as CleanRL's logged returns); solved: "
                    f"{SOLVED} or more." + (" CleanRL's own dqn.py and dqn_jax.py ran at the same settings and seeds; "
                    "their final return is computed from their logged episodes the same way, and each script's finals "
                    "are set against those of CleanRL's script in its framework (Welch's t-test, two-sided p). "
                    "CleanRL's scripts are not timed here: they keep their own clock." if theirs else ""),
                    sessions_note(cartpole))
        learning_table(out, cartpole + theirs, SOLVED, "dqn-learning", "DQN on CartPole-v1 at CleanRL's defaults: ")
        reached = sum(time_to(r, SOLVED) is not None for r in cartpole)
        out.claim(f"dqn-every-run-reached-{SOLVED}", reached == len(cartpole), (),
                  f"{reached} of {len(cartpole)} runs had 1,000 steps whose episodes averaged {SOLVED} or more")
        if theirs:
            level_with_cleanrl(out, "dqn-finals-level-with-cleanrl", cartpole, theirs)
            below = lambda v: sum(f < SOLVED for f in finals(theirs, v))
            out.claim(f"dqn-cleanrl-jax-ends-below-{SOLVED}-too", below("cleanrl_dqn_jax") > 0, (),
                      ", ".join(f"{v}: {below(v)} of {sum(r.variant == v for r in theirs)} ended below {SOLVED}"
                                for v in sorted({r.variant for r in theirs})))
    if pixels := [r for r in runs if r.env_id == "Breakout-MinAtar"]:
        target = target_of(pixels) or math.inf  # none: no run ended above where the runs start
        a = pixels[0].info["args"]  # bench.sh gives every run of the folder the same settings
        out.heading("DQN learning from images",
                    f"Breakout-MinAtar with the CNN at CleanRL's Atari-DQN settings (learning rate {a['learning_rate']:g}, "
                    f"batch {a['batch_size']}, an update every {a['train_frequency']} env steps, a target copy every "
                    f"{a['target_network_frequency']:,}, epsilon to {a['end_e']:g} over the first "
                    f"{a['exploration_fraction']:.0%}) for {a['total_timesteps']:,} env steps, a replay buffer of "
                    f"{a['buffer_size']:,} and learning from step {a['learning_starts']:,}, one run per seed "
                    f"(bench.sh dqn-learning, folder breakout). First: the mean return of the first 1,000 steps' "
                    f"episodes (epsilon near 1); target: {fmt(target, 4)}, 90% of the way from the runs' first "
                    f"return to the best script's median final one, as the PPO targets are set. No times: the session "
                    f"shared its machine with other work, which its returns do not depend on.", sessions_note(pixels))
        learning_table(out, pixels, target, "dqn-learning-pixels", "DQN on Breakout-MinAtar with the CNN: ", timed=False)
        learned = [r for r in pixels if (f := r.summary.get("charts/episodic_return_final")) is not None
                   and (s := first_return(r)) is not None and f >= LEARNED * max(s, 1)]
        out.claim("dqn-cnn-learns-breakout", len(learned) == len(pixels), (),
                  f"{len(learned)} of {len(pixels)} runs ended at {LEARNED} times their first return or more")


def finals(runs, variant: str) -> list[float]:
    return [f for r in sorted(runs, key=lambda r: r.seed) if r.variant == variant
            and (f := r.summary.get("charts/episodic_return_final")) is not None]


def finals_p(runs, variant: str) -> float:
    """Welch's two-sided p that the variant's final returns and its CleanRL counterpart's have one mean."""
    return welch_p(finals(runs, variant), finals(runs, counterpart(variant)))


def level_with_cleanrl(out, name, mine, theirs):
    """The claim that no script's finals differ from its CleanRL counterpart's (every Welch p at least ALPHA): it
    holds only once every script's counterpart has run two seeds or more."""
    scripts = {r.variant for r in mine}
    p = {v: x for v in scripts if not math.isnan(x := finals_p(mine + theirs, v))}
    smallest, waiting = min(p, key=p.get, default=None), sorted(scripts - set(p))
    said = [f"the smallest p: {fmt(p[smallest], 2)} ({smallest})"] if p else []
    said += [f"no p yet for {listed(waiting)} (each one's CleanRL counterpart has fewer than two seeds)"] if waiting else []
    out.claim(name, bool(p) and not waiting and p[smallest] >= ALPHA, (), "; ".join(said))


def seeds_of(runs) -> str:
    seeds = sorted({r.seed for r in runs})
    if len(seeds) > 3 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"seeds {seeds[0]} to {seeds[-1]}"
    return "seeds " + listed(seeds)


def learning_table(out, runs, target, block, title, timed=True):
    """One row per script: its seeds' final returns and how many ended at the target; with CleanRL's runs among
    them, each script's p against its CleanRL counterpart; timed, the whole run's seconds and the seconds to the
    target (CleanRL's rows untimed); untimed (a session that shared its machine: its returns hold, its times do
    not), the seeds' first returns and how many reached the target on the way instead."""
    t, seeds, cleanrl = fmt(target, 4), seeds_of(runs), any(r.cleanrl for r in runs)
    columns = [("script", lambda v, mine: NAMES.get(v, v))]
    if not timed:
        columns.append((f"first return, {seeds}", lambda v, mine: ", ".join(fmt(first_return(r), 3) for r in mine)))
    columns += [(f"final return, {seeds}", lambda v, mine: ", ".join(fmt(f, 4) for f in finals(mine, v))),
                (f"final >= {t}", lambda v, mine: f"{sum(f >= target for f in finals(mine, v))} of {len(mine)}")]
    if cleanrl:
        columns.append(("p, against CleanRL's", lambda v, mine: "–" if mine[0].cleanrl else fmt(finals_p(runs, v), 2)))
    reached = lambda mine: [secs for r in mine if (secs := time_to(r, target)) is not None]
    if timed:
        columns += [("whole run (s)", lambda v, mine: "–" if mine[0].cleanrl else
                     median_range([r.summary["time/total"] for r in mine])),
                    (f"seconds to {t}", lambda v, mine: "–" if mine[0].cleanrl else
                     f"{median_range(reached(mine))} ({len(reached(mine))} of {len(mine)} reached it)"
                     if reached(mine) else f"none of {len(mine)}")]
    else:
        columns.append((f"reached {t}", lambda v, mine: f"{len(reached(mine))} of {len(mine)}"))
    rows = [[cell(v, mine) for _, cell in columns] for v in variant_order({r.variant for r in runs})
            if (mine := sorted((r for r in runs if r.variant == v), key=lambda r: r.seed))]
    out.table(title + f"each seed's final return and how many ended at {t} or more" + (
        ", each script's p against CleanRL's in its framework" if cleanrl else "") + (
        f", the whole run's seconds and the seconds from the start to the first 1,000 steps whose episodes averaged "
        f"{t}" if timed else f", with the first returns, and how many had 1,000 steps whose episodes averaged {t} on "
        f"the way"), [h for h, _ in columns], rows, block=block)
