"""Each framework at its best (bench.sh tuning): the same runs under each thread setting (XLA's
CPU threading on and off, torch on one intra-op thread, a passive OpenMP wait) and torch_compile
at each compile scope, back to back in one shuffled session; and what the session's calibration
says of the matrix library (calibrate.py --gemm-options). The scripts' defaults are what these
tables find fastest; a setting counts as faster only when it was faster in every repeat."""

from collections import defaultdict

import numpy as np

from .output import COMPILE_SCOPES, EARLIER_SCOPE, fmt
from .stats import MODELS, median_of, median_range, repeat_of, sessions_note, steady

ITERATION, ROLLOUT, UPDATE = (steady(tag) for tag in ("time/iteration", "time/rollout", "time/update"))
SETTINGS = {  # bench.sh's tuning settings: the environment each run starts with
    "xla-n": "XLA's Eigen on every core (XLA's default)",
    "xla-1": "XLA's Eigen on the calling thread (--xla_cpu_multi_thread_eigen=false)",
    "torch-1": "torch on one intra-op thread (OMP_NUM_THREADS=1)",
    "omp-passive": "OpenMP threads sleep when idle (OMP_WAIT_POLICY=PASSIVE)",
}
BASE = "xla-n"  # every setting is compared with the same script under XLA's default
SCOPES = {f"torch_compile-{scope}": what for scope, what in COMPILE_SCOPES.items()}  # the variant of each scope
EARLIER = (f"torch_compile-{EARLIER_SCOPE}", BASE)  # what torch_compile ran before this experiment


def setting_of(run) -> str:
    return run.path.parent.name  # bench.sh's slot: <out>/tuning/r<repeat>/<setting>/<run dir>


def by_repeat(runs, value) -> dict[tuple, dict[tuple, float]]:
    """{(env, model, repeat): {(variant, setting): value}}: one session's repeat, paired."""
    out = defaultdict(dict)
    for r in runs:
        if (x := value(r)) is not None:
            out[(r.env_id, r.model, *map(str, repeat_of(r)))][(r.variant, setting_of(r))] = x
    return out


def ratios(points, a: tuple, b: tuple, env: str, model: str) -> list[float]:
    """Time of a / time of b, one per repeat of that env and model size."""
    return [values[a] / values[b] for (e, m, *_), values in sorted(points.items())
            if e == env and m == model and a in values and b in values]


def cell(ratios_: list[float]) -> str:
    return median_range(ratios_, ratio=True) if ratios_ else "–"


def always_faster(ratios_: list[float]) -> bool:
    return len(ratios_) >= 3 and max(ratios_) < 1


def tuning_section(runs, out):
    out.heading("Each framework at its best: threads and compile scope (bench.sh tuning)",
                "The same script under each thread setting, and torch_compile at each --compile-scope, in one "
                "shuffled session: synced, the scripts' batch, steady state over iterations 8..end; ratios pair "
                "the runs of one repeat. A setting is called faster only when it was faster in every repeat.",
                sessions_note(runs))
    points = by_repeat(runs, ITERATION)
    keys = sorted({(r.env_id, r.model) for r in runs}, key=lambda k: (k[0], MODELS.index(k[1])))
    rows = []
    for env, model in keys:
        for variant in ("linen", "torch", "torch_compile-grads"):
            for setting in SETTINGS:
                sel = [r for r in runs if (r.env_id, r.model, r.variant, setting_of(r)) == (env, model, variant, setting)]
                if not sel:
                    continue
                vs = ratios(points, (variant, setting), (variant, BASE), env, model)
                rows.append([env, model, variant, setting, len(sel), median_of(sel, ITERATION), median_of(sel, ROLLOUT),
                             median_of(sel, UPDATE), "–" if setting == BASE else cell(vs)])
    out.table("Threads: seconds per steady iteration, rollout and update (medians over repeats), and the "
              f"iteration against the same script under {BASE} (median, range, n repeats; below 1: faster)",
              ["env", "model", "variant", "setting", "runs", "iteration", "rollout", "update", f"/ {BASE}"], rows,
              block="tuning-threads", note="Settings: " + "; ".join(f"`{k}`: {v}" for k, v in SETTINGS.items()) + ".")
    rows = []
    for env, model in keys:
        for scope, what in SCOPES.items():
            sel = [r for r in runs if (r.env_id, r.model, r.variant, setting_of(r)) == (env, model, scope, BASE)]
            if sel:
                rows.append([env, model, scope, what, median_of(sel, ITERATION), median_of(sel, ROLLOUT),
                             median_of(sel, UPDATE),
                             cell(ratios(points, (scope, BASE), EARLIER, env, model)),
                             cell(ratios(points, (scope, BASE), ("torch", BASE), env, model))])
    out.table(f"torch.compile's scope ({BASE}): seconds per steady iteration, rollout and update (medians), and the "
              "iteration against the earlier default (update+policy) and against eager torch (median, range, n repeats)",
              ["env", "model", "--compile-scope", "compiled besides GAE", "iteration", "rollout", "update",
               "/ update+policy", "/ eager torch"], rows, block="tuning-scopes")
    defaults_table(runs, points, keys, out)
    threads_claims(points, keys, out)


