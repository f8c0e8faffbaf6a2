"""Learning from pixels (issue 32). Timing (folder pixels, bench.sh's preset of that name): on MinAtar's
images, each framework's iteration against Linen's with the CNN and with the small MLP on the same
env, the CPU-env scripts' against linen_gymnasium's, Atari's Breakout-v5 through EnvPool, each
variant's CNN against its own MLP, and the rollout's share. Learning (folder pixels-learning):
Breakout-MinAtar with the CNN, against the bar a PPO is expected to pass there."""

from collections import defaultdict

import numpy as np

from .continuous import learning_rows, ratio_lines, ratio_rows, share_rows
from .expensive import ITERATION
from .learning import plot_learning_curves
from .output import color, variant_order
from .stats import median_range, pair_ratios, repeat_of, sessions_note, total_time

GROUPS = {  # the yardstick of each group of variants, and the others, as bench.sh pixels runs them
    "linen": ("nnx", "nnx_cached", "equinox", "torch", "torch_compile"),  # the env in JAX (Gymnax)
    "linen_gymnasium": ("torch_gymnasium",),  # MinAtar's Python games on the CPU
    "linen_gymnasium-envpool": ("torch_gymnasium-envpool",),  # Atari through EnvPool
}
BARS = {"Breakout-MinAtar": 10.0}  # the final return every seed must reach with the CNN


def cnn_over_mlp(runs, variant: str) -> dict[str, np.ndarray]:
    """{env: the variant's steady iteration with the CNN over its iteration with the small MLP, one ratio
    per repeat (runs of one session)}."""
    by = defaultdict(dict)
    for r in runs:
        if r.variant == variant and (t := ITERATION(r)):
            by[(r.env_id, *map(str, repeat_of(r)))][r.model] = t
    out = defaultdict(list)
    for (env, *_), times in sorted(by.items()):
        if {"cnn", "small"} <= times.keys():
            out[env].append(times["cnn"] / times["small"])
    return {env: np.array(ratios) for env, ratios in out.items()}


def cnn_rows(runs) -> tuple[list[str], list[list]]:
    variants = [v for v in variant_order({r.variant for r in runs}) if cnn_over_mlp(runs, v)]
    ratios = {v: cnn_over_mlp(runs, v) for v in variants}
    envs = sorted({env for v in variants for env in ratios[v]})
    return variants, [[env, *(median_range(ratios[v][env], ratio=True) if env in ratios[v] else "–"
                              for v in variants)] for env in envs]


