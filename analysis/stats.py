"""Statistics, one convention everywhere:
- a ratio is "time of A / time of B" (above 1: A takes longer), for each pair of runs that differ
  only in the variant and ran in the same repeat (seed) of the same session on the same device:
  one ratio per repeat, never every run against every other; summarized by the geometric mean;
- the steady state is the mean over iterations 8..end, and only from at least 10 of them;
- an interval only from at least MIN_FOR_INTERVAL independent units (environments): a 95%
  bootstrap interval of the geometric mean resampling them; from fewer, "k envs, range";
  from one run each, "1 run each";
- learning parity as tests, not as overlapping intervals: Welch's t-test per env ("no
  difference detected with n seeds") and an equivalence test (TOST) with a named margin."""

import math
from collections import defaultdict

import numpy as np

MIN_FOR_INTERVAL = 5  # below this many units, a bootstrap interval says more than the data
STEADY_FROM, MIN_STEADY = 8, 10  # the steady state: iterations 8..end, at least 10 of them
MIN_REPEATS = 3  # a regime is decided, and a GPU claim made, only from at least this many repeats (seeds)
TOO_SHORT = "too short"  # a cell whose runs ran but have no steady state
TOO_SHORT_NOTE = f'"{TOO_SHORT}": runs of fewer than {STEADY_FROM + MIN_STEADY} iterations, with no steady state.'
MODELS = ("small", "medium", "large")
EQUIVALENCE_MARGIN = 0.5  # in pooled within-variant standard deviations of the final return
ALPHA = 0.05


# ---- what one run measured
def iteration_buckets(run) -> tuple[float, float, float]:
    """Mean iteration time in benchback-rl's buckets: 0, 1..7, 8..end."""
    t = run.series("time/iteration")[1]
    mean = lambda x: float(np.mean(x)) if len(x) else math.nan
    return float(t[0]), mean(t[1:STEADY_FROM]), mean(t[STEADY_FROM:]) if len(t) >= STEADY_FROM + MIN_STEADY else math.nan


def bucket_means(runs, variant: str, model: str) -> tuple[float, float, float] | None:
    """The buckets' means over a variant's runs of one model size."""
    buckets = [iteration_buckets(r) for r in runs if r.variant == variant and r.model == model]
    return tuple(float(np.nanmean(col)) for col in zip(*buckets)) if buckets else None


def steady(tag: str):
    """The mean of a per-iteration time over iterations 8..end, from the event file; None from a
    run with fewer than MIN_STEADY of them (two iterations are no steady state)."""
    def value(run):
        t = run.series(tag)[1]
        return float(np.mean(t[STEADY_FROM:])) if len(t) >= STEADY_FROM + MIN_STEADY else None
    return value


def total_time(run):
    return run.summary.get("time/total")


def first_iteration(run) -> float | None:
    """Iteration 0: compilation, and the first rollout and update."""
    t = run.series("time/iteration")[1]
    return float(t[0]) if len(t) else None


def startup(run) -> float | None:
    """Process start to the first iteration (imports, set-up): iteration 0's event, written as it
    ended, less its duration, less the start time in run.json."""
    _, t, walls = run.series("time/iteration")
    return float(walls[0] - t[0] - run.info["start_time"]) if len(t) and "start_time" in run.info else None


def peak_rss(run) -> float | None:
    """The process's peak resident memory (MB), as its last iteration logged it."""
    rss = run.series("memory/peak_rss_mb")[1]
    return float(rss[-1]) if len(rss) else None


def session_of(run) -> str | None:
    """The bench.sh session (one sitting on one machine) a run ran in; None before sessions were recorded."""
    return run.info.get("session")