def threads_claims(points, keys, out):
    """What results.md says of the thread settings and the scopes, decided from the same ratios."""
    def vs_base(variant, setting, model, base=None):
        return [x for env, m in keys if m == model
                for x in ratios(points, (variant, setting), base or (variant, BASE), env, model)]

    def said(variant, setting, base=None):
        return "; ".join(f"{variant} {setting} {m} {cell(vs_base(variant, setting, m, base))}" for m in ("small", "medium"))

    small, medium = vs_base("linen", "xla-1", "small"), vs_base("linen", "xla-1", "medium")
    out.claim("xla-one-thread-faster-for-small-linen", always_faster(small) and medium and not always_faster(medium),
              ("faster",), said("linen", "xla-1") + " (faster in every repeat at small, not at medium)")
    passive = [vs_base("torch", "omp-passive", m) for m in ("small", "medium")]
    one = {m: vs_base("torch", "torch-1", m) for m in ("small", "medium")}
    out.claim("spinning-openmp-threads-faster", all(len(x) >= 3 and min(x) > 1 for x in passive)
              and len(one["medium"]) >= 3 and min(one["medium"]) > 1 and np.median(one["small"]) > 1,
              ("slower",), said("torch", "omp-passive") + "; " + said("torch", "torch-1")
              + " (omp-passive above 1 in every repeat at both sizes; torch-1 at medium, and by median at small)")
    grads = {m: vs_base("torch_compile-grads", BASE, m, EARLIER) for m in ("small", "medium")}
    out.claim("grads-scope-faster-small-slower-medium",
              grads["small"] and grads["medium"] and np.median(grads["small"]) < 1 < np.median(grads["medium"])
              and not (always_faster(grads["small"]) and always_faster(grads["medium"])), ("faster", "slower"),
              f"grads / update+policy: small {cell(grads['small'])}, medium {cell(grads['medium'])}")


def best(points, variant_settings: list[tuple], base: tuple, keys) -> tuple | None:
    """The setting faster than base in every repeat at every (env, model) that ran it, the fastest
    of those by median; None when none was."""
    winners = [vs for vs in variant_settings if vs != base and
               all(always_faster(ratios(points, vs, base, env, model)) for env, model in keys)]
    median = lambda vs: np.median([x for env, model in keys for x in ratios(points, vs, base, env, model)])
    return min(winners, key=median) if winners else None


def defaults_table(runs, points, keys, out):
    """The fastest measured of each framework, and how the headline ratios move from the earlier
    defaults (every script under XLA's default, torch_compile at update+policy) to those."""
    chosen = {"linen": best(points, [("linen", s) for s in SETTINGS], ("linen", BASE), keys) or ("linen", BASE),
              "torch": best(points, [("torch", s) for s in SETTINGS], ("torch", BASE), keys) or ("torch", BASE),
              "torch_compile": best(points, [(s, BASE) for s in SCOPES] + [("torch_compile-grads", "xla-1")],
                                    EARLIER, keys) or EARLIER}
    earlier = {"linen": ("linen", BASE), "torch": ("torch", BASE), "torch_compile": EARLIER}
    rows = [[name, f"{earlier[name][0]} ({earlier[name][1]})", f"{chosen[name][0]} ({chosen[name][1]})"]
            for name in chosen]
    out.claim("defaults-fastest-measured", chosen == earlier, ("fastest", "faster", "as fast"),
              "no setting or scope was faster than a script's default in every repeat at every size: "
              + ", ".join(f"{name} keeps {c[0]} ({c[1]})" if c == earlier[name] else f"{name} moves to {c[0]} ({c[1]})"
                          for name, c in chosen.items()))
    out.table("The fastest measured: each framework's setting (and torch_compile's scope) that was faster than "
              "the earlier default in every repeat at every size, else the earlier default",
              ["framework", "earlier default", "fastest measured"], rows, block="tuning-defaults")
    rows = []
    for env, model in keys:
        for name in ("torch", "torch_compile"):
            rows.append([env, model, f"{name} / linen",
                         cell(ratios(points, earlier[name], earlier["linen"], env, model)),
                         cell(ratios(points, chosen[name], chosen["linen"], env, model))])
    out.table("The headline's ratios under the earlier defaults and under the fastest measured (time per steady "
              "iteration against Linen's; median, range, n repeats)",
              ["env", "model", "time, A / B", "earlier defaults", "fastest measured"], rows, block="tuning-headline")


