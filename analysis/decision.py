"""The answer a reader can act on (issue 33): one row per regime the study measured, the framework that was
faster there (each represented, in each pair of runs, by its variant fastest in the other pairs), how much
longer the other took, with its interval or range, the runs and hosts behind it, and the same over a run of
RUN_LENGTH env steps; and the one sentence README opens with, written from the rows."""

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .agents import AGENT_NAMES, PER_AGENT, num_agents
from .cpuenv import defaults_only
from . import dqn
from .expensive import ITERATION
from .gpu import GPU_COUNTS, SCALE_TORCH, num_envs, on_gpu, precision
from .output import NAMES
from .tunesweep import largest, per_trial, sweeps
from .target import LEARNING, SHARE, pair_targets, study_targets, time_to
from .stats import MIN_REPEATS, STEADY_FROM, below, geomean, pair_ratios, ratio_cell, ratio_row, repeat_of, startup

JAX_ENV = ("linen", "nnx", "nnx_cached", "equinox", "torch", "torch_compile")  # the scripts as meant to run
OWN_ENV = ("linen", "nnx", "torch-torchenv", "torch_compile-torchenv")  # each steps the env in its own language
# a CPU env in Gymnasium's loop and through EnvPool: eager, compiled (and its policy step eager), Linen
LOOP = ("torch_gymnasium", "torch_compile_gymnasium", "torch_compile_gymnasium-update", "linen_gymnasium")
ENVPOOL = ("torch_gymnasium-envpool", "torch_compile_gymnasium-envpool", "torch_compile_gymnasium-envpool-update",
           "linen_gymnasium-envpool")
DQN = ("dqn_linen", "dqn_nnx", "dqn_equinox", "dqn_torch", "dqn_torch-host", "dqn_torch_compile",
       "dqn_torch_compile-host")  # each torch script with its buffer on the device and on the host
DQN_OWN = ("dqn_linen", "dqn_nnx", "dqn_equinox", "dqn_torch-torchenv", "dqn_torch_compile-torchenv")
DQN_CPU = ("dqn_torch_gymnasium", "dqn_torch_gymnasium-host", "dqn_linen_gymnasium", "dqn_linen_gymnasium-host")
OFFPOLICY = ("linen", "nnx", "equinox", "torch", "torch-host", "torch_compile", "torch_compile-host")  # TD3's, SAC's
OFFPOLICY_OWN = ("linen", "nnx", "equinox", "torch-torchenv", "torch_compile-torchenv")
RUN_LENGTH = 1_000_000  # env steps (per agent): the run whose whole time the table also compares


def run_of_length(run) -> float | None:
    """The seconds a run of RUN_LENGTH env steps takes: its start-up, iteration 0 (compilation), iterations
    1..7 as measured, then its steady iteration for the rest (per agent for the agent scripts)."""
    if "learning_starts" in run.info["args"]:  # DQN: an iteration is log-frequency env steps, filling then training
        return dqn.run_length(run, RUN_LENGTH)
    _, t, _ = run.series("time/iteration")
    rest, start = ITERATION(run), startup(run)
    if rest is None or start is None:
        return None
    a = run.info["args"]
    iterations = math.ceil(RUN_LENGTH / (a.get("num_envs", 32) * a.get("num_steps", 256)))
    measured = float(t[:min(iterations, STEADY_FROM)].sum())  # at 4,096 envs one iteration is the whole run
    return (start + measured + rest * max(0, iterations - STEADY_FROM)) / num_agents(run)


def framework(variant: str) -> str:
    base = variant.split("_", 1)[1] if variant.startswith(("dqn_", "td3_", "sac_")) else variant  # the algorithm off
    return "PyTorch" if base.startswith("torch") else "JAX"


@dataclass
class Regime:
    name: str
    condition: str  # in words, what a reader checks against their project
    experiment: str  # or experiments, "headline, exp1": the first of them with runs to keep (the newer first)
    envs: tuple  # the envs it holds, fixed here: a run on any other env is not this regime's
    models: tuple = ("small",)
    variants: tuple | None = None  # the variants it compares (None: every variant the experiment ran)
    also: Callable | None = None  # what else a run must be (a GPU run's matmul precision)
    value: Callable = ITERATION  # the time compared: the steady iteration (per agent for agents)
    setup: str = ""  # rows with one setup (the same envs and scripts at another model size) count once
    learning: str | None = None  # the experiment whose runs learn for a whole run: time to the target return
    hosts: str = ""  # bench.sh hosts's subfolder: this regime's one setup, run on every host type (analysis/hosts.py)

    def keep(self, run) -> bool:
        return (run.env_id in self.envs and run.model in self.models
                and (self.variants is None or run.variant in self.variants) and (self.also is None or self.also(run)))


