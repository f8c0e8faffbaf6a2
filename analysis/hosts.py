"""The answer on more than one CPU (issue 90): each regime of the decision table decided again on every host type
that ran it (from bench.sh hosts's runs where a host has them, else from the study's own), a mark where the verdict
differs between host types, and what calibrate.py measured on each: one wide layer (the GEMM) and one small
minibatch step (mostly per-call cost), the two things a host changes under a framework."""

from collections import Counter

import numpy as np

from .decision import REGIMES, SELECT, decide, framework, host_type, label, regime_runs, undecided
from .stats import ratio_cell

DEPENDS = "depends on the CPU"


def recorded(run) -> bool:
    """Whether run.json names the CPU's family and model and its vector units (older runs did not): a host type."""
    return run.info.get("device", "cpu") == "cpu" and bool(run.info.get("cpu_family_model")) and bool(
        run.info.get("cpu_flags"))


def own_runs(regime, hosts_runs: list, host: str) -> list:
    """A regime's runs on one host type from bench.sh hosts: its subfolder's, selected as its experiment's are."""
    mine = [r for r in hosts_runs if regime.hosts and r.path.parent.name == regime.hosts and host_type(r) == host]
    return [r for r in SELECT.get(regime.experiment.split(", ")[0], list)(mine) if regime.keep(r)]


def verdict(decided: dict) -> str:
    return "neither" if decided["tie"] else framework(decided["winner"])


def host_rows(by_experiment: dict) -> list[dict]:
    """Per CPU regime: {host type: decide()'s dict, or why not} for every host type whose runs hold the regime."""
    hosts_runs, rows = by_experiment.get("hosts", []), []
    for regime in REGIMES:
        if regime.experiment.startswith("gpu"):
            continue
        study = [r for e in regime.experiment.split(", ") for r in by_experiment.get(e, [])]
        cells = {}
        for host in sorted({host_type(r) for r in study + hosts_runs if recorded(r)}):
            runs = own_runs(regime, hosts_runs, host) or regime_runs(regime, by_experiment, host)
            if runs:
                cells[host] = decide(runs, regime.value) or undecided(runs, regime.value)
        if cells:
            decided = [verdict(c) for c in cells.values() if isinstance(c, dict)]
            rows.append({"regime": regime, "cells": cells, "across": DEPENDS if len(set(decided)) > 1 else
                         "agrees" if len(decided) > 1 else "decided on one host type" if decided else "not decided"})
    return rows


def flips(rows: list[dict]) -> tuple:
    """The regimes whose verdict differs between the host types that decided them."""
    return tuple(row["regime"].name for row in rows if row["across"] == DEPENDS)


def host_cell(c) -> str:
    if not isinstance(c, dict):
        return c
    if c["tie"]:
        return f"neither beyond the spread ({label(c['winner'])} by the mean, {ratio_cell(c['row'])})"
    return f"{label(c['winner'])}: {label(c['loser'])} took {ratio_cell(c['row'])}"


def calibrations(runs) -> dict:
    """{host type: medians of its sessions' calibrations}: ms of one 1024-wide layer and one small minibatch step."""
    by = {}
    for r in runs:
        c = r.calibration or {}
        if recorded(r) and all("large" in c.get("layer_seconds", {}).get(fw, {})
                               and fw in c.get("minibatch_step_seconds", {}) for fw in ("torch", "jax")):
            by.setdefault(host_type(r), {})[r.info.get("session")] = c
    med = lambda cals, get: float(np.median([get(c) for c in cals])) * 1e3
    frameworks = ("torch", "jax")
    return {host: {"sessions": len(cals),
                   **{f"layer {fw}": med(cals.values(), lambda c: c["layer_seconds"][fw]["large"]) for fw in frameworks},
                   **{f"step {fw}": med(cals.values(), lambda c: c["minibatch_step_seconds"][fw]) for fw in frameworks}}
            for host, cals in by.items()}


