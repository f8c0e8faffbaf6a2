"""What a default run of each script takes (issue 88): `python SCRIPT` with no argument (and `--model M`),
modelled from the study's runs of that script at its default settings on its default env: the run's start-up
and the iterations that compile as measured, then its filling and steady rates for the rest of the default
length. The defaults are written here once; tests/test_defaults.py holds them equal to each script's Args."""

import math

import numpy as np

from . import dqn
from .decision import host_type
from .stats import MIN_STEADY, STEADY_FROM, startup

# algorithm: the default env, the whole run (PPO: iterations of 32 envs x 256 steps; off-policy: env steps), and
# the off-policy scripts' --learning-starts (env steps that only fill the buffer) and --log-frequency
DEFAULTS = {"ppo": dict(env_id="CartPole-v1", num_iterations=100, num_envs=32, num_steps=256),
            "dqn": dict(env_id="CartPole-v1", total_timesteps=500_000, learning_starts=10_000, log_frequency=1_000,
                        train_frequency=10, num_envs=1),
            "td3": dict(env_id="Pendulum-v1", total_timesteps=1_000_000, learning_starts=25_000, log_frequency=1_000,
                        num_envs=1),
            "sac": dict(env_id="Pendulum-v1", total_timesteps=1_000_000, learning_starts=5_000, log_frequency=1_000,
                        num_envs=1)}
# each script with runs at its defaults in the study, by the variant name its default run takes
SCRIPTS = {"ppo": ("linen", "nnx", "nnx_cached", "equinox", "torch", "torch_compile"),
           "dqn": ("dqn_linen", "dqn_nnx", "dqn_equinox", "dqn_torch", "dqn_torch_compile", "dqn_linen_gymnasium",
                   "dqn_torch_gymnasium"),
           "td3": ("td3_linen", "td3_nnx", "td3_equinox", "td3_torch", "td3_torch_compile"),
           "sac": ("sac_linen", "sac_nnx", "sac_equinox", "sac_torch", "sac_torch_compile")}
MODELS = ("small", "medium", "large")
# where the runs come from: each the study's shuffled, repeated experiment at the algorithm's default env
EXPERIMENT = {"ppo": "headline", "dqn": "dqn-learning", "td3": "offpolicy", "sac": "offpolicy"}


def script_of(variant: str) -> str:
    return ("" if variant.startswith(("dqn_", "td3_", "sac_")) else "ppo_") + variant + ".py"


def at_defaults(run, algorithm: str) -> bool:
    """Whether a run ran its script's default env and settings (any length, any seed)."""
    a, d = run.info["args"], DEFAULTS[algorithm]
    same = [k for k in d if k not in ("num_iterations", "total_timesteps", "learning_starts")]
    return all(a.get(k, d[k]) == d[k] for k in same)


def ppo_default_run(run) -> float | None:
    """Seconds of a default PPO run: start-up and the iterations as measured, the steady iteration for those the
    run did not reach."""
    _, t, _ = run.series("time/iteration")
    start, n = startup(run), DEFAULTS["ppo"]["num_iterations"]
    if start is None or len(t) < min(n, STEADY_FROM + MIN_STEADY):
        return None
    steady = float(np.mean(t[STEADY_FROM:])) if len(t) < n else 0.0
    return start + float(t[:n].sum()) + steady * max(0, n - len(t))


def offpolicy_default_run(run, algorithm: str) -> float | None:
    """Seconds of a default DQN, TD3 or SAC run: start-up, iteration 0 (compilation) and the iteration of the first
    update (where torch.compile compiles the update) as measured, the filling rate for the other iterations before
    the default --learning-starts, the training rate after it."""
    steps, t, _ = run.series("time/iteration")
    d, a = DEFAULTS[algorithm], run.info["args"]
    start, filling, training = startup(run), dqn.filling(run), dqn.steady(run)
    first = steps - a["log_frequency"]  # the global step each iteration starts at
    compiling = t[(first <= a["learning_starts"]) & (steps > a["learning_starts"])]  # the first update's iteration
    if None in (start, filling, training) or not len(t) or len(compiling) != 1:
        return None
    iterations, filled = d["total_timesteps"] // d["log_frequency"], math.ceil(d["learning_starts"] / d["log_frequency"])
    per = d["log_frequency"] / dqn.PER
    return (start + float(t[0]) + filling * per * (filled - 1) + float(compiling[0])
            + training * per * (iterations - filled - 1))


def default_run(run, algorithm: str) -> float | None:
    return ppo_default_run(run) if algorithm == "ppo" else offpolicy_default_run(run, algorithm)


def duration(seconds: float, like: float | None = None) -> str:
    """'40 s', '2.5 min', '1.4 h': in the unit that suits seconds (or like, where given)."""
    x = seconds if like is None else like
    if x < 90:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.2g} min" if x < 90 * 60 else f"{seconds / 3600:.2g} h"


def durations(seconds) -> str:
    """'2.5 min (2.4–2.8, 10 runs)': the median and the range over the runs, in the median's unit."""
    x = np.asarray(seconds, float)
    if len(x) == 1:
        return f"{duration(x[0])} (1 run)"
    median = float(np.median(x))
    number = lambda v: duration(v, like=median).split()[0]
    return f"{duration(median)} ({number(x.min())}–{number(x.max())}, {len(x)} runs)"


def length_words(algorithm: str) -> str:
    d = DEFAULTS[algorithm]
    if algorithm == "ppo":
        return f"{d['num_iterations']} iterations of {d['num_envs']} envs x {d['num_steps']} steps"
    return f"{d['total_timesteps']:,} env steps, the first {d['learning_starts']:,} filling the buffer"


def defaults_section(by_experiment: dict, out):
    """README's table: per script and model, a default run's time on the study's 2-core hosts."""
    rows = []
    for algorithm, variants in SCRIPTS.items():
        d = DEFAULTS[algorithm]
        runs = [r for r in by_experiment.get(EXPERIMENT[algorithm], []) if r.variant in variants
                and r.env_id == d["env_id"] and at_defaults(r, algorithm)]
        for variant in variants:
            cells, hosts = [], set()
            for model in MODELS:
                seconds = [(x, r) for r in runs if r.variant == variant and r.model == model
                           and (x := default_run(r, algorithm)) is not None]
                cells.append(durations([x for x, _ in seconds]) if seconds else "–")
                hosts |= {host_type(r) for _, r in seconds}
            if hosts:
                rows.append([f"`python {script_of(variant)}`", f"{d['env_id']}, {length_words(algorithm)}", *cells,
                             "; ".join(sorted(hosts))])
    shown = [i for i, _ in enumerate(MODELS) if any(row[2 + i] != "–" for row in rows)]
    rows = [[*row[:2], *(row[2 + i] for i in shown), row[-1]] for row in rows]
    missing = [m for i, m in enumerate(MODELS) if i not in shown]
    out.table("What a default run of each script takes: `python SCRIPT` (and `--model M`) on a 2-core CPU, "
              "modelled from the study's runs at the script's defaults",
              ["command", "a default run", *(f"`--model {MODELS[i]}`" for i in shown), "host"], rows,
              block="default-runs",
              note="Modelled: start-up and the compiling iterations as measured, then the run's steady rates (off-"
                   "policy: filling, then training); from " + ", ".join(sorted(set(EXPERIMENT.values()))) + "; –: no "
                   "run long enough" + "".join(f"; no `--model {m}` run" for m in missing) + ".")
    return rows