def sessions_note(runs) -> str:
    """What a table's runs are made of, session-wise: said under every table that pairs runs."""
    recorded = sorted({s for r in runs if (s := session_of(r))})
    unrecorded = sum(session_of(r) is None for r in runs)
    parts = []
    if recorded:
        parts.append(f"{len(recorded)} session{'s' * (len(recorded) > 1)} ({', '.join(recorded)})"
                     + ("; ratios pair runs of one session only" if len(recorded) > 1 else ""))
    if unrecorded:
        parts.append(f"{unrecorded} run{'s' * (unrecorded > 1)} from before sessions were recorded, whose "
                     "pairs (one repeat each) may span sittings and machines")
    return "Sessions: " + "; ".join(parts) + "." if parts else ""


def median_of(runs, *values) -> float | None:
    """The median over runs of the sum of these per-run values (runs lacking one are left out)."""
    sums = [sum(v) for r in runs if None not in (v := [value(r) for value in values])]
    return float(np.median(sums)) if sums else None


def models_in(runs) -> list[str]:
    """The model sizes these runs have, smallest first."""
    return [m for m in MODELS if any(r.model == m for r in runs)]


def median_range(values, ratio=False) -> str:
    """The median and the range over the repeats behind it: '0.108 (0.0951–0.118, 5 repeats)' for
    seconds, '1.23x (1.10–1.40, 5 repeats)' for a ratio."""
    values = np.asarray(values, float)
    show = (lambda x: f"{x:.2f}") if ratio else (lambda x: f"{x:.3g}")
    unit = "x" if ratio else ""
    if len(values) == 1:
        return f"{show(values[0])}{unit} (1 repeat)"
    return f"{show(np.median(values))}{unit} ({show(values.min())}–{show(values.max())}, {len(values)} repeats)"


# ---- ratios between variants
def geomean(x) -> float:
    return float(np.exp(np.mean(np.log(x))))


def repeat_of(run) -> tuple:
    """What two runs share to be paired: the repeat (bench.sh's repeat r runs seed r), the session
    and the device (a GPU's run against a CPU's, or Monday's machine against Tuesday's, measures both)."""
    return run.seed, session_of(run), run.info.get("device")


def pair_ratios(runs, a: str, b: str, value) -> dict[tuple[str, str], np.ndarray]:
    """{(env, model): value(run of a) / value(run of b), one ratio per repeat}."""
    by = defaultdict(dict)
    for r in runs:
        v = value(r)
        if v is not None and v > 0:
            by[(r.env_id, r.model, *map(str, repeat_of(r)))][r.variant] = v
    out = defaultdict(list)
    for (env, model, *_), values in sorted(by.items()):
        if a in values and b in values:
            out[(env, model)].append(values[a] / values[b])
    return {key: np.array(ratios) for key, ratios in out.items()}


