"""The answer a reader can act on (issue 33): one row per regime the study measured, the framework whose
fastest variant was fastest there, and how much longer the other framework's fastest variant took, with
its interval or range and the runs behind it; and the one sentence README opens with, written from the rows."""

from dataclasses import dataclass
from typing import Callable

from .agents import AGENT_NAMES, PER_AGENT, num_agents
from .cpuenv import defaults_only
from .expensive import ITERATION
from .gpu import precision
from .output import NAMES
from .stats import geomean, pair_ratios, ratio_cell, ratio_row, repeat_of

JAX_ENV = ("linen", "nnx", "nnx_cached", "equinox", "torch", "torch_compile")  # the scripts as meant to run
OWN_ENV = ("linen", "nnx", "torch-torchenv", "torch_compile-torchenv")  # each steps the env in its own language
# a CPU env in Gymnasium's loop and through EnvPool: eager, compiled (and its policy step eager), Linen
LOOP = ("torch_gymnasium", "torch_compile_gymnasium", "torch_compile_gymnasium-update", "linen_gymnasium")
ENVPOOL = ("torch_gymnasium-envpool", "torch_compile_gymnasium-envpool", "torch_compile_gymnasium-envpool-update",
           "linen_gymnasium-envpool")
MIN_REPEATS = 3  # a regime is decided only by pairs from at least this many repeats


def framework(variant: str) -> str:
    return "PyTorch" if variant.startswith("torch") else "JAX"


@dataclass
class Regime:
    name: str
    condition: str  # in words, what a reader checks against their project
    experiment: str  # or experiments, "headline, exp1": the first of them with runs to keep (the newer first)
    keep: Callable  # which of the experiment's runs
    value: Callable = ITERATION  # the time compared: the steady iteration (per agent for agents)


def most_agents(runs) -> list:
    """The agents runs at the largest N that every batched variant ran in at least MIN_REPEATS repeats."""
    batched = [r for r in runs if "num_agents" in r.info["args"]]
    counts = [n for n in sorted({num_agents(r) for r in batched}, reverse=True)
              if min(len({repeat_of(r) for r in batched if num_agents(r) == n and r.variant == v})
                     for v in {r.variant for r in batched}) >= MIN_REPEATS]
    return [r for r in batched if counts and num_agents(r) == counts[0]]


REGIMES = [
    Regime("JAX env, small model", "the env is JAX code (Gymnax), which PyTorch steps through DLPack, 64-wide MLP",
           "headline, exp1", lambda r: r.model == "small"),
    Regime("JAX env, medium model", "the same, 256-wide MLP", "headline, exp1", lambda r: r.model == "medium"),
    Regime("each framework's own env, small model", "JAX steps Gymnax, PyTorch the same envs written in torch "
           "(CartPole-v1, Acrobot-v1, Pendulum-v1), 64-wide MLP", "torchenv",
           lambda r: r.model == "small" and r.variant in OWN_ENV),
    Regime("each framework's own env, medium model", "the same, 256-wide MLP", "torchenv",
           lambda r: r.model == "medium" and r.variant in OWN_ENV),
    Regime("CPU env, Gymnasium's loop", "a Python env stepped by Gymnasium's SyncVectorEnv, small model",
           "cpucompile, cpuenv", lambda r: r.model == "small" and r.variant in LOOP and r.env_id in (
               "CartPole-v1", "Acrobot-v1", "Breakout-MinAtar")),
    Regime("CPU env, EnvPool", "a C++ env batch (EnvPool), small model", "cpucompile, cpuenv",
           lambda r: r.model == "small" and r.variant in ENVPOOL and r.env_id == "CartPole-v1"),
    Regime("expensive JAX env", "Craftax: a JAX env whose step costs more than a small model", "expensive",
           lambda r: r.model == "small" and r.env_id.startswith("Craftax")),
    Regime("many agents, one process", "N agents trained at once (vmap, torch.func), the largest N measured, "
           "time per agent", "agents", None, PER_AGENT),
    Regime("continuous actions, JAX env", "Pendulum-v1 in Gymnax, a Gaussian policy, small model", "continuous",
           lambda r: r.model == "small" and r.env_id == "Pendulum-v1" and r.variant in JAX_ENV),
    Regime("continuous actions, MuJoCo", "HalfCheetah-v5, MuJoCo's C engine in Gymnasium's loop, small model",
           "cpucompile, continuous", lambda r: r.model == "small" and r.variant in LOOP and r.env_id == "HalfCheetah-v5"),
    Regime("pixels, JAX env", "MinAtar's 10x10 images, the CNN", "pixels",
           lambda r: r.model == "cnn" and r.variant in JAX_ENV),
    Regime("pixels, Atari", "84x84 Atari frames through EnvPool, the Nature CNN, CleanRL's Atari batch",
           "cpucompile, pixels", lambda r: r.env_id == "Breakout-v5"),
    Regime("on a GPU, JAX env, small model", "as the first regime, on an NVIDIA GPU", "gpu",
           lambda r: r.model == "small" and precision(r) == "float32"),
]


