"""Where the analysis goes: REPORT.md's lines, the same tables on the console (rich), the named
blocks that README.md and docs/ show, and the charts with a caption saying what to read."""

import math
import sys
import zlib
from pathlib import Path

from rich.console import Console
from rich.table import Table

console = Console(stderr=True, width=None if sys.stderr.isatty() else 150)  # logs: no wrapped tables

# one colour per variant in every chart; the order is the order of legends and tables
VARIANT_COLORS = {
    "linen": "#1f77b4", "linen-nojit": "#aec7e8", "nnx": "#ff7f0e", "nnx-nojit": "#ffbb78",
    "nnx_cached": "#d62728", "equinox": "#2ca02c", "equinox-nojit": "#98df8a", "torch": "#9467bd",
    "torch-nojitenv": "#c5b0d5", "torch_compile": "#8c564b", "torch_compile-default": "#c49c94",
    "torch_compile-reduce-overhead": "#e377c2", "torch_compile-max-autotune": "#f7b6d2",
    "torch_gymnasium": "#17becf", "torch_gymnasium-vector": "#0e7c86", "torch_gymnasium-envpool": "#9edae5",
    "linen_gymnasium": "#bcbd22", "linen_gymnasium-vector": "#7f7f0f", "linen_gymnasium-envpool": "#e7e78a",
    "linen_gymnasium-nojit": "#dbdb8d", "torch_gymnasium-async": "#5f9ea0", "linen_gymnasium-async": "#a0a01a",
    # N agents in one process: the colour of the single-agent script they batch
    "linen_agents": "#1f77b4", "nnx_agents": "#ff7f0e", "torch_agents": "#9467bd", "torch_agents_compile": "#8c564b",
    # an env stepped alone (env_alone.py): in JAX like Linen's env, then the CPU's ways, MJX apart
    "env-gymnax": "#1f77b4", "env-sync": "#7f7f7f", "env-async": "#5f9ea0", "env-envpool": "#bcbd22", "env-mjx": "#d62728",
    # PyTorch on its own terms: its env in torch (darker than through DLPack), compiled on a CPU env; the env alone
    "torch-torchenv": "#4b2a7b", "torch_compile-torchenv": "#4a2e27", "torch_compile_gymnasium": "#0a5f66",
    "torch_compile_gymnasium-envpool": "#5fb7c4", "env-gymnax-dlpack": "#c5b0d5", "env-torch": "#9467bd",
    "env-torch-compile": "#8c564b", "torch_compile-default-torchenv": "#7a5a4f",
    # DQN: its PPO sibling's colour, the host buffer lighter
    "dqn_linen": "#1f77b4", "dqn_nnx": "#ff7f0e", "dqn_equinox": "#2ca02c", "dqn_torch": "#9467bd",
    "dqn_torch-host": "#c5b0d5", "dqn_torch_compile": "#8c564b", "dqn_torch_compile-host": "#c49c94",
    "dqn_torch_gymnasium": "#17becf", "dqn_torch_gymnasium-host": "#9edae5", "dqn_linen_gymnasium": "#bcbd22",
    "dqn_linen_gymnasium-host": "#e7e78a", "dqn_torch-torchenv": "#4b2a7b", "dqn_torch_compile-torchenv": "#4a2e27",
    "dqn_torch_compile_gymnasium": "#0a5f66", "dqn_torch_compile_gymnasium-host": "#5fb7c4",
}
OFFPOLICY_AS_DQN = ("linen", "nnx", "equinox", "torch", "torch-host", "torch-torchenv", "torch_compile", "torch_compile-host",
                    "torch_compile-torchenv", "torch_gymnasium", "torch_gymnasium-host", "torch_compile_gymnasium",
                    "torch_compile_gymnasium-host", "linen_gymnasium", "linen_gymnasium-host")  # TD3's and SAC's variants, coloured and named as DQN's
VARIANT_COLORS |= {f"{alg}_{v}": VARIANT_COLORS[f"dqn_{v}"] for alg in ("td3", "sac") for v in OFFPOLICY_AS_DQN}
MODEL_MARKERS = {"small": "o", "medium": "s", "large": "^"}
# what each variant compiles, in the tables' words; torch_compile's depends on the run (compile_scope)
NAMES = {"linen": "Flax Linen", "nnx": "Flax NNX", "nnx_cached": "Flax NNX, nnx.jit + nnx.cached_partial",
         "equinox": "Equinox", "torch": "PyTorch, eager", "torch_compile": "PyTorch, torch.compile",
         "torch-torchenv": "PyTorch, eager, its env in torch", "torch_compile-torchenv": "PyTorch, torch.compile, its env in torch",
         "torch_compile-default-torchenv": "PyTorch, torch.compile without CUDA graphs, its env in torch",
         "dqn_linen": "Flax Linen", "dqn_nnx": "Flax NNX", "dqn_equinox": "Equinox", "dqn_torch": "PyTorch, eager",
         "dqn_torch-host": "PyTorch, eager, buffer on the host", "dqn_torch_compile": "PyTorch, torch.compile",
         "dqn_torch_compile-host": "PyTorch, torch.compile, buffer on the host",
         "dqn_torch_gymnasium": "PyTorch, eager, Gymnasium's env",
         "dqn_torch_gymnasium-host": "PyTorch, eager, Gymnasium's env, buffer on the host",
         "dqn_torch_compile_gymnasium": "PyTorch, torch.compile, Gymnasium's env",
         "dqn_torch_compile_gymnasium-host": "PyTorch, torch.compile, Gymnasium's env, buffer on the host",
         "dqn_linen_gymnasium": "Flax Linen, Gymnasium's env",
         "dqn_linen_gymnasium-host": "Flax Linen, Gymnasium's env, buffer on the host",
         "dqn_torch-torchenv": "PyTorch, eager, its env in torch",
         "dqn_torch_compile-torchenv": "PyTorch, torch.compile, its env in torch",
         "cleanrl_dqn": "CleanRL's dqn.py (PyTorch)", "cleanrl_dqn_jax": "CleanRL's dqn_jax.py (Flax Linen)"}