def most_agents(runs) -> list:
    """The agents runs at the largest N that every batched variant ran in at least MIN_REPEATS repeats."""
    batched = [r for r in runs if "num_agents" in r.info["args"]]
    counts = [n for n in sorted({num_agents(r) for r in batched}, reverse=True)
              if min(len({repeat_of(r) for r in batched if num_agents(r) == n and r.variant == v})
                     for v in {r.variant for r in batched}) >= MIN_REPEATS]
    return [r for r in batched if counts and num_agents(r) == counts[0]]


JAX_ENVS = ("CartPole-v1", "Acrobot-v1", "Breakout-MinAtar", "Asterix-MinAtar")  # the headline's
TORCH_TWINS = ("CartPole-v1", "Acrobot-v1", "Pendulum-v1")  # the envs in torch the study ran
REGIMES = [
    Regime("JAX env, small model", "the env is JAX code (Gymnax), which PyTorch steps through DLPack, 64-wide MLP",
           "headline, exp1", JAX_ENVS, setup="JAX env", learning="headline", hosts="jax-env"),
    Regime("JAX env, medium model", "the same, 256-wide MLP", "headline, exp1", JAX_ENVS, ("medium",), setup="JAX env",
           learning="headline"),
    Regime("each framework's own env, small model", "JAX steps Gymnax, PyTorch the same envs written in torch "
           "(CartPole-v1, Acrobot-v1, Pendulum-v1), 64-wide MLP", "torchenv", TORCH_TWINS, variants=OWN_ENV,
           setup="own env", hosts="own-env"),
    Regime("each framework's own env, medium model", "the same, 256-wide MLP", "torchenv", TORCH_TWINS, ("medium",),
           OWN_ENV, setup="own env"),
    Regime("CPU env, Gymnasium's loop", "a Python env stepped by Gymnasium's SyncVectorEnv, small model",
           "cpucompile, cpuenv", ("CartPole-v1", "Acrobot-v1", "Breakout-MinAtar"), variants=LOOP, hosts="loop"),
    Regime("CPU env, EnvPool", "a C++ env batch (EnvPool), small model", "cpucompile, cpuenv",
           ("CartPole-v1", "Acrobot-v1"), variants=ENVPOOL, hosts="envpool"),
    Regime("expensive JAX env", "Craftax: a JAX env whose step costs more than a small model", "expensive",
           ("Craftax-Classic-Symbolic-v1", "Craftax-Symbolic-v1"), hosts="craftax"),
    Regime("many agents, one process", "N agents trained at once (vmap, torch.func), the largest N measured, "
           "time per agent", "agents", ("CartPole-v1",), value=PER_AGENT, hosts="many-agents"),
    Regime("continuous actions, JAX env", "Pendulum-v1 and MountainCarContinuous-v0 in Gymnax, a Gaussian policy, "
           "small model", "continuous", ("Pendulum-v1", "MountainCarContinuous-v0"), variants=JAX_ENV,
           learning="continuous-learning"),
    Regime("continuous actions, MuJoCo", "HalfCheetah-v5 and Hopper-v5, MuJoCo's C engine in Gymnasium's loop, "
           "small model", "cpucompile, continuous", ("HalfCheetah-v5", "Hopper-v5"), variants=LOOP,
           learning="continuous-learning", hosts="mujoco"),
    Regime("pixels, JAX env", "MinAtar's 10x10 images, the CNN (JAX convolving on a CPU as patches times the kernel, "
           "the scripts' way around XLA's slow convolution gradient)", "pixels", ("Breakout-MinAtar", "Asterix-MinAtar"),
           ("cnn",), JAX_ENV, learning="pixels-learning", hosts="minatar-cnn"),
    Regime("pixels, Atari", "84x84 Atari frames through EnvPool, the Nature CNN (JAX's as patches, as above), "
           "CleanRL's Atari batch",
           "cpucompile, pixels", ("Breakout-v5", "Pong-v5"), ("cnn",), ENVPOOL, hosts="atari"),
    Regime("DQN, JAX env", "DQN (CleanRL's dqn.py) on CartPole-v1 in Gymnax, an update every 10 env steps, each "
           "framework's replay buffer where it was fastest (device or host)", "dqn", ("CartPole-v1",), variants=DQN,
           also=lambda r: dqn.at(r, 10), value=dqn.steady, learning="dqn-learning", hosts="dqn-jax"),
    Regime("DQN, an update every env step", "the same, --train-frequency 1: the update's cost dominates", "dqn",
           ("CartPole-v1",), variants=DQN, also=lambda r: dqn.at(r, 1), value=dqn.steady),
    Regime("DQN, many envs", "the same, PureJaxRL's shape: 10 envs stepped at once, an update per vector step", "dqn",
           ("CartPole-v1",), variants=DQN, also=lambda r: dqn.at(r, dqn.MANY, dqn.MANY), value=dqn.steady),
    Regime("DQN, each framework's own env", "the same DQN, JAX stepping Gymnax, PyTorch the same CartPole-v1 written "
           "in torch", "dqn", ("CartPole-v1",), variants=DQN_OWN, also=lambda r: dqn.at(r, 10),
           value=dqn.steady),
    Regime("DQN, CPU env", "the same DQN on CartPole-v1's Gymnasium twin, a Python loop of env steps (CleanRL's dqn.py "
           "and dqn_jax.py setups), an update every 10 env steps", "dqn", ("CartPole-v1",), variants=DQN_CPU,
           also=lambda r: dqn.at(r, 10), value=dqn.steady, learning="dqn-learning", hosts="dqn-cpu"),
    *(Regime(f"{alg}, JAX env", f"{alg} (CleanRL's {script}) on Pendulum-v1 in Gymnax, an update every env step, "
             "each framework's replay buffer where it was fastest (device or host)", "offpolicy", ("Pendulum-v1",),
             variants=tuple(f"{alg.lower()}_{v}" for v in OFFPOLICY), value=dqn.steady, learning="offpolicy",
             hosts=alg.lower())
      for alg, script in (("TD3", "td3_continuous_action.py"), ("SAC", "sac_continuous_action.py"))),
    *(Regime(f"{alg}, each framework's own env", f"the same {alg}, JAX stepping Gymnax, PyTorch the same Pendulum-v1 "
             "written in torch", "offpolicy", ("Pendulum-v1",), variants=tuple(f"{alg.lower()}_{v}" for v in OFFPOLICY_OWN),
             value=dqn.steady) for alg in ("TD3", "SAC")),
    Regime("tuning sweep", "a random search of N configurations of PPO (learning rate, entropy and clipping "
           "coefficients), each a short run of the small model, on CartPole-v1 and Pendulum-v1, the largest N "
           "measured: one process per trial (named by the framework) or one process of N agents (named by its vmap); "
           "wall time per trial", "tunesweep", ("CartPole-v1", "Pendulum-v1"), value=per_trial),
    Regime("on a GPU, JAX env, small model", "as the first regime, on an NVIDIA GPU", "gpu", JAX_ENVS,
           also=lambda r: precision(r) == "float32"),
    *(Regime(f"on a GPU, each framework's own env, {n:,} envs", f"CartPole-v1, small model, {n:,} envs on an NVIDIA "
             "GPU: Linen, and PyTorch compiled with its env in torch", "gpuscale", ("CartPole-v1",),
             variants=("linen", SCALE_TORCH), also=lambda r, n=n: on_gpu(r) and num_envs(r) == n) for n in GPU_COUNTS),
]


