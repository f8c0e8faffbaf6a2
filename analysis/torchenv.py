"""PyTorch on its own terms (issue 49). The env in each framework's own language (bench.sh torchenv):
Linen and NNX step Gymnax, PyTorch steps the same envs written in torch (--torch-env), eager and
compiled, and beside them, in the same shuffled session, PyTorch stepping Gymnax through DLPack as
the JAX-env regime has it; and each env alone (env_alone.py): Gymnax in one scan, Gymnax a call per
step through DLPack, the torch env eager and compiled. Then the CPU-env regimes again with compiled
PyTorch beside eager (bench.sh cpucompile)."""

from collections import defaultdict

import numpy as np

from .decision import REGIMES
from .output import color
from .stats import below, median_of, median_range, not_below, pair_ratios, ratio_row, sessions_note, steady

REFERENCE = "linen"
EAGER, COMPILED = "torch", "torch_compile"
OWN = {EAGER: "torch-torchenv", COMPILED: "torch_compile-torchenv"}  # each torch variant with its env in torch
OTHERS = ("nnx", EAGER, OWN[EAGER], COMPILED, OWN[COMPILED])
ITERATION, ROLLOUT, UPDATE = (steady(tag) for tag in ("time/iteration", "time/rollout", "time/update"))
PARTS = {"steady iteration": ITERATION, "rollout": ROLLOUT, "update": UPDATE}
# env_alone.py's backends, as each side reaches the env: JAX's scan, PyTorch's call per step through DLPack,
# and the env in torch, eager and compiled
ALONE = {"env-gymnax": "Gymnax, one scan", "env-gymnax-dlpack": "Gymnax, a call per step, DLPack",
         "env-torch": "the env in torch, eager", "env-torch-compile": "the env in torch, compiled"}


def num_envs(run) -> int:
    return run.info["args"]["num_envs"]


def steps_per_second(run) -> float | None:
    return run.summary.get("env_steps_per_second")


def seconds_per_step(run) -> float | None:
    """The time of one env step of the whole batch (the inverse of throughput: a time, as every ratio here)."""
    return 1 / steps_per_second(run) if steps_per_second(run) else None


def alone_ratios(runs, a: str, b: str) -> dict[tuple[str, int], np.ndarray]:
    """{(env, num_envs): a's time per env step / b's, one ratio per repeat}."""
    out = {}
    for n in sorted({num_envs(r) for r in runs}):
        for (env, _), ratios in pair_ratios([r for r in runs if num_envs(r) == n], a, b, seconds_per_step).items():
            out[(env, n)] = ratios
    return out


def plot_torchenv(trained, alone, out):
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    keys = sorted({(r.env_id, r.model) for r in trained}, key=lambda k: (k[1] != "small", k[0]))
    for i, v in enumerate(OTHERS):
        for j, (part, value) in enumerate((("rollout", ROLLOUT), ("steady iteration", ITERATION))):
            ratios = pair_ratios(trained, v, REFERENCE, value)
            xs = [k for k, key in enumerate(keys) if key in ratios]
            if xs:
                mid = [np.median(ratios[keys[k]]) for k in xs]
                left.scatter([k + (i - 2) * 0.12 for k in xs], mid, color=color(v), marker="o" if j else "x",
                             label=f"{v}, {part}")
    left.axhline(1, color="grey", lw=0.8)
    left.set(yscale="log", ylabel=f"time / {REFERENCE}'s (median over repeats)",
             title=f"each variant over {REFERENCE}: rollout (x) and iteration (o)")
    left.set_xticks(range(len(keys)), [f"{e}\n{m}" for e, m in keys], fontsize=7)
    left.legend(fontsize=6, ncol=2)
    for env in sorted({r.env_id for r in alone}):
        for v, what in ALONE.items():
            points = defaultdict(list)
            for r in alone:
                if r.env_id == env and r.variant == v and steps_per_second(r):
                    points[num_envs(r)].append(steps_per_second(r))
            if points:
                counts = sorted(points)
                right.plot(counts, [np.median(points[n]) for n in counts], marker="o", color=color(v),
                           ls=("-", "--", ":")[sorted({r.env_id for r in alone}).index(env) % 3],
                           label=f"{env}: {what}")
    right.set(xscale="log", yscale="log", xlabel="num_envs", ylabel="env steps per second",
              title="each env alone (median over repeats)")
    right.legend(fontsize=6)
    fig.suptitle("The env in each framework's own language (synced, one session)")
    fig.tight_layout()
    out.chart(fig, "torchenv.png", "Left: each variant's rollout and steady iteration over Linen's, per env and "
              "model (torch steps Gymnax through DLPack, torch-torchenv the env written in torch); right: each env "
              "alone, env steps per second against the number of envs, as each side reaches it.")


