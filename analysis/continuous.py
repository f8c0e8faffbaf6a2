"""Continuous actions (issue 31). Timing (folder continuous, bench.sh's preset of that name): each
framework's iteration against Linen's on the Gymnax envs, the CPU-env scripts' against
linen_gymnasium's (sync) on Pendulum-v1 and MuJoCo's HalfCheetah-v5, the rollout's share, and each
env stepped alone, MJX (MuJoCo in JAX) beside the C engine. Learning (folder continuous-learning):
each variant's runs against the bar a continuous PPO is expected to pass there."""

import numpy as np

from .cpuenv import rollout_throughput
from .expensive import ITERATION, rollout_share
from .learning import plot_learning_curves
from .output import color, variant_order
from .stats import MODELS, median_of, median_range, pair_ratios, sessions_note

GROUPS = {  # the yardstick of each group of variants, and the others, as bench.sh continuous runs them
    "linen": ("nnx", "nnx_cached", "equinox", "torch", "torch_compile"),  # the env in JAX (Gymnax)
    "linen_gymnasium": ("linen_gymnasium-async", "linen_gymnasium-envpool",  # the env on the CPU
                        "torch_gymnasium", "torch_gymnasium-async", "torch_gymnasium-envpool"),
}
BACKENDS = ("env-gymnax", "env-sync", "env-async", "env-envpool", "env-mjx")  # env_alone.py, each env alone
C_ENGINE = "env-sync"  # Gymnasium's sync loop: MuJoCo's C engine, what MJX is set against

BARS = {"Pendulum-v1": -300.0, "HalfCheetah-v5": 1000.0}  # the final return every seed must reach


def learning_rows(runs, bars=BARS) -> list[list]:
    """Per env and variant: the seeds, the mean return of the first 10 logged iterations (near random), their
    final returns (mean of the last 10 iterations' episodes),
    the bar, how many seeds reached it, and a run's env steps (its time is the continuous timing study's)."""
    rows = []
    for env in sorted({r.env_id for r in runs}):
        for v in variant_order({r.variant for r in runs if r.env_id == env}):
            mine = [r for r in runs if (r.env_id, r.variant) == (env, v)]
            finals = [r.summary.get("charts/episodic_return_final") for r in mine]
            finals = [f for f in finals if f is not None]
            if not finals:
                continue
            bar = bars.get(env)
            reached = "–" if bar is None else f"{sum(f >= bar for f in finals)} of {len(finals)}"
            steps = max(int(r.series("time/iteration")[0][-1]) for r in mine)
            first = [float(np.mean(r.series("charts/episodic_return")[1][:10])) for r in mine]
            rows.append([env, v, len(finals), float(np.mean(first)), float(np.mean(finals)),
                         f"{min(finals):.1f} .. {max(finals):.1f}",
                         "–" if bar is None else bar, reached, steps])
    return rows


def continuous_learning_section(runs, out):
    out.heading("Learning continuous control",
                "Every Gymnax script on Pendulum-v1 and both CPU-env scripts on MuJoCo's HalfCheetah-v5, small "
                "model, the continuous defaults (CleanRL's continuous script's learning rate, minibatches and "
                "entropy bonus; observation and reward normalization on), one run per seed "
                "(`bash bench.sh continuous-learning --repeats 3`).")
    plot_learning_curves(runs, "steps", out, name="continuous_learning.png",
                         caption="Return against env steps on the continuous envs: mean and min..max over seeds. "
                                 "Every variant runs the same algorithm, so the curves of one env should overlap.")
    out.table("Continuous control: the final return (the mean over the episodes of the last 10 iterations) of each "
              "seed, against the bar each must reach",
              ["env", "variant", "seeds", "return, first 10 iterations", "final return, mean", "min .. max", "bar",
               "seeds at the bar", "env steps"],
              learning_rows(runs), block="continuous-learning")


def ratio_rows(runs, reference: str, others) -> list[list]:
    """Per env and model: the reference's steady seconds per iteration and rollout share, then each
    other variant's iteration over the reference's (one ratio per repeat)."""
    ratios = {v: pair_ratios(runs, v, reference, ITERATION) for v in others}
    rows = []
    for env, model in sorted({(r.env_id, r.model) for r in runs if r.variant == reference}):
        ref = [r for r in runs if (r.env_id, r.model, r.variant) == (env, model, reference)]
        rows.append([env, model, median_of(ref, ITERATION), median_of(ref, rollout_share),
                     *(median_range(ratios[v][(env, model)], ratio=True) if (env, model) in ratios[v] else "not run"
                       for v in others)])
    return rows