def host_type(run) -> str:
    """The machine a run's time depends on: a GPU by name; a CPU by its model name, family and model (lscpu's),
    widest vector unit and cores, as far as run.json recorded them."""
    info = run.info
    if info.get("device", "cpu") != "cpu":
        return info["device"]
    flags, (family, model) = info.get("cpu_flags"), info.get("cpu_family_model") or (None, None)
    vector = "AVX-512" if flags and "avx512f" in flags else "AVX2" if flags else "vector units not recorded"
    kind = f"family {family} model {model}, " if family and model else ""
    cores = f", {info['cores']} cores" if info.get("cores") else ""
    return f"{info.get('cpu') or 'CPU'} ({kind}{vector}{cores})"


def cell(run) -> tuple:
    """What two runs share to be paired: env, model and repeat."""
    return run.env_id, run.model, *map(str, repeat_of(run))


def fastest(runs, fw: str, value) -> str:
    """The framework's variant with the lowest geometric mean of its time over a common yardstick's."""
    variants = sorted({r.variant for r in runs})
    yardstick = variants[0]
    over = {v: 1.0 if v == yardstick else geomean([x for xs in pair_ratios(runs, v, yardstick, value).values()
                                                    for x in xs] or [float("nan")]) for v in variants}
    return min((v for v in variants if framework(v) == fw), key=lambda v: (math.isnan(over[v]), over[v]))