def torchenv_section(runs, out):
    trained = [r for r in runs if not r.variant.startswith("env-")]
    alone = [r for r in runs if r.variant.startswith("env-")]
    out.heading("The env in each framework's own language",
                "CartPole-v1, Acrobot-v1 and Pendulum-v1 at the small and medium models: Linen and NNX step Gymnax; "
                "PyTorch steps the same envs written in torch (--torch-env: on torch's device, no JAX, compiled with "
                "the policy step in torch_compile-torchenv) and, as in the JAX-env regime, Gymnax through DLPack "
                "(bench.sh torchenv: the scripts' batch of 32 envs x 256 steps, synced, each repeat's runs in a "
                "shuffled order). Steady state: iterations 8..end.", sessions_note(runs))
    plot_torchenv(trained, alone, out)
    keys = sorted({(r.env_id, r.model) for r in trained}, key=lambda k: (k[1] != "small", k[0]))
    ratios = {(v, part): pair_ratios(trained, v, REFERENCE, value) for v in OTHERS for part, value in PARTS.items()}
    for part, block in (("steady iteration", "torchenv-iteration"), ("rollout", "torchenv-rollout")):
        rows = []
        for env, model in keys:
            linen = [r for r in trained if (r.env_id, r.model, r.variant) == (env, model, REFERENCE)]
            rows.append([env, model, median_of(linen, PARTS[part]),
                         *(median_range(ratios[(v, part)][(env, model)], ratio=True)
                           if (env, model) in ratios[(v, part)] else "not run" for v in OTHERS)])
        out.table(f"The {part}: Linen's seconds, and each variant's over Linen's, median (range, n repeats); "
                  "torch and torch_compile step Gymnax through DLPack, the -torchenv ones the env in torch",
                  ["env", "model", f"Linen s ({part})", *(f"{v} / {REFERENCE}" for v in OTHERS)], rows, block=block)
    own_over_gymnax = {(v, part): pair_ratios(trained, OWN[v], v, value) for v in OWN for part, value in PARTS.items()}
    rows = [[env, model, *(median_range(own_over_gymnax[(v, part)][(env, model)], ratio=True)
                           if (env, model) in own_over_gymnax[(v, part)] else "not run"
                           for v in OWN for part in ("rollout", "steady iteration"))] for env, model in keys]
    out.table("The env in torch instead of Gymnax through DLPack, PyTorch kept: time with --torch-env over time "
              "without, median (range, n repeats)",
              ["env", "model", *(f"{OWN[v]} / {v}, {part}" for v in OWN for part in ("rollout", "iteration"))],
              rows, block="torchenv-own-over-gymnax")
    if alone:
        alone_section(alone, out)
    torchenv_claims(ratios, own_over_gymnax, alone, out)


def alone_section(alone, out):
    rows = []
    for env in sorted({r.env_id for r in alone}):
        for n in sorted({num_envs(r) for r in alone}):
            cell = lambda v: median_of([r for r in alone if (r.env_id, num_envs(r), r.variant) == (env, n, v)],
                                       steps_per_second)
            rows.append([env, n, *(cell(v) for v in ALONE)])
    out.table("Each env alone (env_alone.py, uniform random actions, 128 steps per rollout): env steps per second, "
              "median over repeats, as each side reaches the env",
              ["env", "num_envs", *ALONE.values()], rows, block="torchenv-alone")


def rows_of(ratios: dict, keep=lambda key: True) -> dict:
    """Each (env, model) or (env, num_envs) key's ratio row (its range over repeats)."""
    return {key: ratio_row([x]) for key, x in ratios.items() if keep(key)}