def share_rows(runs, groups=GROUPS) -> list[list]:
    """Per env and model: each variant's rollout share (median over repeats), all variants in one row."""
    variants = [v for group in groups.items() for v in (group[0], *group[1])]
    rows = []
    for env, model in sorted({(r.env_id, r.model) for r in runs if r.variant in variants}):
        sel = lambda v: [r for r in runs if (r.env_id, r.model, r.variant) == (env, model, v)]
        rows.append([env, model, *(median_of(sel(v), rollout_share) or "–" for v in variants)])
    return variants, rows


def throughput(runs, env: str, backend: str) -> list[float]:
    return [x for r in runs if (r.env_id, r.variant) == (env, backend) if (x := rollout_throughput(r))]


def env_alone_rows(runs) -> list[list]:
    """Per env and backend: env steps per second alone (median, range over repeats), and against the
    C engine stepped in Gymnasium's sync loop."""
    rows = []
    for env in sorted({r.env_id for r in runs if r.variant in BACKENDS}):
        base = np.median(throughput(runs, env, C_ENGINE)) if throughput(runs, env, C_ENGINE) else None
        for backend in BACKENDS:
            if steps := throughput(runs, env, backend):
                rows.append([env, backend, median_range(steps), np.median(steps) / base if base else "–"])
    return rows


def plot_env_alone(runs, out):
    import matplotlib.pyplot as plt

    envs = sorted({r.env_id for r in runs if r.variant in BACKENDS})
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(BACKENDS)
    for i, backend in enumerate(BACKENDS):
        points = [(j, np.median(steps), min(steps), max(steps)) for j, env in enumerate(envs)
                  if (steps := throughput(runs, env, backend))]
        if points:
            x, mid, low, high = map(np.array, zip(*points))
            ax.bar(x + (i - len(BACKENDS) / 2 + 0.5) * width, mid, width, yerr=[mid - low, high - mid], capsize=2,
                   color=color(backend), label=backend)
    ax.set(xticks=range(len(envs)), xticklabels=envs, yscale="log", ylabel="env steps per second (32 envs)",
           title="Each continuous env stepped alone, random actions (median, range over repeats)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    out.chart(fig, "continuous_env_alone.png", "Env steps per second of each env alone: Gymnax (JAX, jitted), "
              "Gymnasium's sync and async loops and EnvPool (MuJoCo's C engine on HalfCheetah-v5), and MJX "
              "(HalfCheetah-v5's model in JAX, vmapped and jitted). What physics in JAX costs on this CPU.")


def continuous_section(runs, out):
    ran = [m for m in MODELS if any(r.model == m for r in runs)]  # what ran (the preset has small and medium)
    models = f"the {' and '.join(ran)} model{'s' * (len(ran) > 1)}"
    out.heading("Continuous actions: time",
                "The six Gymnax variants on Pendulum-v1 and MountainCarContinuous-v0, the CPU-env scripts "
                f"(each vectorization) on Pendulum-v1 and MuJoCo's HalfCheetah-v5, {models}, 20 synced "
                "iterations of the continuous defaults, and each env stepped alone; each repeat's runs in a "
                "shuffled order (`bash bench.sh continuous --repeats 3`). Steady state: iterations 8..end.",
                sessions_note(runs))
    for reference, others in GROUPS.items():
        where = "the env in JAX (Gymnax)" if reference == "linen" else "the env on the CPU (Gymnasium, EnvPool)"
        out.table(f"Continuous actions, {where}: each variant's steady iteration over {reference}'s, median "
                  f"(range, n repeats), with {reference}'s seconds per iteration and its rollout's share",
                  ["env", "model", f"{reference} s/iter", f"{reference} rollout share",
                   *(f"{v} / {reference}" for v in others)],
                  ratio_rows(runs, reference, others), block=f"continuous-{reference.replace('_', '-')}")
    variants, rows = share_rows(runs)
    out.table("Continuous actions: the rollout's share of an iteration (rollout / (rollout + update)), median over "
              "repeats", ["env", "model", *variants], rows, block="continuous-shares")
    plot_env_alone(runs, out)
    out.table(f"Each continuous env alone (32 envs, random actions): env steps per second, median (range, n "
              f"repeats), and against the C engine in Gymnasium's sync loop ({C_ENGINE})",
              ["env", "backend", "env steps/s", f"/ {C_ENGINE}"], env_alone_rows(runs), block="continuous-env-alone")
    continuous_claims(runs, out)