def decide(runs, value) -> dict | None:
    """PyTorch's time over JAX's in each cell (env and repeat), each framework represented there by the
    variant that was fastest in the other cells: the runs that choose a variant never measure it. The
    framework whose representatives took less time overall wins, unless the ratio's interval or range
    (over envs, or over repeats on one env) holds 1: then neither is faster beyond the spread."""
    if len({framework(r.variant) for r in runs}) < 2:
        return None
    cells = sorted({cell(r) for r in runs if value(r) is not None})
    chosen, per_env, missed, paired = {}, {}, Counter(), 0
    for c in cells:
        others = [r for r in runs if cell(r) != c]
        if len({framework(r.variant) for r in others}) < 2:
            continue
        here = {r.variant: value(r) for r in runs if cell(r) == c and value(r)}
        pick = {fw: fastest(others, fw, value) for fw in ("JAX", "PyTorch")}
        ran = {r.variant for r in runs if cell(r) == c}
        if all(v in ran for v in pick.values()):  # a run with no value: too short, or it never reached a target
            paired += 1
            missed.update(fw for fw, v in pick.items() if v not in here)
        if all(v in here for v in pick.values()):
            chosen[c] = pick
            per_env.setdefault(c[0], []).append(here[pick["PyTorch"]] / here[pick["JAX"]])
    per_env = [np.array(r) for r in per_env.values()]
    if len({c[2] for c in chosen}) < MIN_REPEATS:  # c[2]: the seed, bench.sh's repeat; whatever the envs
        return None
    row = ratio_row(per_env)
    picks = {fw: Counter(pick[fw] for pick in chosen.values()).most_common() for fw in ("JAX", "PyTorch")}
    winner, loser = ("JAX", "PyTorch") if row["geomean"] >= 1 else ("PyTorch", "JAX")
    if winner == "PyTorch":  # the loser's time over the winner's
        row = ratio_row([1 / r for r in per_env])
    return {"winner": picks[winner][0][0], "loser": picks[loser][0][0], "picks": picks, "row": row, "missed": missed,
            "paired": paired,
            "tie": not below(1, row), "devices": {r.info.get("device") for r in runs},
            "runs": sum(cell(r) in chosen and r.variant in chosen[cell(r)].values() for r in runs),
            "hosts": sorted({host_type(r) for r in runs if cell(r) in chosen})}


def to_target(regime: Regime, by_experiment: dict, targets: dict) -> dict | str | None:
    """decide() on the seconds from a process's start to the iteration that reached its env's target return
    (results/targets.json's), over the regime's learning runs: a pair whose pick never reached it is counted
    as missed, not dropped unsaid."""
    if regime.learning is None:
        return None
    if not (runs := [r for r in by_experiment.get(regime.learning, []) if regime.keep(r)]):
        return None
    if regime.learning not in LEARNING:  # another algorithm (DQN): a target of its own, from its own runs
        targets = own_targets(runs)
    value = lambda r: time_to(r, t["target"]) if (t := targets.get((r.env_id, r.model))) else None
    if decided := decide(runs, value):
        return decided
    reached = {fw: f"{sum(value(r) is not None for r in mine)} of {len(mine)}" for fw in ("JAX", "PyTorch")
               if (mine := [r for r in runs if framework(r.variant) == fw])}
    return (f"not decided: fewer than {MIN_REPEATS} pairs where both picks reached it (runs that did: "
            + ", ".join(f"{fw} {n}" for fw, n in reached.items()) + ")")


def own_targets(runs) -> dict:
    """Each (env, model)'s target from these runs alone, as study_targets gives PPO's."""
    return {pair: {"target": round(target, 2)} for pair, (target, _) in pair_targets(runs).items()}


SELECT = {"agents": most_agents, "tunesweep": lambda runs: largest(sweeps(runs)[0])}  # what a regime compares


def regime_runs(regime: Regime, by_experiment: dict, host: str | None = None) -> list:
    """The runs a regime compares (on one host type, if given): those of the first of its experiments with any."""
    on = lambda runs: [r for r in runs if host is None or host_type(r) == host]
    kept = ((e, [r for r in SELECT.get(e, list)(on(by_experiment.get(e, []))) if regime.keep(r)])
            for e in regime.experiment.split(", "))
    experiment, runs = next(((e, runs) for e, runs in kept if runs), (None, []))
    return defaults_only(runs) if experiment == "cpuenv" else runs


