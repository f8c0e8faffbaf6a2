"""On a GPU (issue 34; folder gpu, bench.sh's preset of that name): each framework's time per iteration
against Linen's on the GPU next to the same ratio on the CPU (Experiment 1's runs of the same env and
model, from its shuffled re-run where it ran), where a GPU iteration goes (rollout, update, and iteration 0, the
compilation), and TF32 against full float32 matmuls. And the GPU's own regime (issue 55; folder gpuscale):
Linen against PyTorch compiled with its env in torch, at 32 to 4,096 envs, on the GPU and on the same
machine's CPU, steady and over the whole run."""

from collections import defaultdict

import numpy as np

from .exp1 import REFERENCE
from .expensive import ITERATION, ROLLOUT, UPDATE
from .output import NAMES, fmt, name, variant_order
from .stats import (MIN_REPEATS, first_iteration, median_of, median_range, pair_ratios, repeat_of, sessions_note,
                    total_time)


def ms(x) -> str:
    return fmt(x * 1e3) if x is not None else "–"


def precision(run) -> str:
    return run.info["args"].get("matmul_precision", "float32")


def devices(runs) -> str:
    """The GPUs the runs ran on, or the CPUs where they ran on one."""
    return ", ".join(sorted({d if (d := r.info.get("device", "?")) != "cpu" else r.info.get("cpu", "a CPU") for r in runs}))


def ratios_here_and_there(gpu, cpu, model: str | None = None):
    """{(where, variant): {(env, model): ratios over Linen's}} for the GPU's float32 runs and the CPU's."""
    gpu = [r for r in gpu if precision(r) == "float32"]
    variants = [v for v in variant_order({r.variant for r in gpu}) if v != REFERENCE]
    return variants, {(where, v): pair_ratios(runs, v, REFERENCE, ITERATION)
                      for where, runs in (("GPU", gpu), ("CPU", cpu)) for v in variants}


def ratio_rows(gpu, cpu):
    """Per env and model: Linen's seconds per iteration on each, then each variant's ratio, GPU | CPU."""
    variants, ratios = ratios_here_and_there(gpu, cpu)
    linen = lambda runs, env, model: median_of([r for r in runs if (r.env_id, r.model, r.variant) == (env, model, REFERENCE)
                                                and precision(r) == "float32"], ITERATION)
    cell = lambda where, v, key: median_range(x, ratio=True) if (x := ratios[where, v].get(key)) is not None else "–"
    rows = [[env, model, fmt(linen(gpu, env, model)), fmt(linen(cpu, env, model)),
             *(f"{cell('GPU', v, (env, model))} \\| {cell('CPU', v, (env, model))}" for v in variants)]
            for env, model in sorted({(r.env_id, r.model) for r in gpu if r.variant == REFERENCE})]
    return variants, rows


def split_rows(gpu) -> list[list]:
    """Per env, model and variant (float32): the steady iteration, rollout and update in ms, iteration 0 and the
    whole run in s."""
    rows = []
    for env, model, variant in sorted({(r.env_id, r.model, r.variant) for r in gpu if precision(r) == "float32"},
                                      key=lambda k: (k[0], k[1], variant_order({r.variant for r in gpu}).index(k[2]))):
        sel = [r for r in gpu if (r.env_id, r.model, r.variant) == (env, model, variant) and precision(r) == "float32"]
        rows.append([env, model, variant, len(sel), *(ms(median_of(sel, v)) for v in (ITERATION, ROLLOUT, UPDATE)),
                     fmt(median_of(sel, first_iteration)), fmt(median_of(sel, total_time))])
    return rows


def precision_rows(gpu) -> list[list]:
    """Per env, model and variant run at both precisions in one repeat: the steady iteration and update
    at float32, and TF32's over them."""
    by = defaultdict(dict)
    for r in gpu:
        by[(r.env_id, r.model, r.variant, *map(str, repeat_of(r)))][precision(r)] = r
    pairs = defaultdict(list)
    for (env, model, variant, *_), runs in sorted(by.items()):
        if {"float32", "tf32"} <= runs.keys() and None not in (ITERATION(runs["float32"]), UPDATE(runs["float32"]),
                                                                 ITERATION(runs["tf32"]), UPDATE(runs["tf32"])):
            pairs[(env, model, variant)].append((runs["float32"], runs["tf32"]))
    rows = []
    for (env, model, variant), both in pairs.items():
        over = lambda value: median_range([value(b) / value(a) for a, b in both], ratio=True)
        rows.append([env, model, variant, fmt(np.median([ITERATION(a) for a, _ in both]) * 1e3), over(ITERATION),
                     fmt(np.median([UPDATE(a) for a, _ in both]) * 1e3), over(UPDATE)])
    return rows


def num_envs(run) -> int:
    return run.info["args"]["num_envs"]