def evidence(name: str, rows: dict) -> str:
    cell = lambda key, row: f"{' '.join(map(str, key))} {row['median']:.2f}x ({row['min']:.2f}–{row['max']:.2f})"
    return f"{name}: " + ", ".join(cell(key, row) for key, row in sorted(rows.items()))


def torchenv_claims(ratios, own_over_gymnax, alone, out):
    """What results.md says of these tables, each decided from the ranges over repeats: whether the env in
    torch beats Gymnax through DLPack (rollout, iteration; at each model size and at both), where each torch
    variant then stands against Linen, and how each env alone compares at the fewest and the most envs."""
    def decide(name, ratios, keep=lambda key: True):
        """(faster in every repeat everywhere, slower so, the evidence)."""
        rows = rows_of(ratios, keep)
        faster, slower = (bool(rows) and all(below(*pair(row)) for row in rows.values())
                          for pair in (lambda row: (row, 1), lambda row: (1, row)))
        return faster, slower, evidence(name, rows)

    for v in OWN:
        for part, word in (("rollout", "rollout"), ("steady iteration", "iteration")):
            for model in ("small", "medium", None):
                at = f"-{model}" if model else ""
                faster, slower, said = decide(f"{OWN[v]} / {v}, {part}", own_over_gymnax[(v, part)],
                                              lambda key: model is None or key[1] == model)
                out.claim(f"{OWN[v]}-{word}-faster-than-gymnax{at}", faster, ("faster",), said)
                out.claim(f"{OWN[v]}-{word}-slower-than-gymnax{at}", slower, ("slower",), said)
                level = [row for key, row in rows_of(own_over_gymnax[(v, part)]).items() if model in (None, key[1])]
                out.claim(f"{OWN[v]}-{word}-level-with-gymnax{at}", level and all(
                    not_below(row, 1) and not_below(1, row) for row in level), ("level",), said)
            faster, slower, said = decide(f"{OWN[v]} / {REFERENCE}, {part}", ratios[(OWN[v], part)])
            out.claim(f"{OWN[v]}-{word}-slower-than-linen", slower, ("slower",), said)
            out.claim(f"{OWN[v]}-{word}-faster-than-linen", faster, ("faster",), said)
    if not alone:
        return
    counts = sorted({num_envs(r) for r in alone})
    second = counts[min(1, len(counts) - 1)]
    for a, b in (("env-torch-compile", "env-gymnax-dlpack"), ("env-torch", "env-gymnax-dlpack"),
                 ("env-torch-compile", "env-torch"), ("env-torch-compile", "env-gymnax")):
        pair = alone_ratios(alone, a, b)
        for where, keep in ((f"at-{counts[0]}", lambda key: key[1] == counts[0]),
                            (f"at-{counts[-1]}", lambda key: key[1] == counts[-1]),
                            (f"from-{second}", lambda key: key[1] >= second)):
            faster, slower, said = decide(f"{a} / {b}, time per env step", pair, keep)
            out.claim(f"{a}-faster-than-{b}-alone-{where}", faster, ("faster",), said)
            out.claim(f"{a}-slower-than-{b}-alone-{where}", slower, ("slower",), said)


# ---- the CPU-env regimes with compiled PyTorch (bench.sh cpucompile)
EAGER_CPU, COMPILED_CPU, LINEN_CPU = "torch_gymnasium", "torch_compile_gymnasium", "linen_gymnasium"
SCOPES = {"": "update, policy step", "-update": "update; policy step eager"}  # the compiled script's scopes
# each kind of CPU env the decision table has a regime for: its name in the claims, its envs (the regime's), the
# variants' suffix; and Pendulum in the loop, which has none
ENVS_OF = {regime.name: regime.envs for regime in REGIMES}
KINDS = {"Gymnasium's loop": ("loop", ENVS_OF["CPU env, Gymnasium's loop"], ""),
         "EnvPool": ("envpool", ENVS_OF["CPU env, EnvPool"], "-envpool"),
         "MuJoCo": ("mujoco", ENVS_OF["continuous actions, MuJoCo"], ""),
         "Pendulum in the loop": ("pendulum", ("Pendulum-v1",), ""),
         "Atari through EnvPool, the CNN": ("atari", ENVS_OF["pixels, Atari"], "-envpool")}


