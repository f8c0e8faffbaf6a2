"""CPU environments: {PyTorch, Linen} x {CPU env (Gymnasium), JAX env (Gymnax)}, synced, so a
user can tell what the framework buys from what the environment buys; and env scaling, the
rollout's throughput against the number of environments."""

from collections import defaultdict

import numpy as np

from .output import color, variant_order
from .stats import MODELS, median_range, repeat_of, sessions_note, steady

# the ways to step a CPU env (--vectorization) and the JAX env, per framework: the corners
CORNERS = ("torch_gymnasium", "torch_gymnasium-vector", "torch_gymnasium-envpool", "torch",
           "linen_gymnasium", "linen_gymnasium-vector", "linen_gymnasium-envpool", "linen")
# the comparisons a user weighs, as time of A / time of B: an environment's effect is read on the
# rollout (both sides run the same update code), a framework's on the steady iteration
ENV_PAIRS = [(f"{fw}_gymnasium{b}" if b != "jax" else fw, f"{fw}_gymnasium{a}", f"{what}, {name} kept")  # new / old
             for fw, name in (("torch", "PyTorch"), ("linen", "Linen"))
             for a, b, what in (("", "-vector", "the NumPy-vectorized env instead of the sync loop"),
                                ("", "-envpool", "EnvPool instead of the sync loop"),
                                ("-envpool", "jax", "the JAX env instead of EnvPool"),
                                ("", "jax", "the JAX env instead of the sync loop"))]
FRAMEWORK_PAIRS = [("torch_gymnasium", "linen_gymnasium", "the framework alone, sync loop"),
                   ("torch_gymnasium-vector", "linen_gymnasium-vector", "the framework alone, NumPy-vectorized env"),
                   ("torch_gymnasium-envpool", "linen_gymnasium-envpool", "the framework alone, EnvPool"),
                   ("torch", "linen", "the framework alone, JAX env"),
                   ("torch_gymnasium", "linen", "everything moved to JAX")]
CPU_ENV_PAIRS = ENV_PAIRS + FRAMEWORK_PAIRS
PARTS = (("rollout", "time/rollout"), ("update", "time/update"), ("steady iteration", "time/iteration"))
# the batch and update shapes the experiment runs: the scripts' defaults and CleanRL ppo.py's
CONFIGS = {(32, 256, 10, 8): "32 envs x 256 steps, 10 epochs x 8", (4, 128, 4, 4): "CleanRL: 4 envs x 128 steps, 4 x 4"}


def config_of(run) -> str:
    a = run.info["args"]
    shape = (a["num_envs"], a["num_steps"], a["update_epochs"], a["num_minibatches"])
    return CONFIGS.get(shape, "{} envs x {} steps, {} epochs x {}".format(*shape))


def defaults_only(runs):
    """The runs at the scripts' default batch and update (what every other experiment runs)."""
    return [r for r in runs if config_of(r) == next(iter(CONFIGS.values()))]


def paired(runs, a: str, b: str, tag: str) -> dict[tuple, np.ndarray]:
    """{(env, config, model): steady time of A / time of B, one ratio per repeat}: runs pair up
    when they share env, config, model and repeat (bench.sh's repeat r runs seed r), and never
    across sessions or devices."""
    by = defaultdict(dict)
    for r in runs:
        if (x := steady(tag)(r)) is not None:
            by[(r.env_id, config_of(r), r.model, *map(str, repeat_of(r)))][r.variant] = x
    out = defaultdict(list)
    for (env, config, model, *_), times in sorted(by.items()):
        if a in times and b in times:
            out[(env, config, model)].append(times[a] / times[b])
    return {key: np.array(ratios) for key, ratios in out.items()}