def on_gpu(run) -> bool:
    return run.info.get("device", "cpu") != "cpu"


SCALE_TORCH = "torch_compile-torchenv"  # gpuscale's PyTorch against Linen, every count
GPU_COUNTS = (32, 512, 4096)  # bench.sh's gpuscale: the default, and the counts a GPU is bought for


def over_linen(runs, variant: str, value):
    """variant's value over Linen's, one ratio per repeat (gpuscale runs CartPole-v1's small model), or None."""
    return pair_ratios(runs, variant, REFERENCE, value).get(("CartPole-v1", "small"))


def shown(x) -> str:
    return median_range(x, ratio=True) if x is not None else "–"


def by_count(runs, gpu: bool) -> dict[int, list]:
    return {n: [r for r in runs if num_envs(r) == n and on_gpu(r) == gpu] for n in sorted({num_envs(r) for r in runs})}


def at_every_count(runs, value) -> dict:
    """{count: PyTorch's ratios over Linen's} on the GPU, at the counts with MIN_REPEATS of them (fewer decide nothing,
    as in the decision table)."""
    return {n: x for n, sel in by_count(runs, gpu=True).items()
            if (x := over_linen(sel, SCALE_TORCH, value)) is not None and len(x) >= MIN_REPEATS}


def scale_rows(runs) -> list[list]:
    """Per number of envs and device (the GPU, then the same machine's CPU): Linen's and PyTorch's steady
    iteration, PyTorch's over Linen's steady and over the whole run, and where the time goes."""
    rows = []
    on = {gpu: by_count(runs, gpu) for gpu in (True, False)}
    for sel in (on[gpu][n] for n in on[True] for gpu in (True, False)):
        if not {REFERENCE, SCALE_TORCH} <= {r.variant for r in sel}:
            continue
        n, of = num_envs(sel[0]), lambda v: [r for r in sel if r.variant == v]
        both = lambda value, show: " / ".join(show(median_of(of(v), value)) for v in (REFERENCE, SCALE_TORCH))
        rows.append([f"{n:,}", devices(sel), f"{len(of(REFERENCE))} / {len(of(SCALE_TORCH))}", both(ITERATION, ms),
                     *(shown(over_linen(sel, SCALE_TORCH, value)) for value in (ITERATION, total_time)),
                     both(ROLLOUT, ms), both(UPDATE, ms), both(first_iteration, fmt)])
    return rows


def variant_rows(runs) -> list[list]:
    """At each number of envs on the GPU, every other variant's steady iteration and whole run over Linen's."""
    return [[f"{n:,}", name(v, sel), *(shown(over_linen(sel, v, value)) for value in (ITERATION, total_time))]
            for n, sel in by_count(runs, gpu=True).items() for v in variant_order({r.variant for r in sel})
            if v not in (REFERENCE, SCALE_TORCH) and over_linen(sel, v, ITERATION) is not None]  # SCALE_TORCH: above


def gpuscale_section(runs, out):
    gpu = [r for r in runs if on_gpu(r)]
    cpu = [r for r in runs if not on_gpu(r)]
    out.heading("The GPU's own regime", f"bench.sh's gpuscale preset on {devices(gpu)}, and the same runs at the same "
                                        f"time on that machine's own CPU ({devices(cpu)}). {sessions_note(runs)}")
    out.table(f"CartPole-v1, small model: Flax Linen against {name(SCALE_TORCH)} by the number of envs, on the GPU "
              "and on the same machine's CPU (steady iteration, iterations 8..17; whole run: process start to the last "
              "iteration; medians, and the range over repeats)",
              ["envs", "device", "runs, Linen / PyTorch", "steady iteration ms, Linen / PyTorch",
               "PyTorch / Linen, steady", "PyTorch / Linen, whole run", "rollout ms, Linen / PyTorch",
               "update ms, Linen / PyTorch", "iteration 0 s, Linen / PyTorch"], scale_rows(runs), block="gpu-scale",
              note="No run here reaches a return target (18 iterations), so there is no time-to-target column.")
    gpuscale_claims(gpu, out)
    if rows := variant_rows(runs):
        out.table("The other PyTorch variants on the GPU, over Linen in the same repeats (steady iteration, whole run)",
                  ["envs", "variant", "steady, over Linen", "whole run, over Linen"], rows, block="gpu-scale-variants")