def continuous_claims(runs, out):
    """What results.md and method.md say of these tables, decided from the same runs."""
    alone = {(env, b): steps for env in sorted({r.env_id for r in runs}) for b in BACKENDS
             if (steps := throughput(runs, env, b))}
    said = lambda keys: ", ".join(f"{env} {b} {median_range(alone[(env, b)])}" for env, b in keys if (env, b) in alone)
    cpu_ways = [(env, b) for env, b in alone if b in ("env-sync", "env-async")]
    out.claim("envpool-fastest-of-the-cpus-ways", all((env, "env-envpool") in alone and min(alone[(env, "env-envpool")])
                                                      > max(alone[(env, b)]) for env, b in cpu_ways),
              ("fastest",), "env steps/s alone: " + said(sorted(alone)))
    pendulum = ("Pendulum-v1", "env-gymnax"), ("Pendulum-v1", "env-envpool")
    out.claim("gymnax-pendulum-faster-than-envpool", all(k in alone for k in pendulum)
              and min(alone[pendulum[0]]) > max(alone[pendulum[1]]), ("faster",), said(pendulum))
    cheetah = ("HalfCheetah-v5", "env-mjx"), ("HalfCheetah-v5", C_ENGINE)
    out.claim("mjx-far-slower-than-the-c-engine", all(k in alone for k in cheetah)
              and max(alone[cheetah[0]]) < min(alone[cheetah[1]])
              and np.median(alone[cheetah[0]]) < 0.5 * np.median(alone[cheetah[1]]), ("slower",),
              said(cheetah) + " (far: under half the C engine's median)")
    gymnax = sorted({r.env_id for r in runs if r.variant == "linen"})
    sizes = {(v, env, m): pair_ratios(runs, v, "linen", ITERATION).get((env, m), []) for v in ("torch", "torch_compile")
             for env in gymnax for m in ("small", "medium")}
    out.claim("jax-env-torch-ratio-smaller-at-medium",
              all(len(sizes[(v, env, "medium")]) and len(sizes[(v, env, "small")])
                  and max(sizes[(v, env, "medium")]) < min(sizes[(v, env, "small")]) for v, env, _ in sizes),
              ("smaller",), "; ".join(f"{v} / linen, {env}, {m} {median_range(x, ratio=True)}"
                                      for (v, env, m), x in sizes.items() if len(x)))


def ratio_lines(runs, model: str, lines) -> list[list[str]]:
    """README's lines: for each (a, b, env, label), a's steady iteration over b's on env with this model,
    where at least three repeats paired them."""
    rows = []
    for a, b, env, label in lines:
        ratios = pair_ratios(runs, a, b, ITERATION).get((env, model), [])
        if len(ratios) >= 3:
            rows.append([f"{label} (steady iteration)", median_range(ratios, ratio=True)])
    return rows


def headline_rows(runs) -> list[list[str]]:
    """README's continuous lines (small model, at least three repeats): PyTorch against Linen on
    Pendulum-v1 with the env in JAX and on HalfCheetah-v5 with the env on the CPU, and MJX against
    the C engine."""
    rows = ratio_lines(runs, "small", (
        ("torch", "linen", "Pendulum-v1", "continuous actions, Pendulum-v1: PyTorch, eager / Linen, Gymnax env"),
        ("torch_compile", "linen", "Pendulum-v1",
         "continuous actions, Pendulum-v1: PyTorch, torch.compile / Linen, Gymnax env"),
        ("torch_gymnasium", "linen_gymnasium", "HalfCheetah-v5",
         "continuous actions, HalfCheetah-v5: PyTorch / Linen, both stepping MuJoCo's C engine")))
    mjx, c_engine = throughput(runs, "HalfCheetah-v5", "env-mjx"), throughput(runs, "HalfCheetah-v5", C_ENGINE)
    if len(mjx) >= 3 and len(c_engine) >= 3:
        rows.append(["HalfCheetah-v5 alone: MJX (MuJoCo in JAX) / the C engine, env steps per second on this CPU",
                     f"{np.median(mjx) / np.median(c_engine):.3f}x ({np.median(mjx):,.0f} against "
                     f"{np.median(c_engine):,.0f})"])
    return rows