def decision_rows(by_experiment: dict, targets: dict | None = None) -> list[dict]:
    rows, targets = [], study_targets(by_experiment) if targets is None else targets
    for regime in REGIMES:
        if runs := regime_runs(regime, by_experiment):
            rows.append({"regime": regime, **(decide(runs, regime.value)
                                              or {"why": undecided(runs, regime.value), "runs": len(runs)}),
                         "whole": decide(runs, run_of_length), "target": to_target(regime, by_experiment, targets)})
    return rows


def undecided(runs, value) -> str:
    """Why a regime that ran has no verdict."""
    if len(ran := {framework(r.variant) for r in runs}) < 2:
        return f"not decided: only {ran.pop()} ran"
    if all(value(r) is None for r in runs):
        return "not decided: its runs are too short for a steady state"
    return f"not decided: fewer than {MIN_REPEATS} repeats of each compared variant"


def label(variant: str) -> str:
    """The framework as a reader knows it (the regime says how the env is stepped): linen_gymnasium-envpool is Linen."""
    base = variant.replace("_gymnasium", "").split("-")[0]
    name = AGENT_NAMES.get(variant) or NAMES.get(variant, NAMES.get(base, variant))
    return name + (", its policy step eager" if variant.endswith("-update") else "")


def answer(rows: list[dict], flips: tuple = ()) -> str:
    """The sentences: on a CPU, and on a GPU, in how many of the decided regimes (and independent setups)
    each framework was fastest, by how much, and in how many neither was beyond the spread. A regime in flips
    (its verdict differs between the host types that ran it: analysis/hosts.py) counts as decided on none."""
    open_ = sum("winner" not in row for row in rows)
    flipped = [row["regime"].name for row in rows if "winner" in row and row["regime"].name in flips]
    decided = [row for row in rows if "winner" in row and row["regime"].name not in flips]
    kind = lambda row: "GPU" if row["devices"] - {"cpu"} else "CPU"
    sentences = [f"On a {k}, {tally([row for row in decided if kind(row) == k])}." for k in ("CPU", "GPU")
                 if any(kind(row) == k for row in decided)]
    if flipped:
        one = len(flipped) == 1
        sentences.append(f"{'One' if one else len(flipped)} more depend{'s' * one} on the CPU, {'its' if one else 'their'} "
                         f"verdict differing between the host types that ran {'it' if one else 'them'} ({'; '.join(flipped)}).")
    return " ".join(sentences) + (f" {open_} more regime{'s' * (open_ > 1)} ran without a verdict (the table says why)."
                                  if open_ else "")


def tally(rows: list[dict]) -> str:
    """How many of these decided regimes each framework won, by how much, and the ties, as one clause."""
    ties = [row for row in rows if row["tie"]]
    by = {fw: [row for row in rows if framework(row["winner"]) == fw and not row["tie"]] for fw in ("JAX", "PyTorch")}
    said = {"JAX": "a JAX framework", "PyTorch": "PyTorch"}
    setups = lambda rows: len({row["regime"].setup or row["regime"].name for row in rows})
    parts = []
    span = lambda xs: f"{min(xs):.2f}x" + (f" to {max(xs):.2f}x" if len(xs) > 1 else "")
    for fw in sorted(by, key=lambda fw: -len(by[fw])):
        if by[fw]:
            other = "PyTorch" if fw == "JAX" else "JAX"
            regimes = f"{len(by[fw])} of the {len(rows)} regimes decided" if len(by[fw]) > 1 else (
                f"one: {by[fw][0]['regime'].name}" if len(rows) > 1 else f"the one decided: {by[fw][0]['regime'].name}")
            once = (f"{setups(by[fw])} setups, a small and a medium row on the same envs counted once; "
                    if setups(by[fw]) < len(by[fw]) else "")
            # the same regimes over a whole run (start-up and compilation included), the other's time over fw's
            wholes = [w["row"]["geomean"] if framework(w["winner"]) == fw else 1 / w["row"]["geomean"]
                      for row in by[fw] if isinstance(w := row.get("whole"), dict)]
            whole = f", {span(wholes)} over a modelled run of {RUN_LENGTH / 1e6:g}M env steps" if wholes else ""
            parts.append(f"{said[fw]} was the fastest in {regimes} ({once}{other}'s fastest variant took "
                         f"{span([row['row']['geomean'] for row in by[fw]])} as long per steady iteration{whole})")
    if ties:
        parts.append(f"in {len(ties) if len(ties) > 1 else 'one'} ({'; '.join(row['regime'].name for row in ties)}) "
                     "neither was faster beyond the spread over envs or repeats")
    return "; ".join(parts)