def kind_runs(runs, kind: str) -> list:
    """The kind's runs: eager, each compiled scope and Linen, on its envs."""
    _, envs, suffix = KINDS[kind]
    variants = {EAGER_CPU + suffix, LINEN_CPU + suffix} | {COMPILED_CPU + suffix + scope for scope in SCOPES}
    return [r for r in runs if r.env_id in envs and r.variant in variants]


def cpucompile_section(runs, out):
    out.heading("Compiled PyTorch on CPU envs",
                "The CPU-env regimes again, compiled PyTorch (ppo_torch_compile_gymnasium.py: GAE and the whole "
                "minibatch step compiled, and the policy step too unless --compile-scope update) beside eager and "
                "Linen, each repeat in a shuffled order (bench.sh cpucompile: Gymnasium's loop on CartPole-v1 and "
                "Acrobot-v1, EnvPool on both, Pendulum-v1 and MuJoCo's HalfCheetah-v5 and Hopper-v5 in the loop, at the "
                "scripts' batch, small model; Atari's Breakout-v5 and Pong-v5 through EnvPool with the Nature CNN at "
                "CleanRL's Atari batch; synced). Steady state: iterations 8..end.", sessions_note(runs))
    rows, found = [], {}
    for kind, (slug, _, suffix) in KINDS.items():
        sel = kind_runs(runs, kind)
        eager, linen = EAGER_CPU + suffix, LINEN_CPU + suffix
        for scope, what in SCOPES.items():
            compiled = COMPILED_CPU + suffix + scope
            pairs = {part: pair_ratios(sel, compiled, eager, value) for part, value in PARTS.items()}
            over_linen = {v: pair_ratios(sel, v, linen, ITERATION) for v in (eager, compiled)}
            found[(kind, scope)] = pairs["steady iteration"]
            for env, model in sorted({(r.env_id, r.model) for r in sel if r.variant == compiled}):
                cell = lambda x: median_range(x[(env, model)], ratio=True) if (env, model) in x else "not run"
                linen_runs = [r for r in sel if (r.env_id, r.model, r.variant) == (env, model, linen)]
                rows.append([kind, env, model, what, median_of(linen_runs, ITERATION), *(cell(pairs[p]) for p in PARTS),
                             *(cell(over_linen[v]) for v in (eager, compiled))])
        out.claim(f"policy-step-eager-faster-{slug}", *scope_claim(sel, suffix, below))
        out.claim(f"policy-step-eager-not-faster-{slug}", *scope_claim(sel, suffix, not_below))
    out.table("Compiled over eager PyTorch on CPU envs, at each compile scope, and each over Linen: time of A / "
              "time of B, median (range, n repeats); Linen's steady seconds per iteration",
              ["env kind", "env", "model", "compiled", "Linen s/iter", "compiled / eager, iteration",
               "compiled / eager, rollout", "compiled / eager, update", "eager / Linen, iteration",
               "compiled / Linen, iteration"], rows, block="cpucompile")
    for (kind, scope), ratios in found.items():
        name, rows = f"{KINDS[kind][0]}{scope}", rows_of(ratios)
        said = evidence(f"{kind}: compiled ({SCOPES[scope]}) / eager, iteration", rows)
        out.claim(f"compiled-faster-than-eager-{name}", rows and all(below(r, 1) for r in rows.values()), ("faster",),
                  said)
        out.claim(f"compiled-not-faster-than-eager-{name}", rows and all(not_below(r, 1) for r in rows.values()),
                  ("faster",), said)


def scope_claim(runs, suffix: str, rule) -> tuple:
    """The compiled script with its policy step eager against it compiled, steady iteration, by the rule
    (below: faster in every repeat on every env; not_below: not so on any)."""
    rows = rows_of(pair_ratios(runs, COMPILED_CPU + suffix + "-update", COMPILED_CPU + suffix, ITERATION))
    return (rows and all(rule(r, 1) for r in rows.values()), ("faster",),
            evidence("compiled, policy step eager / compiled, iteration", rows))
