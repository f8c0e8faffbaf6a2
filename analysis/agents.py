"""Many agents per process: N agents trained at once (jax.vmap / nnx.vmap, torch.func) against
the baseline a user has today, one agent per process (N of them one after another cost N times
one). Every time is per agent: the run's steady seconds per iteration divided by its N."""

from collections import defaultdict

import numpy as np

from .output import color
from .stats import first_iteration, median_range, peak_rss, repeat_of, sessions_note, steady

# each batched variant, and the single-agent script it batches (the same framework, one agent per process)
FAMILIES = {"linen_agents": "linen", "nnx_agents": "nnx", "torch_agents": "torch", "torch_agents_compile": "torch_compile"}
AGENT_NAMES = {"linen_agents": "Linen (jax.vmap)", "nnx_agents": "NNX (nnx.vmap)", "torch_agents": "PyTorch (torch.func)",
               "torch_agents_compile": "PyTorch (torch.func; policy step, GAE, gradients compiled)"}
REFERENCE = "linen_agents"
ONE_PER_PROCESS = "one per process"  # the N of the single-agent runs in tables


def num_agents(run) -> int:
    return run.info["args"].get("num_agents", 1)  # the single-agent scripts have no such argument


def per_agent(tag: str):
    """The steady (iterations 8..end) seconds per iteration of a tag, divided by the run's agents."""
    def value(run):
        x = steady(tag)(run)
        return None if x is None else x / num_agents(run)
    return value


PER_AGENT = per_agent("time/iteration")


def by_point(runs, value) -> dict[tuple, dict]:
    """{(env, N or ONE_PER_PROCESS, repeat): {family's batched variant: value}}: a repeat's runs
    (bench.sh's repeat r runs seed r) of one env and N, never across sessions or devices."""
    out = defaultdict(dict)
    single = {v: k for k, v in FAMILIES.items()}
    for r in runs:
        if (x := value(r)) is None:
            continue
        if r.variant in FAMILIES:
            out[(r.env_id, num_agents(r), repeat_of(r))][r.variant] = x
        elif r.variant in single:
            out[(r.env_id, ONE_PER_PROCESS, repeat_of(r))][single[r.variant]] = x
    return out


def grouped(points: dict) -> dict[tuple, dict[str, list]]:
    """{(env, N): {variant: [one value per repeat]}}"""
    out = defaultdict(lambda: defaultdict(list))
    for (env, n, _), values in points.items():
        for v, x in values.items():
            out[(env, n)][v].append(x)
    return out


def order(key):
    env, n = key
    return env, (n == ONE_PER_PROCESS), 0 if n == ONE_PER_PROCESS else n


def ratios(points, a, b, baseline=False) -> dict[tuple, list]:
    """{(env, N): [value of a / value of b, one per repeat]} at each N; baseline: a's value from
    the same repeat's single-agent run of a's framework (one agent per process)."""
    out = defaultdict(list)
    for (env, n, repeat), values in points.items():
        numerator = points.get((env, ONE_PER_PROCESS, repeat), {}) if baseline else values
        if n != ONE_PER_PROCESS and a in numerator and b in values:
            out[(env, n)].append(numerator[a] / values[b])
    return out


def plot_agents(runs, out):
    import matplotlib.pyplot as plt

    groups = grouped(by_point(runs, PER_AGENT))
    envs = sorted({env for env, _ in groups})
    if not envs:  # no run with a steady state (fewer than 18 iterations): nothing to draw
        return
    fig, axes = plt.subplots(1, len(envs), figsize=(6 * len(envs) + 2, 4.8), squeeze=False)
    for ax, env in zip(axes[0], envs):
        counts = sorted(n for e, n in groups if e == env and n != ONE_PER_PROCESS)
        for v in FAMILIES:
            points = [(n, np.median(groups[(env, n)][v])) for n in counts if groups[(env, n)].get(v)]
            if points:
                ax.plot(*zip(*points), marker="o", color=color(v), label=f"{v} (N in one process)")
            if baseline := groups[(env, ONE_PER_PROCESS)].get(v):
                ax.axhline(np.median(baseline), ls="--", lw=1, color=color(v), label=f"{FAMILIES[v]} (one per process)")
        ax.set(xscale="log", yscale="log", title=env, xlabel="agents N", ylabel="seconds per iteration per agent")
        ax.set_xticks(counts, [str(n) for n in counts])
        ax.xaxis.set_minor_locator(plt.NullLocator())
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1, 1))
    fig.suptitle("Training N agents at once: time per agent (steady state, small model, synced)")
    fig.tight_layout()
    out.chart(fig, "agents.png", "Seconds per iteration per agent against the number of agents trained in one "
              "process (log-log): a falling line is batching paying off; a dashed line is the same framework's "
              "single-agent script, whose cost per agent does not change with N.")