def why(row: dict, measured: dict) -> str:
    """One flipping regime: each host's verdict beside what calibrate.py measured there."""
    parts = []
    for host, c in row["cells"].items():
        if not isinstance(c, dict):
            continue
        said = (f"on {host} neither was faster beyond the spread ({label(c['winner'])} by the mean, "
                f"{ratio_cell(c['row'])})" if c["tie"] else f"on {host} {verdict(c)} was faster ({label(c['winner'])}; "
                f"{label(c['loser'])} took {ratio_cell(c['row'])})")
        if m := measured.get(host):
            said += (f", where PyTorch's 1024-wide layer took {m['layer torch'] / m['layer jax']:.2f}x JAX's and its "
                     f"small minibatch step {m['step torch'] / m['step jax']:.2f}x")
        parts.append(said)
    return f"- {row['regime'].name}: " + "; ".join(parts) + "."


def summary(rows: list[dict]) -> str:
    """The section's first sentence: the host types, and which regimes agree or flip between them."""
    runs = Counter()
    for row in rows:
        for host, c in row["cells"].items():
            runs[host] += c["runs"] if isinstance(c, dict) else 0
    several = [row for row in rows if len([c for c in row["cells"].values() if isinstance(c, dict)]) > 1]
    flipped = [row["regime"].name for row in several if row["across"] == DEPENDS]
    hosts = "; ".join(f"{host}, {n} runs behind verdicts" for host, n in runs.most_common())
    if not several:
        return f"Every regime was decided on one host type only ({hosts})."
    return (f"{len(several)} regimes were decided on more than one host type ({hosts}): "
            + (f"{len(several) - len(flipped)} agree on every one, and {len(flipped)} flip ({'; '.join(flipped)}), "
               "so those count as decided on none." if flipped else "the verdict is the same on every one."))


def hosts_section(rows: list[dict], by_experiment: dict, out):
    """host_rows()'s table (decision_section computes it once, for README's answer too), and each host's calibration."""
    if not rows:
        return
    hosts = sorted({h for row in rows for h in row["cells"]},
                   key=lambda h: -sum(isinstance(row["cells"].get(h), dict) for row in rows))
    out.heading("The answer by host")
    out.text([summary(rows)], block="hosts-answer")
    out.table("Each regime decided again on each host type that ran it: the faster framework's pick and the other's "
              "time over it", ["regime", *hosts, "across host types"],
              [[row["regime"].name, *(host_cell(row["cells"][h]) if h in row["cells"] else "–" for h in hosts),
                row["across"]] for row in rows], block="decision-hosts",
              note="A host type is a CPU's model name, family and model (lscpu's), widest vector unit and cores. Its "
                   "cell comes from its bench.sh hosts runs where it has them (one setup per regime, each framework's "
                   "pick and its closest rival), else from the study's runs of that regime, decided as README's "
                   "decision table decides (runs whose run.json names no CPU family and model are left out). "
                   "Depends on the CPU: the verdict (JAX, PyTorch or neither) differs between host types. Many agents: the largest N each host type ran (bench.sh hosts runs 16).")
    measured = calibrations([r for runs in by_experiment.values() for r in runs])
    out.table("What a host changes under a framework: calibrate.py's medians over each host type's sessions (ms)",
              ["host type", "sessions", "1024-wide layer, torch", "jax", "torch / jax", "small minibatch step, torch",
               "jax", "torch / jax"],
              [[host, m["sessions"], f"{m['layer torch']:.2f}", f"{m['layer jax']:.2f}",
                f"{m['layer torch'] / m['layer jax']:.2f}", f"{m['step torch']:.2f}", f"{m['step jax']:.2f}",
                f"{m['step torch'] / m['step jax']:.2f}"] for host, m in sorted(measured.items())],
              block="hosts-calibration")
    flipping = [row for row in rows if row["across"] == DEPENDS]
    out.text([why(row, measured) for row in flipping] or ["No regime's verdict differs between the host types that "
                                                          "decided it."], block="hosts-why")