NAMES |= {f"{alg}_{v}": NAMES[f"dqn_{v}"] for alg in ("td3", "sac") for v in OFFPOLICY_AS_DQN}
NAMES |= {"cleanrl_td3_continuous_action": "CleanRL's td3_continuous_action.py (PyTorch)",
          "cleanrl_td3_continuous_action_jax": "CleanRL's td3_continuous_action_jax.py (Flax Linen)",
          "cleanrl_sac_continuous_action": "CleanRL's sac_continuous_action.py (PyTorch)"}
COMPILE_SCOPES = {  # ppo_torch_compile.py's --compile-scope: what is compiled besides GAE
    "grads": "loss, gradients and clip; Adam eager",
    "grads+policy": "loss, gradients, clip and the policy step; Adam eager",
    "update": "the whole minibatch step, Adam included",
    "update+policy": "the whole minibatch step and the policy step",
}
SCOPE_NAMES = {"grads": "gradients", "grads+policy": "gradients, policy step", "update": "update",
               "update+policy": "update, policy step"}  # the same, short, in a variant's name
EARLIER_SCOPE = "update+policy"  # what torch_compile compiled before --compile-scope existed


def name(variant: str, runs=()) -> str:
    """A variant's name in tables, torch_compile's with what its runs compiled."""
    if variant != "torch_compile":
        return NAMES.get(variant, variant)
    scopes = sorted({r.info["args"].get("compile_scope", EARLIER_SCOPE) for r in runs if r.variant == variant})
    return f"{NAMES[variant]} ({'; '.join(SCOPE_NAMES.get(s, s) for s in scopes)})" if scopes else NAMES[variant]


def variant_order(variants) -> list[str]:
    known = [v for v in VARIANT_COLORS if v in variants]
    return known + sorted(set(variants) - set(known))


def color(variant: str) -> str:
    if variant in VARIANT_COLORS:
        return VARIANT_COLORS[variant]
    import matplotlib

    return matplotlib.colormaps["tab20b"](zlib.crc32(variant.encode()) % 20)  # str hash() differs per process


def fmt(x, digits=3) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if isinstance(x, float):  # three significant digits, trailing zeros kept: 0.120, 3.00, 17.4
        return f"{x:#.{digits}g}".rstrip(".") if abs(x) < 1000 else f"{x:,.0f}"
    return str(x)


def listed(items) -> str:
    """'a', 'a and b', 'a, b and c'; 'none' of no item."""
    items = [str(i) for i in items] or ["none"]
    return ", ".join(items[:-1]) + " and " * (len(items) > 1) + items[-1]


def markdown_table(header: list[str], rows: list[list]) -> list[str]:
    return (["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(fmt(c) for c in row) + " |" for row in rows])


class Output:
    """REPORT.md in the making. Every table and generated sentence goes into it; those given a
    block name are also what README.md and docs/ show between their BEGIN/END markers."""

    def __init__(self, folder: Path):
        self.folder, self.md, self.blocks, self.charts, self.claims = folder, [], {}, [], {}

    def heading(self, title: str, *intro: str):
        self.md += [f"## {title}", ""] + ([" ".join(intro), ""] if intro else [])

    def table(self, title: str, header: list[str], rows: list[list], block: str | None = None,
              note: str | None = None):
        shown = Table(title=title)
        for h in header:
            shown.add_column(h)
        for row in rows:
            shown.add_row(*[fmt(c) for c in row])
        console.print(shown)
        lines = markdown_table(header, rows) + (["", note] if note else [])
        self.md += [f"### {title}", "", *lines, ""]
        if block:
            self.block(block, lines)

    def text(self, lines: list[str], block: str | None = None):
        """Generated prose: sentences whose every figure comes from the runs."""
        self.md += [*lines, ""]
        if block:
            self.block(block, lines)

    def block(self, name: str, lines: list[str]):
        if name in self.blocks:
            raise ValueError(f"two blocks named {name!r}")
        self.blocks[name] = "\n".join(lines) + "\n"

    def claim(self, name: str, holds, words: tuple[str, ...], evidence: str):
        """A comparison the docs' prose makes where it says `<!-- claim: NAME -->`: the comparative
        words it licenses there, whether these runs bear it out, and the figures that decide it."""
        if name in self.claims:
            raise ValueError(f"two claims named {name!r}")
        self.claims[name] = (bool(holds), tuple(words), evidence)

    def claims_table(self):
        """Every claim, with its verdict: the block that tests/test_docs.py holds the prose to."""
        if self.claims:
            self.heading("The comparisons the prose may make")
            self.table("Each comparison analyze.py decides, and whether the runs bear it out (the prose may make "
                       "only those that hold)",
                       ["claim", "words", "holds", "because"],
                       [[f"`{n}`", ", ".join(w), "yes" if h else "no", e.replace("|", "\\|")] for n, (h, w, e) in sorted(self.claims.items())],
                       block="claims", note="A claim with a trend holds only when every step of it holds beyond its "
                                            "intervals (or, with fewer than 5 envs, its ranges).")

    def chart(self, fig, name: str, caption: str, dpi: int = 110):
        """Saves the figure; REPORT.md shows it where it stands, with its caption under it."""
        import matplotlib.pyplot as plt

        fig.savefig(self.folder / name, dpi=dpi)
        plt.close(fig)
        self.charts.append(name)
        self.md += [f"![{caption}]({name})", "", f"*{caption}*", ""]