def gemm_section(runs, out):
    """The matrix library: a layer's time in each framework (the sessions' calibrations), and how
    much of the steady iteration's gap between eager torch and Linen those layers would explain."""
    calibrations = {r.info["session"]: r.calibration for r in runs if r.calibration}
    rows = []
    for session, cal in sorted(calibrations.items()):
        layers = cal["layer_seconds"]
        for name, by_size in layers.items():
            rows.append([session, name, *(by_size.get(size) * 1e3 if by_size.get(size) else None
                                          for size in cal["layer_widths"]),
                         *(by_size[size] / layers["jax"][size] if by_size.get(size) else None
                           for size in cal["layer_widths"])])
    if not rows:
        return
    gemm_claims(calibrations, out)
    widths = next(iter(calibrations.values()))["layer_widths"]
    out.heading("The matrix library: one layer in each framework",
                f"x @ W + b for a minibatch of {next(iter(calibrations.values()))['layer_rows']} rows at each model "
                "size's width (calibrate.py: the median of many calls; torch's nn.functional.linear, JAX's jnp.dot "
                "and add, jitted), in each session that measured it, with each framework's other ways to run it "
                "where calibrate.py --gemm-options ran.")
    out.table("A layer's time (ms) and its ratio to JAX's default (above 1: slower)",
              ["session", "way", *(f"{s} ({w} wide), ms" for s, w in widths.items()),
               *(f"{s} / jax" for s in widths)], rows, block="gemm")
    rows = []
    for (session, cal), model in ((sc, m) for sc in sorted(calibrations.items()) for m in widths):
        sel = [r for r in runs if r.info.get("session") == session and r.model == model and setting_of(r) == BASE]
        torch_it, linen_it = (median_of([r for r in sel if r.variant == v], ITERATION) for v in ("torch", "linen"))
        per_layer = cal["layer_seconds"]["torch"][model] - cal["layer_seconds"]["jax"][model]
        layers = layer_products(model, runs[0].info["args"])
        explained = layers * per_layer
        gap = torch_it - linen_it if torch_it and linen_it else None
        rows.append([session, model, layers, fmt(explained), fmt(gap),
                     share(explained, gap)])
    out.table("How much of eager torch's steady gap to Linen the layers explain: the layer products of one "
              "iteration at the model's width times the difference of one layer's time, against the measured "
              "gap (seconds per iteration, same session, both under XLA's default threads)",
              ["session", "model", "layer products per iteration", "torch - jax, layers alone (s)",
               "torch - linen, measured (s)", "share explained"], rows, block="gemm-share")


def share(explained: float, gap: float | None) -> str:
    """The part of torch's gap the layers explain; none when torch's layers are the faster ones."""
    if not gap or gap <= 0:
        return "–"
    return f"{explained / gap:.0%}" if explained >= 0 else "none: torch's layers are faster"


def gemm_claims(calibrations, out):
    """One layer: torch against JAX in every session at the medium width, the two at the large
    width, and each framework's other ways against its default at the large width."""
    per = {s: cal["layer_seconds"] for s, cal in sorted(calibrations.items())}
    medium = {s: layers["torch"]["medium"] / layers["jax"]["medium"] for s, layers in per.items()}
    large = {s: layers["torch"]["large"] / layers["jax"]["large"] for s, layers in per.items()}
    show = lambda d: ", ".join(f"{v:.2f}" for v in d.values())
    out.claim("torch-layer-faster-at-medium-width", max(medium.values()) < 1, ("faster", "as fast"),
              f"torch / jax, one medium layer, each session: {show(medium)}")
    out.claim("large-layer-swaps-between-sessions", min(large.values()) < 1 < max(large.values()), ("faster", "as fast"),
              f"torch / jax, one large layer, each session: {show(large)}")
    others = {(s, way): layers[way]["large"] / layers["torch" if way.startswith("torch") else "jax"]["large"]
              for s, layers in per.items() for way in layers if way not in ("torch", "jax")}
    out.claim("other-gemm-ways-no-faster-at-large-width", others and min(others.values()) >= 1, ("faster",),
              "each other way / its framework's default, one large layer: "
              + ", ".join(f"{way} {v:.2f}" for (s, way), v in others.items()))


HIDDEN = {"medium": 3, "large": 6}  # hidden layers of each size (width x width products between them)


def layer_products(model: str, args: dict) -> int:
    """The width x width matrix products of one iteration, counted in minibatch-sized layers: the
    update's forward and two backward products per layer between hidden layers, in actor and critic,
    each minibatch; the rollout's critic pass over the batch (values), in minibatches."""
    between = HIDDEN[model] - 1
    steps = args.get("update_epochs", 10) * args.get("num_minibatches", 8)
    batch = args.get("num_envs", 32) * args.get("num_steps", 256) // 1024
    return steps * 3 * 2 * between + batch * between