def plot_pixels(runs, out):
    """Per MinAtar game, each variant's iteration over its group's yardstick, with the small MLP and the CNN."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    envs = sorted({r.env_id for r in runs if r.variant == "linen"})
    pairs = [(v, ref) for ref, others in GROUPS.items() for v in others if ref != "linen_gymnasium-envpool"]
    fig, axes = plt.subplots(1, len(envs), figsize=(6 * len(envs), 4.4), squeeze=False)
    for ax, env in zip(axes.flat, envs):
        for i, (v, ref) in enumerate(pairs):
            for j, (model, hatch) in enumerate((("small", ""), ("cnn", "//"))):
                ratios = pair_ratios(runs, v, ref, ITERATION).get((env, model))
                if ratios is not None and len(ratios):
                    mid = np.median(ratios)
                    ax.bar(i + (j - 0.5) * 0.4, mid, 0.4, color=color(v), hatch=hatch, edgecolor="black", lw=0.5,
                           yerr=[[mid - ratios.min()], [ratios.max() - mid]], capsize=2,
                           label=model if i == 0 else None)
        ax.axhline(1, color="black", lw=0.8)
        ax.set(title=env, yscale="log", ylabel="steady iteration / the yardstick's")
        ax.set_xticks(range(len(pairs)), [f"{v}\n/ {ref}" for v, ref in pairs], fontsize=7, rotation=20)
        ax.yaxis.set_major_locator(FixedLocator([0.5, 0.75, 1, 1.5, 2, 3, 4]))
        ax.yaxis.set_minor_locator(NullLocator())
        ax.yaxis.set_major_formatter(FuncFormatter(lambda y, _: f"{y:g}x"))
        ax.legend(fontsize=8, title="model (hatched: cnn)", title_fontsize=7)
    fig.suptitle("MinAtar's images: each variant against Linen (env in JAX) or linen_gymnasium (env on the CPU), "
                 "median and range over repeats", fontsize=10)
    fig.tight_layout()
    out.chart(fig, "pixels.png", "Each framework's steady time per iteration over Linen's (the env in JAX) or "
              "linen_gymnasium's (MinAtar's Python games on the CPU), with the small MLP (plain) and with the CNN "
              "(hatched), on the same game: above 1, slower than the yardstick.")


def pixels_section(runs, out):
    out.heading("Learning from pixels: time",
                "The six Gymnax variants and the CPU-env scripts (sync) on Breakout-MinAtar and Asterix-MinAtar "
                "with `--model cnn` (MinAtar's network: one 3x3 convolution of 16 filters, a 128-unit layer) "
                "and with the small MLP on the same flattened images, and both CPU-env scripts on Atari's "
                "Breakout-v5 through EnvPool with the Nature CNN at CleanRL's Atari batch (8 envs x 128 steps, "
                "4 epochs of 4 minibatches); 20 synced iterations, each repeat's runs in a shuffled order "
                "(`bash bench.sh pixels --repeats 3`). Steady state: iterations 8..end.", sessions_note(runs))
    for reference, others in GROUPS.items():
        where = {"linen": "MinAtar's images, the env in JAX (Gymnax)",
                 "linen_gymnasium": "MinAtar's images, the env on the CPU (Gymnasium, sync)",
                 "linen_gymnasium-envpool": "Atari's frames through EnvPool"}[reference]
        out.table(f"Pixels, {where}: each variant's steady iteration over {reference}'s, median (range, n "
                  f"repeats), with {reference}'s seconds per iteration and its rollout's share",
                  ["env", "model", f"{reference} s/iter", f"{reference} rollout share",
                   *(f"{v} / {reference}" for v in others)],
                  ratio_rows(runs, reference, others), block=f"pixels-{reference.replace('_', '-')}")
    plot_pixels(runs, out)
    variants, rows = cnn_rows(runs)
    out.table("Pixels: each variant's steady iteration with the CNN over its own with the small MLP, on the same "
              "game and repeat, median (range, n repeats)", ["env", *variants], rows, block="pixels-cnn-over-mlp")
    variants, rows = share_rows(runs, GROUPS)
    out.table("Pixels: the rollout's share of an iteration (rollout / (rollout + update)), median over repeats",
              ["env", "model", *variants], rows, block="pixels-shares")
    pixels_claims(runs, out)


def pixels_claims(runs, out):
    """What results.md's "Why" says of these tables, decided from the same runs."""
    atari = pair_ratios(runs, "torch_gymnasium-envpool", "linen_gymnasium-envpool", ITERATION).get(("Breakout-v5", "cnn"), [])
    out.claim("torch-faster-on-atari", len(atari) and max(atari) < 1, ("faster",),
              f"Breakout-v5, torch_gymnasium-envpool / linen_gymnasium-envpool {median_range(atari, ratio=True) if len(atari) else '–'}")
    multiples = {v: cnn_over_mlp(runs, v) for v in ("linen", "nnx", "nnx_cached", "equinox", "torch", "torch_compile",
                                                     "linen_gymnasium", "torch_gymnasium")}
    envs = sorted({env for m in multiples.values() for env in m})
    jax = lambda v: not v.startswith("torch")
    larger = all(all(env in m for m in multiples.values())
                 and min(np.median(m[env]) for v, m in multiples.items() if jax(v))
                 > max(np.median(m[env]) for v, m in multiples.items() if not jax(v)) for env in envs)
    out.claim("cnn-costs-the-jax-scripts-a-larger-multiple", envs and larger, ("larger",),
              "CNN / MLP steady iteration, medians: " + "; ".join(
                  f"{env}: " + ", ".join(f"{v} {np.median(m[env]):.2f}" for v, m in multiples.items() if env in m)
                  for env in envs) + " (every JAX script's above every PyTorch script's)")