def gpuscale_claims(gpu, out):
    """What the docs say of the GPU's regime, from the counts with MIN_REPEATS repeats: Linen faster at each,
    PyTorch's gap narrowing as the envs grow (each count's range wholly below the one before), and smaller over
    the whole run than steady."""
    steady, whole = (at_every_count(gpu, value) for value in (ITERATION, total_time))
    show = lambda by: "; ".join(f"{n:,} envs {median_range(x, ratio=True)}" for n, x in by.items()) or "none"
    counts = list(steady)
    out.claim("gpuscale-linen-faster", bool(steady) and all(x.min() > 1 for x in steady.values()),
              ("faster",), f"{SCALE_TORCH} / linen on the GPU, steady, at the counts with {MIN_REPEATS} repeats: "
              f"{show(steady)}")
    out.claim("gpuscale-gap-narrows-with-envs", len(counts) > 1 and all(steady[b].max() < steady[a].min()
                                                                        for a, b in zip(counts, counts[1:])),
              ("narrow",), f"{SCALE_TORCH} / linen on the GPU, steady, at the counts with {MIN_REPEATS} repeats: "
              f"{show(steady)}")
    out.claim("gpuscale-whole-run-gap-smaller", bool(whole) and all(whole[n].max() < steady[n].min() for n in whole),
              ("smaller",), f"{SCALE_TORCH} / linen on the GPU, at the counts with {MIN_REPEATS} repeats, whole run: "
              f"{show(whole)}; steady: {show(steady)}")


def gpu_section(gpu, cpu, gpuscale, out):
    if gpu:
        first_gpu_section(gpu, cpu, out)
    if gpuscale:
        gpuscale_section(gpuscale, out)


def first_gpu_section(gpu, cpu, out):
    out.heading("On a GPU", f"bench.sh's gpu preset on {devices(gpu)}, against Experiment 1's runs of the same env "
                            f"and model on the CPU (its shuffled re-run where it ran; {devices(cpu)}). {sessions_note(gpu)}")
    variants, rows = ratio_rows(gpu, cpu)
    out.table("Each framework's time per iteration over Linen's, on the GPU | on the CPU (steady state, float32 "
              "matmuls; median and range over repeats)",
              ["env", "model", "Linen s/iteration, GPU", "Linen s/iteration, CPU", *(f"{name(v, gpu)} / Linen"
                                                                                    for v in variants)],
              rows, block="gpu-ratios",
              note="–: not run there, or too few iterations for a steady state (the CPU's large-model runs).")
    out.table("Where a GPU iteration goes (steady state, float32; iteration 0 includes the compilation)",
              ["env", "model", "variant", "runs", "iteration ms", "rollout ms", "update ms", "iteration 0 s",
               "whole run s"],
              split_rows(gpu), block="gpu-split")
    envs, rows = headline_rows(gpu, cpu)
    out.table(f"On {devices(gpu)}: each framework's iteration over Linen's with the small model, on the GPU and "
              "on the CPU (medians)", ["time, A / B", *envs], rows, block="gpu-headline")
    gpu_claims(gpu, cpu, out)
    out.table("TF32 against full float32 matmuls (--matmul-precision), the same runs otherwise",
              ["env", "model", "variant", "float32 iteration ms", "tf32 / float32", "float32 update ms",
               "tf32 / float32, update"], precision_rows(gpu), block="gpu-precision")


def headline_rows(gpu, cpu) -> list[list[str]]:
    """README's lines: on the small model, each framework over Linen on the GPU, and on the CPU, per env."""
    variants, ratios = ratios_here_and_there(gpu, cpu)
    envs = sorted({env for (where, _), by in ratios.items() if where == "GPU" for env, m in by if m == "small"})
    rows = []
    for v in variants:
        cells = []
        for env in envs:
            gpu_cell, cpu_cell = (ratios[where, v].get((env, "small")) for where in ("GPU", "CPU"))
            show = lambda x: f"{np.median(x):.2f}x" if x is not None else "–"
            cells += [show(gpu_cell), show(cpu_cell)]
        rows.append([f"{NAMES.get(v, v)} / Linen", *cells])
    return [f"{env}, {where}" for env in envs for where in ("GPU", "CPU")], rows


def gpu_claims(gpu, cpu, out, far=2.0):
    """README's caveat: PyTorch's gap to Linen on the GPU against the same on the CPU, small model."""
    _, ratios = ratios_here_and_there(gpu, cpu)
    both = {}  # (variant, env): the GPU's median ratio and the CPU's
    for (where, v), by in ratios.items():
        for (env, model), x in by.items():
            if where == "GPU" and v.startswith("torch") and model == "small" and (c := ratios["CPU", v].get((env, model))) is not None:
                both[(v, env)] = (np.median(x), np.median(c))
    out.claim("gpu-torch-gap-far-wider-than-cpu", both and all(g >= far * c for g, c in both.values()), ("wider",),
              "over Linen, small model, GPU | CPU medians: " + "; ".join(f"{v} {env} {g:.2f}x | {c:.2f}x"
                                                                          for (v, env), (g, c) in sorted(both.items()))
              + f" (far: the GPU's at least {far:g} times the CPU's)")
