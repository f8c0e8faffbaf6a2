"""The tuning sweep (issue 54): N configurations of PPO's learning rate, entropy and clipping coefficients,
sampled at random, run as tune.py runs them: one process per trial (a single-agent script), or one process
of N agents (tune.py --population N, an agent script). A sweep is one tune.py call in a folder of bench.sh's,
<experiment>/r<repeat>/n<N>/<env>__<variant>__<model>__s<repeat>__<session>, its trials' runs below it
(trials/<number>/<run>). Compared: the wall time per trial, and the best final return each sweep found,
the one-by-one sweep's by the time the same framework's population had ended."""

from collections import defaultdict
from pathlib import Path

import numpy as np

from .agents import AGENT_NAMES, FAMILIES, num_agents
from .output import NAMES
from .runs import Run
from .stats import median_range, repeat_of, sessions_note

ONE_BY_ONE = ("linen", "nnx", "torch")  # bench.sh's SWEEP_ONE_BY_ONE; the populations are agents' FAMILIES
SAME_WAY = {"torch_agents_compile": "torch"}  # one by one, PyTorch's trials run eager: a compile per trial


def size_of(path: Path) -> int | None:
    """The sweep's size, from bench.sh's n<N> folder."""
    return next((int(p[1:]) for p in reversed(path.parts) if p[:1] == "n" and p[1:].isdigit()), None)


def sweeps(runs) -> tuple[list[Run], list[Path]]:
    """One Run per complete sweep (its variant bench.sh's: linen, linen_agents, ...), whose time/total is the
    sweep's wall time, from its first process's start to its last one's end, and whose summary's "trials" are
    (seconds from the sweep's start to the trial's end, its final return) in trial order; a one-by-one sweep
    of M trials also stands for each smaller size its first trials (random search, the sampler seeded by the
    repeat, asks the same configurations in the same order whatever the size). And the incomplete sweeps'
    folders (cut off, a trial that failed)."""
    groups = defaultdict(list)
    for r in runs:
        if r.path.parts[-3] == "trials":  # <sweep>/trials/<number>/<run>
            groups[r.path.parents[2]].append(r)
    sizes = sorted({n for folder in groups if (n := size_of(folder))})
    units, incomplete = [], []
    for folder, trial_runs in sorted(groups.items()):
        first = min(trial_runs, key=lambda r: r.info["start_time"])
        n, variant, start = size_of(folder), first.variant, first.info["start_time"]
        end = lambda r: r.info["start_time"] + r.summary["time/total"] - start
        if variant in FAMILIES:  # one process, its agents the trials
            if len(trial_runs) != 1 or num_agents(first) != n:
                incomplete.append(folder)
                continue
            wall = end(first)
            units.append(unit(first, folder, variant, n, [(wall, f) for f in
                                                          first.summary["charts/episodic_return_final_per_agent"]]))
            continue
        numbered = sorted(trial_runs, key=lambda r: int(r.path.parent.name))
        if [int(r.path.parent.name) for r in numbered] != list(range(n or 0)):
            incomplete.append(folder)
            continue
        trials = [(end(r), r.summary["charts/episodic_return_final"]) for r in numbered]
        units += [unit(first, folder, variant, m, trials[:m]) for m in sizes if m <= n]
    return units, incomplete


def unit(run: Run, folder: Path, variant: str, size: int, trials: list) -> Run:
    return Run(path=folder, variant=variant, env_id=run.env_id, model=run.model, seed=run.seed, synced=False,
               summary={"time/total": max(t for t, _ in trials), "trials": trials},
               info={**run.info, "sweep_size": size}, experiment="tunesweep")


def per_trial(sweep: Run) -> float:
    return sweep.summary["time/total"] / sweep.info["sweep_size"]


def best_by(sweep: Run, seconds: float = np.inf) -> tuple[float | None, int]:
    """The best final return among the trials that had ended by then, and how many had."""
    done = [f for t, f in sweep.summary["trials"] if t <= seconds]
    found = [f for f in done if f is not None]
    return (max(found) if found else None), len(done)


def largest(units) -> list[Run]:
    """The sweeps of the largest size every way ran at (the decision table's row)."""
    ways = {u.variant for u in units}
    common = [n for n in sorted({u.info["sweep_size"] for u in units}, reverse=True)
              if all(any(u.variant == v and u.info["sweep_size"] == n for u in units) for v in ways)]
    return [u for u in units if common and u.info["sweep_size"] == common[0]]


def label(variant: str) -> str:
    return f"{AGENT_NAMES[variant]}, a population" if variant in FAMILIES else f"{NAMES[variant]}, one by one"