def verdict_cell(decided: dict | str | None, why_none: str = "–") -> str:
    """Another decision on the same regime (a whole run, the time to a target) in one cell, with the pairs
    where a framework's pick had no time (it never reached the target)."""
    if not isinstance(decided, dict):
        return decided or why_none
    first = label(decided["winner"]) if not decided["tie"] else (
        f"neither beyond the spread ({label(decided['winner'])} by the mean)")
    missed = "".join(f"; {fw}'s pick never reached it in {n} of {decided['paired']} pairs"
                     for fw, n in sorted(decided["missed"].items()))
    return f"{first}: {label(decided['loser'])} / {label(decided['winner'])} {ratio_cell(decided['row'])}{missed}"


def fastest_cell(row: dict) -> str:
    """The winner as a reader knows it, how often it was the pick where the pick varied, or a tie."""
    picks = row["picks"][framework(row["winner"])]
    name = label(row["winner"]) if len(picks) == 1 else "; ".join(
        f"{label(v)} ({n}{f' of {sum(n for _, n in picks)} pairs' if i == 0 else ''})" for i, (v, n) in enumerate(picks))
    return f"neither beyond the spread ({name} by the mean)" if row["tie"] else name


def decision_section(by_experiment: dict, out):
    targets = study_targets(by_experiment)
    rows = decision_rows(by_experiment, targets)
    learning = {}  # experiment: {env: iterations}
    for regime in REGIMES:
        for env, model in ((e, m) for e in regime.envs for m in regime.models if (e, m) in targets and regime.learning in LEARNING):
            learning.setdefault(regime.learning, {})[env] = targets[env, model]["iterations"]
    timed = "; ".join(f"{experiment} ({', '.join(sorted(envs))}; {'/'.join(map(str, sorted(set(envs.values()))))} "
                      "iterations)" for experiment, envs in sorted(learning.items()))
    if not any("winner" in row for row in rows):
        return
    from .hosts import flips, host_rows, hosts_section  # the same regimes on each host type that ran them
    by_host = host_rows(by_experiment)
    out.heading("The answer by regime")
    out.text([answer(rows, flips(by_host))], block="answer")
    out.table("Which framework is fastest where: in each regime, each framework represented in every pair (env and "
              "repeat) by its variant that was fastest in the other pairs, and the slower one's time over the faster "
              "one's (steady iterations)",
              ["regime", "when", "fastest", "the other framework's / the fastest's", "time, A / B", "runs (host)"],
              [[row["regime"].name, row["regime"].condition, fastest_cell(row),
                f"{label(row['loser'])} / {label(row['winner'])}", ratio_cell(row["row"]),
                f"{row['runs']} ({', '.join(row['hosts'])})"]
               if "winner" in row else [row["regime"].name, row["regime"].condition, "–", "–", row["why"], row["runs"]]
               for row in rows],
              block="decision",
              note="A variant is chosen in the pairs it is not measured in (choosing on the measured runs favours "
                   "JAX, which has four). The ratio: geometric mean over pairs (results.md's tables give medians); "
                   "fastest where its interval (5 envs or more) or range (of env means, or of one env's repeats) "
                   "lies above 1. Runs: those behind the ratio, or all the regime's.")
    out.table("Where compilation pays: the same regimes over a whole run of a stated length, and to a good policy",
              ["regime", f"a run of {RUN_LENGTH / 1e6:g}M env steps, modelled with start-up and compilation: fastest, A / B",
               "time from the start to the target return: fastest, A / B"],
              [[row["regime"].name, verdict_cell(row["whole"]), verdict_cell(row["target"], "no learning runs")]
               for row in rows],
              block="decision-length",
              note=f"{RUN_LENGTH / 1e6:g}M env steps: start-up, iterations 0..{STEADY_FROM - 1} as measured (DQN's, "
                   "TD3's and SAC's: up to learning starts), then the steady iteration. Target: "
                   f"{SHARE:.0%} of the way from the runs' start to the best variant's median final return "
                   f"(results/targets.json), timed on {timed}; DQN's, TD3's and SAC's from their own (dqn-learning, "
                   "offpolicy); a pick that never reached it is counted, outside the ratio.")
    hosts_section(by_host, by_experiment, out)