def decide(runs, value) -> dict | None:
    """The fastest variant of each framework (the lowest geometric mean of its time over a common
    yardstick's), the winner, and the loser's fastest over the winner's fastest, paired by repeat."""
    variants = sorted({r.variant for r in runs})
    if len({framework(v) for v in variants}) < 2:
        return None
    yardstick = variants[0]
    over = {v: 1.0 if v == yardstick else geomean([x for xs in pair_ratios(runs, v, yardstick, value).values()
                                                    for x in xs] or [float("nan")]) for v in variants}
    best = {fw: min((v for v in variants if framework(v) == fw), key=lambda v: over[v]) for fw in ("JAX", "PyTorch")}
    winner, loser = sorted(best.values(), key=lambda v: over[v])
    per_env = [ratios for ratios in pair_ratios(runs, loser, winner, value).values() if len(ratios)]
    if not per_env or max(len(r) for r in per_env) < MIN_REPEATS and len(per_env) < MIN_REPEATS:
        return None
    return {"winner": winner, "loser": loser, "row": ratio_row(per_env), "devices": {r.info.get("device") for r in runs},
            "runs": sum(r.variant in (winner, loser) and value(r) is not None for r in runs)}


def decision_rows(by_experiment: dict) -> list[dict]:
    rows = []
    for regime in REGIMES:
        kept = ((e, most_agents(by_experiment.get(e, [])) if e == "agents" else
                 [r for r in by_experiment.get(e, []) if regime.keep(r)]) for e in regime.experiment.split(", "))
        experiment, runs = next(((e, runs) for e, runs in kept if runs), (None, []))
        if experiment == "cpuenv":
            runs = defaults_only(runs)
        if runs:
            rows.append({"regime": regime, **(decide(runs, regime.value)
                                              or {"why": undecided(runs, regime.value), "runs": len(runs)})})
    return rows


def undecided(runs, value) -> str:
    """Why a regime that ran has no verdict."""
    if len(ran := {framework(r.variant) for r in runs}) < 2:
        return f"not decided: only {ran.pop()} ran"
    if all(value(r) is None for r in runs):
        return "not decided: its runs are too short for a steady state"
    return f"not decided: fewer than {MIN_REPEATS} repeats (or envs) of both frameworks"


def label(variant: str) -> str:
    """The framework as a reader knows it (the regime says how the env is stepped): linen_gymnasium-envpool is Linen."""
    base = variant.replace("_gymnasium", "").split("-")[0]
    return AGENT_NAMES.get(variant) or NAMES.get(variant, NAMES.get(base, variant))


def answer(rows: list[dict]) -> str:
    """The one sentence: in how many of the decided regimes each framework was fastest, and by how much."""
    open_ = sum("winner" not in row for row in rows)
    rows = [row for row in rows if "winner" in row]
    by = {fw: [row for row in rows if framework(row["winner"]) == fw] for fw in ("JAX", "PyTorch")}
    where = "On a CPU, " if set().union(*(row["devices"] for row in rows)) == {"cpu"} else ""
    said = {"JAX": "a JAX framework", "PyTorch": "PyTorch"}
    parts = []
    for fw in sorted(by, key=lambda fw: -len(by[fw])):
        if by[fw]:
            margins = [row["row"]["geomean"] for row in by[fw]]
            spread = f"{min(margins):.2f}x" + (f" to {max(margins):.2f}x" if len(margins) > 1 else "")
            other = "PyTorch" if fw == "JAX" else "JAX"
            regimes = (f"all {len(rows)} regimes decided" if len(by[fw]) == len(rows) else
                       f"{len(by[fw])} of the {len(rows)} regimes decided") if len(by[fw]) > 1 else (
                f"one: {by[fw][0]['regime'].name}")
            parts.append(f"{said[fw]} was the fastest in {regimes} ({other}'s fastest variant took {spread} as long)")
    sentence = "; ".join(parts)
    sentence = where + sentence[0].lower() + sentence[1:] + "." if where else sentence[0].upper() + sentence[1:] + "."
    return sentence + (f" {open_} more regime{'s' * (open_ > 1)} ran without a verdict (the table says why)."
                       if open_ else "")


def decision_section(by_experiment: dict, out):
    rows = decision_rows(by_experiment)
    if not any("winner" in row for row in rows):
        return
    out.heading("The answer by regime")
    out.text([answer(rows)], block="answer")
    out.table("Which framework is fastest where: in each regime, the fastest variant of each framework, and the "
              "slower one's time over the faster one's (steady iterations, paired by repeat)",
              ["regime", "when", "fastest", "the other framework's fastest / the fastest", "time, A / B", "runs"],
              [[row["regime"].name, row["regime"].condition, label(row["winner"]),
                f"{label(row['loser'])} / {label(row['winner'])}", ratio_cell(row["row"]), row["runs"]]
               if "winner" in row else [row["regime"].name, row["regime"].condition, "–", "–", row["why"], row["runs"]]
               for row in rows],
              block="decision",
              note="Intervals are over environments where at least 5 ran; otherwise the range, and the number of envs "
                   "or, on one env, of repeats. Runs: those behind the ratio (both variants'); where a regime is not "
                   "decided, all of its runs.")