def agents_section(runs, out):
    out.heading("Many agents per process",
                "N agents trained at once in one process (`ppo_*_agents.py`, agent i seeded seed + i), against "
                "one agent per process (the single-agent scripts: N of them one after another cost N times one). "
                "Small model, the scripts' batch (32 envs x 256 steps, 10 epochs x 8 minibatches), synced; each "
                "repeat's runs in a shuffled order; ratios pair the runs of one repeat.", sessions_note(runs))
    plot_agents(runs, out)
    points = by_point(runs, PER_AGENT)
    groups = grouped(points)
    rows = [[env, n, *(median_range(groups[(env, n)][v]) if groups[(env, n)].get(v) else "not run" for v in FAMILIES)]
            for env, n in sorted(groups, key=order)]
    out.table("Seconds per iteration per agent: median over repeats (range, n repeats); "
              f"N = {ONE_PER_PROCESS}: the single-agent scripts (linen, nnx, torch, torch_compile)",
              ["env", "agents N", *(AGENT_NAMES[v] for v in FAMILIES)], rows, block="agents-times")
    cells = {f"{v} / {REFERENCE}": ratios(points, v, REFERENCE) for v in ("nnx_agents", "torch_agents",
                                                                          "torch_agents_compile")}
    cells |= {f"{FAMILIES[v]} (one per process) / {v}": ratios(points, v, v, baseline=True)
              for v in ("linen_agents", "torch_agents", "torch_agents_compile")}
    keys = sorted({k for c in cells.values() for k in c}, key=order)
    rows = [[env, n, *(median_range(c[(env, n)], ratio=True) if c.get((env, n)) else "–" for c in cells.values())]
            for env, n in keys]
    out.table("Time per agent, A / B, per repeat: median (range, n repeats). Left: each framework against Linen's "
              "batched agents at the same N; right: one agent per process against N in one (above 1: batching "
              "is cheaper per agent)", ["env", "agents N", *cells], rows, block="agents-ratios")
    rows = []
    for env, n in sorted(groups, key=order):
        for v in FAMILIES:
            sel = [r for r in runs if r.env_id == env and
                   ((r.variant == v and num_agents(r) == n) or (n == ONE_PER_PROCESS and r.variant == FAMILIES[v]))]
            if sel:
                med = lambda values: float(np.median([x for x in values if x is not None]))
                rows.append([env, n, sel[0].variant, med(map(first_iteration, sel)),
                             med(map(per_agent("time/rollout"), sel)), med(map(per_agent("time/update"), sel)),
                             med(map(peak_rss, sel))])
    out.table("Costs: the first iteration (it compiles), each agent's share of a steady rollout and update "
              "(seconds), and the process's peak memory (MB); medians over repeats",
              ["env", "agents N", "variant", "iteration 0", "rollout per agent", "update per agent",
               "peak RSS (MB)"], rows, block="agents-costs")
    agents_claims(points, groups, out)


def falls_then_levels(series) -> bool:
    """Each step of N falls beyond the ranges over repeats (the next one's max below this one's min) until
    a step that is level (the ranges overlap), and every step after it is level too; at least one falls."""
    steps = ["falls" if max(b) < min(a) else "level" if max(b) >= min(a) and max(a) >= min(b) else "rises"
             for a, b in zip(series, series[1:])]
    k = steps.index("level") if "level" in steps else len(steps)
    return k > 0 and all(s == "falls" for s in steps[:k]) and all(s == "level" for s in steps[k:])


def agents_claims(points, groups, out):
    """What results.md says of these tables, decided from the same runs, on every env: whether a family's
    time per agent falls with N, step by step beyond the ranges over repeats, and then levels off; whether
    N agents in one process cost less per agent than one agent per process at the largest N (the whole
    range above 1); and whether one agent batched (N = 1) costs more than the single-agent script (the
    whole range below 1)."""
    envs = sorted({env for env, _ in groups})
    counts = {env: sorted(n for e, n in groups if e == env and n != ONE_PER_PROCESS) for env in envs}
    for v in FAMILIES:
        series = {env: [groups[(env, n)].get(v, []) for n in counts[env]] for env in envs}
        out.claim(f"{v}-time-per-agent-falls-then-levels-off", envs and all(
            len(xs) > 1 and all(len(x) for x in xs) and falls_then_levels(xs) for xs in series.values()),
            ("falls", "levels off"), "; ".join(
            f"{env}, s per agent: " + ", ".join(f"N={n} {median_range(x)}" for n, x in zip(counts[env], xs) if len(x))
            for env, xs in series.items()))
        alone = ratios(points, v, v, baseline=True)  # one agent per process / N in one
        last = {env: alone.get((env, counts[env][-1]), []) if counts[env] else [] for env in envs}
        out.claim(f"{v}-cheaper-than-one-per-process", envs and all(len(x) and min(x) > 1 for x in last.values()),
                  ("cheaper",), "; ".join(f"{env}, {FAMILIES[v]} (one per process) / {v} at N={counts[env][-1]}: "
                                          f"{median_range(x, ratio=True)}" for env, x in last.items() if len(x)))
        one = {env: alone.get((env, 1), []) for env in envs}
        out.claim(f"{v}-one-agent-slower-than-the-plain-script", envs and all(len(x) and max(x) < 1 for x in one.values()),
                  ("slower",), "; ".join(f"{env}, {FAMILIES[v]} (one per process) / {v} at N=1: "
                                          f"{median_range(x, ratio=True)}" for env, x in one.items() if len(x)))


def headline_rows(runs) -> list[list[str]]:
    """README's many-agents lines: CartPole-v1 at the largest N run in at least three repeats."""
    points = by_point(runs, PER_AGENT)
    rows = []
    for a in ("torch_agents", "torch_agents_compile"):
        b, what = REFERENCE, f"{AGENT_NAMES[a]} / {AGENT_NAMES[REFERENCE]}"
        found = {n: r for (env, n), r in ratios(points, a, b).items() if env == "CartPole-v1" and len(r) >= 3}
        if found:
            n = max(found)
            rows.append([f"{n} agents in one process, CartPole-v1, time per agent: {what}",
                         median_range(found[n], ratio=True)])
    return rows