def tunesweep_section(runs, out):
    units, incomplete = sweeps(runs)
    out.heading("A tuning sweep: a population in one process against trials one by one",
                "tune.py's random search over PPO's learning rate, entropy and clipping coefficients (the sampler "
                "seeded by the repeat, so every way runs the same configurations), each trial the small model for "
                f"{'/'.join(map(str, sorted({r.num_iterations for r in runs})))} iterations of the scripts' batch: "
                "one process per trial "
                "(the single-agent scripts; a smaller sweep is the largest one's first trials), or N trials as "
                "the agents of one process (tune.py --population N; agent i seeded seed + i, the one-by-one "
                "trials all the repeat's seed). No pruning (a population's agents run to the end together). Each "
                "repeat's sweeps in a shuffled order. A sweep's wall time runs from its first process's start to "
                "its last one's end.", sessions_note(runs),
                *([f"Sweeps left out, incomplete (cut off, or a trial failed): {len(incomplete)}."] * bool(incomplete)))
    ways = [v for v in (*ONE_BY_ONE, *FAMILIES) if any(u.variant == v for u in units)]
    cells = defaultdict(lambda: defaultdict(list))  # (env, N) -> way -> [a value per repeat]
    for u in units:
        cells[(u.env_id, u.info["sweep_size"])][u.variant].append(per_trial(u))
    out.table("Wall time per trial (seconds): median over repeats (range, n repeats)",
              ["env", "configurations N", *map(label, ways)],
              [[env, n, *(median_range(cells[(env, n)][v]) if cells[(env, n)][v] else "not run" for v in ways)]
               for env, n in sorted(cells)], block="tunesweep-times")
    pairs = paired(units)
    rows = []
    for (env, n, v), repeats in sorted(pairs.items()):
        alone = [per_trial(a) / per_trial(p) for a, p in repeats]
        found = [best_by(a, p.summary["time/total"]) for a, p in repeats]
        mine = [best_by(p)[0] for _, p in repeats]
        by_then = [f for f, _ in found if f is not None]
        unfound = f"; none done in {len(found) - len(by_then)}" if len(by_then) < len(found) else ""
        rows.append([env, n, AGENT_NAMES[v], median_range(alone, ratio=True),
                     median_range(mine) if None not in mine else "–",
                     f"{np.median([k for _, k in found]):g} of {n}",
                     median_range(by_then) + unfound if by_then else "none done",
                     median_range(best) if None not in (best := [best_by(a)[0] for a, _ in repeats]) else "–"])
    out.table("The population against the same framework's trials one by one, per repeat: wall time per trial one "
              "by one over the population's (above 1: the population is cheaper per trial); the best final return "
              "each found: the population's, and the one-by-one sweep's by the time the population had ended "
              "(the trials done by then, median) and after all N",
              ["env", "configurations N", "population", "per trial: one by one / population", "population: best",
               "one by one: trials done in the population's time", "one by one: best by then",
               "one by one: best after all N"], rows, block="tunesweep-found")
    tunesweep_claims(units, pairs, sorted(cells), out)


JAX_POPULATIONS, TORCH_POPULATIONS = ("linen_agents", "nnx_agents"), ("torch_agents", "torch_agents_compile")


def tunesweep_claims(units, pairs, cells, out):
    """What the docs say of the sweep, decided in every cell (env, N) run and every repeat: whether a framework's
    population costs less per trial than its trials one by one, whether it has found a better return by the time
    it ends than its trials one by one have by then, and whether every JAX population costs less per trial than
    every PyTorch one within each repeat (one session's sweeps, those holding both)."""
    for v in FAMILIES:
        mine = [pairs.get((env, n, v), []) for env, n in cells]
        out.claim(f"tunesweep-{v}-cheaper-per-trial-than-one-by-one",
                  cells and all(ps and min(per_trial(a) / per_trial(p) for a, p in ps) > 1 for ps in mine),
                  ("cheaper",), "; ".join(f"{env} N={n}: one by one / population per trial "
                                          f"{median_range([per_trial(a) / per_trial(p) for a, p in ps], ratio=True)}"
                                          for (env, n), ps in zip(cells, mine) if ps))
        ahead = [[(best_by(p)[0], best_by(a, p.summary["time/total"])[0]) for a, p in ps] for ps in mine]
        out.claim(f"tunesweep-{v}-finds-better-by-its-end", cells and all(
                  found and all(b is not None and (o is None or b > o) for b, o in found) for found in ahead),
                  ("better",), "; ".join(f"{env} N={n}: population's best against one by one's by then, per repeat: "
                                         + ", ".join(f"{b:.4g} / {'none done' if o is None else f'{o:.4g}'}"
                                                     for b, o in found if b is not None)
                                         for (env, n), found in zip(cells, ahead) if found))
    repeats = defaultdict(list)  # (env, N) -> [{variant: s per trial}, one per repeat holding JAX's and PyTorch's]
    for (env, n, *_), found in sorted(by_repeat(units).items()):
        if {*JAX_POPULATIONS} & found.keys() and {*TORCH_POPULATIONS} & found.keys():
            repeats[(env, n)].append({v: per_trial(u) for v, u in found.items()})
    slowest_jax = lambda t: max(t[v] for v in JAX_POPULATIONS if v in t)
    fastest_torch = lambda t: min(t[v] for v in TORCH_POPULATIONS if v in t)
    out.claim("tunesweep-jax-populations-cheaper-than-torchs", cells and all(
              repeats[cell] and all(slowest_jax(t) < fastest_torch(t) for t in repeats[cell]) for cell in cells),
              ("cheaper",), "; ".join(f"{env} N={n}, the slowest JAX population's s per trial against the fastest "
                                      "PyTorch one's, per repeat: " + ", ".join(
                                          f"{slowest_jax(t):.3g} / {fastest_torch(t):.3g}" for t in repeats[(env, n)])
                                      for env, n in cells))


def paired(units) -> dict[tuple, list[tuple[Run, Run]]]:
    """{(env, N, population variant): [(the one-by-one sweep, the population), one per repeat]}: a repeat's
    sweeps (same seed, session and device), never across them."""
    out = defaultdict(list)
    for (env, n, *_), found in sorted(by_repeat(units).items()):
        for v in FAMILIES:
            if v in found and (alone := found.get(SAME_WAY.get(v, FAMILIES[v]))):
                out[(env, n, v)].append((alone, found[v]))
    return out


def by_repeat(units) -> dict[tuple, dict[str, Run]]:
    """{(env, N, *the repeat): {variant: its sweep}}: the sweeps of one repeat (same seed, session and device)."""
    by = defaultdict(dict)
    for u in units:
        by[(u.env_id, u.info["sweep_size"], *map(str, repeat_of(u)))][u.variant] = u
    return by