def plot_cpuenv(runs, variants, out):
    """Per env and config: each corner's synced iteration split into rollout (dark) and update (light)."""
    import matplotlib.pyplot as plt

    groups = sorted({(r.env_id, config_of(r)) for r in runs if r.model == "small"})
    fig, axes = plt.subplots(1, len(groups), figsize=(4.2 * len(groups) + 2, 4.8), squeeze=False)
    for ax, (env, config) in zip(axes[0], groups):
        sel = [r for r in runs if (r.env_id, config_of(r), r.model) == (env, config, "small")]
        shown = [v for v in variants if any(r.variant == v for r in sel)]
        for j, v in enumerate(shown):
            rollout = [x for r in sel if r.variant == v and (x := steady("time/rollout")(r))]
            update = [x for r in sel if r.variant == v and (x := steady("time/update")(r))]
            ax.bar(j, np.median(rollout), 0.8, color=color(v), label=v)
            ax.bar(j, np.median(update), 0.8, bottom=np.median(rollout), color=color(v), alpha=0.45)
            ax.plot([j] * len(rollout), rollout, "k.", ms=3)  # every repeat's rollout
        ax.set(yscale="log", title=f"{env}\n{config}", ylabel="seconds per iteration (rollout dark, update light)")
        ax.set_xticks(range(len(shown)), shown, rotation=40, ha="right", fontsize=7)
    handles = {h.get_label(): h for ax in axes[0] for h in ax.get_legend_handles_labels()[0]}
    axes[0][-1].legend([handles[v] for v in variants if v in handles], [v for v in variants if v in handles],
                       fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle("CPU envs stepped three ways, or the JAX env: synced, small model, iterations 8..end")
    fig.tight_layout()
    out.chart(fig, "cpuenv_2x2.png", "Each corner's iteration split into rollout (dark, dots: each repeat) and "
              "update (light): compare the dark bars for what the environment costs, the light ones for the "
              "framework.")


def cpuenv_section(runs, out):
    out.heading("CPU environments: is it the framework or the environment?",
                "The `*_gymnasium` variants step each env's Gymnasium twin on the CPU: `sync` is Gymnasium's "
                "SyncVectorEnv (a Python loop over the envs, same-step autoreset), `-vector` Gymnasium's "
                "NumPy-vectorized env and `-envpool` EnvPool's C++ envs (both next-step autoreset, the reset "
                "step masked out of the loss); the others step Gymnax in JAX. Synced, iterations 8..end; each "
                "repeat's runs in a shuffled order; ratios pair the runs of one repeat.", sessions_note(runs))
    present = {r.variant for r in runs}
    variants = [v for v in CORNERS if v in present] + variant_order(present - set(CORNERS))
    plot_cpuenv(runs, variants, out)
    rows = []
    groups = sorted({(r.env_id, config_of(r), r.model) for r in runs}, key=lambda g: (MODELS.index(g[2]), g[0], g[1]))
    for env, config, model in groups:
        for v in variants:
            sel = [r for r in runs if (r.env_id, config_of(r), r.model, r.variant) == (env, config, model, v)]
            if sel:
                times = {tag: [x for r in sel if (x := steady(tag)(r))] for _, tag in PARTS}
                share = np.median(times["time/rollout"]) / np.median(times["time/iteration"])
                rows.append([env, config, model, v, median_range(times["time/rollout"]),
                             f"{np.median(times['time/update']):.3g}", f"{np.median(times['time/iteration']):.3g}",
                             f"{share:.0%}"])
    out.table("Seconds per iteration: median over repeats (range, n repeats); rollout share of the iteration",
              ["env", "batch and update", "model", "variant", "rollout", "update", "iteration", "rollout share"],
              rows, block="cpuenv-times")
    rows = []
    for a, b, what in CPU_ENV_PAIRS:
        cells = {name: paired(runs, a, b, tag) for name, tag in PARTS}
        for key in sorted(cells["rollout"], key=lambda k: (MODELS.index(k[2]), k[0], k[1])):
            rows.append([what, f"{a} / {b}", *key, *(median_range(cells[name][key], ratio=True) for name, _ in PARTS)])
    out.table("Time, A / B, per repeat: median (range, n repeats). An environment's effect: read the rollout; "
              "a framework's: the steady iteration",
              ["what changes", "time, A / B", "env", "batch and update", "model", *(name for name, _ in PARTS)], rows,
              block="cpuenv-ratios")
    cpuenv_claims(runs, out)


def cpuenv_claims(runs, out):
    """What results.md's list under the ratios says, decided from the same pairs."""
    default, cleanrl = CONFIGS.values()
    ways = ("", "-vector", "-envpool")

    def pairs(a, b, tag, config=None):
        """{(env, config): ratios} of a / b, at one config or every one."""
        return {(env, c): x for (env, c, model), x in paired(runs, a, b, tag).items()
                if model == "small" and config in (None, c)}

    said = lambda found: "; ".join(f"{env}, {c.split(':')[0]}: {median_range(x, ratio=True)}" for (env, c), x in found.items())
    envpool = {fw: pairs(f"{fw}_gymnasium-envpool", f"{fw}_gymnasium", "time/rollout", cleanrl) for fw in ("torch", "linen")}
    out.claim("envpool-slower-at-cleanrls-4-envs", all(found and all(x.min() > 1 for x in found.values())
                                                       for found in envpool.values()), ("slower",),
              "rollout, EnvPool / sync loop: " + " | ".join(f"{fw} {said(found)}" for fw, found in envpool.items()))
    cartpole = {b: pairs("torch", b, "time/rollout", default).get(("CartPole-v1", default))
                for b in ("torch_gymnasium-envpool", "torch_gymnasium-vector")}
    breakout = pairs("torch", "torch_gymnasium", "time/rollout", default).get(("Breakout-MinAtar", default))
    out.claim("torch-jax-env-no-faster-at-the-scripts-batch",
              all(x is not None and x.min() > 1 for x in (*cartpole.values(), breakout)), ("faster",),
              "rollout at the scripts' batch: " + "; ".join(f"torch / {b} on CartPole-v1 {median_range(x, ratio=True)}"
                                                            for b, x in cartpole.items() if x is not None)
              + (f"; torch / torch_gymnasium on Breakout-MinAtar {median_range(breakout, ratio=True)}"
                 if breakout is not None else ""))
    linen = {w: pairs("linen", f"linen_gymnasium{w}", "time/rollout") for w in ways}
    out.claim("linen-jax-env-rollout-faster-than-any-host-loop",
              all(found and all(x.max() < 1 for x in found.values()) for found in linen.values()), ("faster",),
              "rollout, linen / linen_gymnasium: " + " | ".join(f"{w or 'sync'} {said(found)}" for w, found in linen.items()))
    rollout = {w: pairs(f"torch_gymnasium{w}", f"linen_gymnasium{w}", "time/rollout", default) for w in ways}
    out.claim("linen-cpu-env-rollout-slower-than-torchs",
              all(found and all(np.median(x) < 1 for x in found.values()) for found in rollout.values()), ("slower",),
              "rollout at the scripts' batch, torch_gymnasium / linen_gymnasium (median below 1 in each): "
              + " | ".join(f"{w or 'sync'} {said(found)}" for w, found in rollout.items()))
    update = {w: pairs(f"torch_gymnasium{w}", f"linen_gymnasium{w}", "time/update") for w in ways}
    most_at_cleanrl = all(np.median(found[(env, cleanrl)]) > np.median(found[(env, default)])
                          for found in update.values() for env, c in found if (env, cleanrl) in found and (env, default) in found)
    out.claim("linen-update-faster-with-every-cpu-env",
              all(found and all(x.min() > 1 for x in found.values()) for found in update.values()) and most_at_cleanrl,
              ("faster",), "update, torch_gymnasium / linen_gymnasium (above 1 in every repeat, the median highest at "
                           "CleanRL's batch): " + " | ".join(f"{w or 'sync'} {said(found)}" for w, found in update.items()))


def headline_rows(cpuenv) -> list[list[str]]:
    """README's CPU-environment lines: on CartPole, small model, the scripts' defaults."""
    rows = []
    rollout, iteration = PARTS[0], PARTS[2]
    for (a, b, what), (name, tag) in [(ENV_PAIRS[1], rollout), (ENV_PAIRS[2], rollout),
                                      (FRAMEWORK_PAIRS[2], iteration), (FRAMEWORK_PAIRS[4], iteration)]:
        ratios = paired(defaults_only(cpuenv), a, b, tag).get(("CartPole-v1", next(iter(CONFIGS.values())), "small"))
        if ratios is not None:
            rows.append([f"CPU environments, CartPole-v1: {what} ({a} / {b}, {name})",
                         median_range(ratios, ratio=True)])
    return rows


# ---- env scaling
def rollout_throughput(run):
    """Env steps per second of a synced rollout, iterations 1..end (iteration 0 compiles). The steps
    are the transitions the run logged (SPS x iteration: a next-step autoreset's reset steps are
    none), or num_envs x num_steps for a run that logs no SPS (env_alone.py)."""
    seconds = run.series("time/rollout")[1][1:]
    args = run.info["args"]
    sps, iteration = run.series("charts/SPS")[1][1:], run.series("time/iteration")[1][1:]
    steps = float(np.mean(sps * iteration)) if len(sps) == len(iteration) > 0 else args["num_envs"] * args["num_steps"]
    return steps / float(np.mean(seconds)) if len(seconds) else None


def saturation(points: dict[int, float]) -> int:
    """The fewest envs that reach 90% of the best throughput: where it stops growing."""
    best = max(points.values())
    return min(n for n, x in points.items() if x >= 0.9 * best)


ENV_ALONE_STYLES = {"env-gymnax": "--", "env-sync": ":", "env-vector": "-.", "env-envpool": (0, (5, 1, 1, 1, 1, 1))}


def envscale_section(runs, out):
    import matplotlib.pyplot as plt

    out.heading("Environment scaling: rollout throughput against the number of environments",
                "Synced rollout, iterations 1..end; env steps per second (num_envs x num_steps / rollout time), "
                "one run per point. Grey (env-...): the environment alone with uniform random actions, run by "
                "bench.sh like the scripts (env_alone.py: the scripts' own env helpers, the same steps, Gymnax in "
                "one jitted scan, the CPU twin stepped each --vectorization way).")
    envs = sorted({r.env_id for r in runs})
    counts = sorted({r.info["args"]["num_envs"] for r in runs})
    fig, axes = plt.subplots(1, len(envs), figsize=(6.5 * len(envs) + 2, 4.8), squeeze=False)
    rows, curves = [], {}
    for ax, env in zip(axes[0], envs):
        present = {r.variant for r in runs if r.env_id == env}
        alone = [v for v in ENV_ALONE_STYLES if v in present]
        for v in variant_order(present - set(alone)) + alone:
            per_count = defaultdict(list)
            for r in runs:
                if r.env_id == env and r.variant == v and (x := rollout_throughput(r)):
                    per_count[r.info["args"]["num_envs"]].append(x)
            points = {n: float(np.median(xs)) for n, xs in sorted(per_count.items())}
            if points:
                style = dict(ls=ENV_ALONE_STYLES[v], color="grey") if v in alone else dict(marker="o", color=color(v))
                ax.plot(list(points), list(points.values()), label=v, **style)
                rows.append([env, v, *(points.get(n) for n in counts), saturation(points)])
                curves[(env, v)] = points
        ax.set(xscale="log", yscale="log", title=env, xlabel="num_envs", ylabel="env steps per second")
        ax.set_xticks(counts, [str(n) for n in counts], minor=False)
        ax.xaxis.set_minor_locator(plt.NullLocator())
    axes[0][-1].legend(fontsize=8, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle("Rollout throughput against the number of environments")
    fig.tight_layout()
    out.chart(fig, "envscale.png", "Rollout throughput as the number of environments grows: where a line "
              "flattens, that setup has stopped scaling; the grey lines are the environments alone.")
    out.table("Rollout throughput (env steps per second) by num_envs; saturates: fewest envs within 10% of the best",
              ["env", "variant", *map(str, counts), "saturates"], rows, block="envscale")
    envscale_claims(curves, out)


def envscale_claims(curves, out, up_to=128, from_=512):
    """Linen's scan against every other script up to `up_to` envs; Linen over the NumPy CartPole from `from_` on."""
    scripts = {(env, v): p for (env, v), p in curves.items() if v not in ENV_ALONE_STYLES}
    best = {(env, n): max((p[n], v) for (e, v), p in scripts.items() if e == env and n in p)
            for env, _ in scripts for n in curves.get((env, "linen"), {}) if n <= up_to}
    out.claim(f"linen-scan-fastest-script-to-{up_to}-envs", best and all(v == "linen" for _, v in best.values()),
              ("fastest",), "the script with the most env steps per second: "
              + ", ".join(f"{env} at {n}: {v}" for (env, n), (_, v) in sorted(best.items())))
    linen, vector = curves.get(("CartPole-v1", "linen"), {}), curves.get(("CartPole-v1", "linen_gymnasium-vector"), {})
    late = {n: vector[n] / linen[n] for n in linen if n >= from_ and n in vector}
    out.claim(f"numpy-cartpole-as-fast-as-linens-scan-from-{from_}-envs", late and min(late.values()) >= 0.9,
              ("as fast",), "CartPole-v1, linen_gymnasium-vector / linen, env steps per second: "
              + ", ".join(f"{n} envs {x:.2f}" for n, x in late.items()) + " (at least 0.9 at each)")