def bootstrap_geomean_ci(ratios_by_env: list[np.ndarray], n: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% interval of the geometric mean, resampling environments (the main source of spread);
    NaN from fewer than MIN_FOR_INTERVAL environments."""
    if len(ratios_by_env) < MIN_FOR_INTERVAL:
        return (math.nan, math.nan)
    rng = np.random.default_rng(seed)
    logs = [np.log(r) for r in ratios_by_env]
    means = []
    for _ in range(n):
        pick = rng.integers(0, len(logs), len(logs))
        means.append(np.mean(np.concatenate([logs[i] for i in pick])))
    return float(np.exp(np.percentile(means, 2.5))), float(np.exp(np.percentile(means, 97.5)))


def ratio_row(per_env: list[np.ndarray]) -> dict:
    """Geometric mean, median, interval (or range) of one pair's ratios, grouped by env."""
    flat = np.concatenate(per_env)
    low, high = bootstrap_geomean_ci(per_env)
    env_means = [geomean(r) for r in per_env]
    return {"geomean": geomean(flat), "median": float(np.median(flat)), "ci_low": low, "ci_high": high,
            "min": min(env_means) if len(per_env) > 1 else float(flat.min()),
            "max": max(env_means) if len(per_env) > 1 else float(flat.max()),
            "envs": len(per_env), "ratios": len(flat)}


def speedup_table(runs, value, pairs, models=MODELS) -> list[dict]:
    """Per pair and model size: the ratio row over every env that ran both variants."""
    rows = []
    for a, b in pairs:
        ratios = pair_ratios(runs, a, b, value)
        for model in models:
            per_env = [r for (env, m), r in sorted(ratios.items()) if m == model]
            if per_env:
                rows.append({"pair": f"{a} / {b}", "model": model, **ratio_row(per_env)})
    return rows


def spread(row: dict) -> str:
    """The interval where there are enough envs, else what there is, said plainly."""
    if row["envs"] >= MIN_FOR_INTERVAL:
        return f"[{row['ci_low']:.2f}, {row['ci_high']:.2f}]"
    if row["envs"] > 1:
        return f"{row['envs']} envs, range {row['min']:.2f}–{row['max']:.2f}"
    if row["ratios"] > 1:
        return f"1 env, {row['ratios']} repeats, range {row['min']:.2f}–{row['max']:.2f}"
    return "1 run each"


def ratio_cell(row: dict | None) -> str:
    """'2.78x [2.71, 2.86]', '3.0x (2 envs, range 2.9–3.1)', '1.99x (1 run each)' or 'not run'."""
    if row is None:
        return "not run"
    s = spread(row)
    return f"{row['geomean']:.2f}x " + (s if s.startswith("[") else f"({s})")


def bounds(row: dict) -> tuple[float, float]:
    """Where a ratio row can be said to lie: its interval from 5 envs on, else its range."""
    return (row["ci_low"], row["ci_high"]) if row["envs"] >= MIN_FOR_INTERVAL else (row["min"], row["max"])


def below(a, b) -> bool:
    """a is below b beyond their intervals or ranges; either a ratio row or a number such as 1.
    A row that is None (not run) is below nothing."""
    if a is None or b is None:
        return False
    return (bounds(a)[1] if isinstance(a, dict) else a) < (bounds(b)[0] if isinstance(b, dict) else b)


def not_below(a, b) -> bool:
    """Both measured, and a not below b beyond their intervals or ranges."""
    return a is not None and b is not None and not below(a, b)


def includes_one(row: dict) -> str:
    if row["envs"] < MIN_FOR_INTERVAL:
        return "too few envs for an interval"
    return "its interval includes 1" if row["ci_low"] <= 1 <= row["ci_high"] else "its interval excludes 1"


def one_ratio(runs, a: str, b: str, value, model: str, envs=None) -> dict | None:
    """The ratio row of one pair at one model size (on the given envs only), or None."""
    rows = speedup_table([r for r in runs if envs is None or r.env_id in envs], value, [(a, b)], (model,))
    return rows[0] if rows else None


# ---- learning parity
def welch_p(a, b) -> float:
    """Two-sided p of Welch's t-test (NaN when it cannot be computed: fewer than 2 runs, no spread)."""
    from scipy import stats

    if len(a) < 2 or len(b) < 2 or (np.var(a) == 0 and np.var(b) == 0):
        return math.nan
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def tost_p(differences, margin: float = EQUIVALENCE_MARGIN) -> float:
    """Two one-sided t-tests that the mean of the differences lies inside (-margin, margin): the
    larger of the two p values; below ALPHA, equivalence is shown at that margin."""
    from scipy import stats

    d = np.asarray(differences, float)
    if len(d) < 2:
        return math.nan
    se = d.std(ddof=1) / math.sqrt(len(d))
    if se == 0:
        return 0.0 if abs(d.mean()) < margin else 1.0
    df = len(d) - 1
    p_lower = 1 - stats.t.cdf((d.mean() + margin) / se, df)  # H0: mean <= -margin
    p_upper = stats.t.cdf((d.mean() - margin) / se, df)  # H0: mean >= margin
    return float(max(p_lower, p_upper))


def missing(runs, variants, model: str) -> str:
    """Why a cell is empty: every variant in it ran but too short for a steady state, or one did not run."""
    ran = {r.variant for r in runs if r.model == model}
    return TOO_SHORT if set(variants) <= ran else "not run"