def pixels_learning_section(runs, out):
    out.heading("Learning from pixels: Breakout-MinAtar",
                "Linen and eager PyTorch with `--model cnn` on Breakout-MinAtar, the discrete defaults (32 envs "
                "x 256 steps, 10 epochs of 8 minibatches), 300 iterations (2.5M env steps), one run per seed "
                "(`bash bench.sh pixels-learning --repeats 3`). Atari learns too slowly on this CPU to be run "
                "here: it is timed only.")
    for against in ("steps", "time"):
        plot_learning_curves(runs, against, out, name=f"pixels_learning{'_time' * (against == 'time')}.png",
                             caption=f"Return against {'env steps' if against == 'steps' else 'wall time'} on "
                                     "Breakout-MinAtar with the CNN: mean and min..max over seeds.")
    out.table("Breakout-MinAtar with the CNN: the final return (the mean over the episodes of the last 10 "
              "iterations) of each seed, against the bar each must reach",
              ["env", "variant", "seeds", "return, first 10 iterations", "final return, mean", "min .. max", "bar",
               "seeds at the bar", "env steps"], learning_rows(runs, BARS), block="pixels-learning")
    whole = {v: [t for r in runs if r.variant == v and (t := total_time(r))] for v in ("linen", "torch")}
    out.claim("linens-cnn-runs-finish-sooner", all(whole.values()) and max(whole["linen"]) < min(whole["torch"]),
              ("sooner",), "whole runs (s): " + "; ".join(f"{v} " + ", ".join(f"{t:.0f}" for t in sorted(ts))
                                                         for v, ts in whole.items()))


def headline_rows(runs) -> list[list[str]]:
    """README's pixel lines (the CNN, at least three repeats): PyTorch against Linen on Breakout-MinAtar
    with the env in JAX, and on Atari's Breakout-v5 through EnvPool."""
    return ratio_lines(runs, "cnn", (
        ("torch", "linen", "Breakout-MinAtar", "pixels, Breakout-MinAtar with the CNN: PyTorch, eager / Linen, Gymnax env"),
        ("torch_compile", "linen", "Breakout-MinAtar",
         "pixels, Breakout-MinAtar with the CNN: PyTorch, torch.compile / Linen, Gymnax env"),
        ("torch_gymnasium-envpool", "linen_gymnasium-envpool", "Breakout-v5",
         "pixels, Breakout-v5 with the CNN: PyTorch / Linen, both stepping EnvPool's Atari")))


def conv_section(sessions: list[dict], out):
    """tests/benchmark_conv.py's sessions (results/conv.json): one minibatch's convolutions, forward and
    gradient, in a lax.scan with XLA's convolution and with the scripts' patches, and in PyTorch."""
    out.heading("How JAX convolves on a CPU", "tests/benchmark_conv.py, outside the study: each CNN's "
                "convolutions, forward and gradient, for minibatches in a row, in JAX as a lax.scan over them (as "
                "the scripts' update runs) with XLA's convolution and with the scripts' patches times the kernel, "
                "and in PyTorch (oneDNN); milliseconds per minibatch, each session's median of 5 calls. CPUs: "
                + ", ".join(sorted({f"{s['cpu']} ({s['cores']} cores)" for s in sessions})) + "; load "
                + ", ".join(f"{s['load']:.2f}" for s in sessions) + ".")
    rows = []
    for cnn in sessions[0]["cases"]:
        case = lambda key: [s["cases"][cnn][key] for s in sessions]
        xla, patches, torch = (np.array(case(k)) for k in ("xla", "patches", "torch"))
        rows.append([cnn, f"{case('minibatch')[0]} x {case('minibatches')[0]}", median_range(xla),
                     median_range(patches), median_range(torch), median_range(xla / patches, ratio=True),
                     median_range(patches / torch, ratio=True)])
    out.table("Convolutions alone: ms per minibatch, median (range, n sessions)",
              ["CNN", "minibatch x minibatches", "XLA's convolution in a scan", "the scripts' patches", "PyTorch",
               "XLA's / patches", "patches / PyTorch"], rows, block="conv-benchmark")
    slower = all(s["cases"][c]["xla"] > s["cases"][c]["patches"] for s in sessions for c in s["cases"])
    out.claim("patches-faster-than-xla-convolution", slower, ("slower",),
              "XLA's convolution over the patches, every session and CNN: " + "; ".join(f"{r[0]} {r[5]}" for r in rows))
