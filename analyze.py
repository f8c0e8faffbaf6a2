"""analyze.py: benchback's TensorBoard logs -> charts, tables, REPORT.md, and the figures of the docs.

    python analyze.py runs/ [more run folders...] --out results
    python analyze.py results/study.tar.xz --out results --docs README.md docs   # what the docs show
    python analyze.py archive runs/study --out results/study.tar.xz   # pack what it reads
    python analyze.py envtime --out results       # env step times (the charts' x axis), cached

Reads every run directory below the given folders (one with a run.json) with
TensorBoard's own event reader, without down-sampling; skips, with one warning
each, runs that are partial (no summary.json), corrupt or empty. Never writes
into a run directory. Warm-up runs (under a folder named warmup) are ignored.
With --docs, rewrites the generated blocks (<!-- BEGIN analyze.py NAME --> ...
<!-- END analyze.py NAME -->) of those Markdown files from the same analysis.
The experiments live in the analysis/ package, one module each.
"""

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import tyro
from rich.table import Table

from analysis import docs
from analysis.decision import decision_section
from analysis.defaults import defaults_section
from analysis.dqn import dqn_learning_section, dqn_section
from analysis.offpolicy import offpolicy_cleanrl_section, offpolicy_learning_section, offpolicy_section
from analysis.agents import agents_section
from analysis.continuous import continuous_learning_section, continuous_section
from analysis.cpuenv import cpuenv_section, envscale_section
from analysis.envs import BENCHBACK_RL_ENVS, complexity, env_times
from analysis.expensive import craftax_learning_section, expensive_section
from analysis.exp1 import section as exp1_section
from analysis.exp2 import exp2_section, exp3_section
from analysis.findings import findings_section
from analysis.gpu import gpu_section
from analysis.headline import headline_section, study_section
from analysis.learning import learning_section
from analysis.output import Output, console
from analysis.profiles import profiles_section
from analysis.pixels import conv_section, pixels_learning_section, pixels_section
from analysis.runs import EXPERIMENTS, find_runs, pack
from analysis.target import target_section, write_targets
from analysis.torchenv import cpucompile_section, torchenv_section
from analysis.tuning import gemm_section, tuning_section
from analysis.tunesweep import tunesweep_section


@dataclass
class Report:
    """Reads benchback run directories and writes charts, tables and REPORT.md."""

    runs: tyro.conf.Positional[tuple[str, ...]] = ("runs",)
    """folders (or archives from `analyze.py archive`) holding run directories, searched recursively"""
    out: str = "results"
    """where the PNG charts, REPORT.md and the env-complexity cache (envtime.json) go; conv.json there (tests/
    benchmark_conv.py --out) adds the convolution benchmark"""
    docs: tuple[str, ...] = ()
    """Markdown files, or folders of them, whose generated blocks to rewrite (e.g. README.md docs)"""


def report(args: Report) -> int:
    import matplotlib

    matplotlib.use("Agg")
    out = Path(args.out)
    runs, skipped = find_runs(list(args.runs))
    cleanrl = [r for r in runs if r.cleanrl]  # CleanRL's own runs: beside ours in one table, counted apart
    profiled = [r for r in runs if r.profile]  # traces (bench.sh's profile preset), not timings
    runs = [r for r in runs if not r.cleanrl and not r.profile]
    for path, why in skipped:
        console.print(f"[yellow]warning[/]: skipped {path}: {why}", soft_wrap=True)  # one line: a path to copy
    if not runs and not profiled:
        console.print("[red]error[/]: no complete run found in " + ", ".join(args.runs))
        return 1
    out.mkdir(parents=True, exist_ok=True)
    # the discrete envs' step times (the continuous ones have their own env-alone runs, env_alone.py's; the
    # pixel study's envs are MinAtar's, measured with the others, and Atari, which is not Gymnax's)
    times = env_times(out, sorted({r.env_id for r in runs if not r.experiment.startswith(
        ("continuous", "pixels", "gpu", "torchenv", "cpucompile", "dqn", "offpolicy", "tunesweep", "hosts"))}))
    cx = complexity(times)
    o = Output(out)
    extra = ([f"{len(cleanrl)} of CleanRL's own scripts"] if cleanrl else []) + (
        [f"{len(profiled)} runs traced by --profile"] if profiled else [])
    theirs = f" (and {', and '.join(extra)})" if extra else ""
    o.md += ["# benchback report", "", f"{len(runs)} runs read from {', '.join(args.runs)}{theirs}; {len(skipped)} skipped.",
             ""]
    by_experiment = {e: [r for r in runs if r.experiment == e] for e in EXPERIMENTS}
    (exp1, exp2, exp3, cpuenv, envscale, agents, expensive, tuning, craftax_learning, continuous,
     continuous_learning, pixels, pixels_learning, gpu, _, torchenv, cpucompile, dqn, dqn_learning,
     offpolicy, offpolicy_learning, offpolicy_cleanrl, gpuscale, _, tunesweep) = by_experiment.values()  # _: hosts
    # (headline: below)
    decision_section(by_experiment, o)  # and the same regimes by host type
    write_targets(by_experiment, out)  # what a run's end line compares its return with
    defaults_section(by_experiment, o)  # README's: what a default run of each script takes
    if headline := by_experiment["headline"] or exp1:  # the shuffled, repeated re-run of Experiment 1 where it ran
        headline_section(headline, cpuenv, agents, expensive, continuous, pixels, o)
    o.heading("The study")
    study_section(runs, skipped, o)
    if times:
        o.table("Environment complexity: each env's step time alone (32 envs, random actions)",
                ["env", "step time of 32 envs (µs)", "relative to the fastest"],
                [[e, f"{t * 1e6:.1f}", f"{cx[e]:.2f}"] for e, t in sorted(times.items(), key=lambda kv: kv[1])],
                block="env-complexity")
    if exp1:
        exp1_section(exp1, cx, o)
    if exp2:
        exp2_section(exp2, cx, o)
    if exp3:
        exp3_section(exp3, o)
    if cpuenv:
        cpuenv_section(cpuenv, o)
    if envscale:
        envscale_section(envscale, o)
    if agents:
        agents_section(agents, o)
    if torchenv:
        torchenv_section(torchenv, o)
    if cpucompile:
        cpucompile_section(cpucompile, o)
    if expensive:
        expensive_section(expensive, times, o)
    if craftax_learning:
        craftax_learning_section(craftax_learning, o)
    if continuous:
        continuous_section(continuous, o)
    if continuous_learning:
        continuous_learning_section(continuous_learning, o)
    if pixels:
        pixels_section(pixels, o)
    if (out / "conv.json").exists():  # tests/benchmark_conv.py's sessions, a result like envtime.json
        conv_section(json.loads((out / "conv.json").read_text()), o)
    if pixels_learning:
        pixels_learning_section(pixels_learning, o)
    if dqn:
        dqn_section(dqn, o)
    if dqn_learning:
        dqn_learning_section(dqn_learning, o, [r for r in cleanrl if r.experiment == "dqn-learning"])
    if offpolicy:
        offpolicy_section(offpolicy, o)
    if offpolicy_learning:
        offpolicy_learning_section(offpolicy_learning, o, [r for r in cleanrl if r.experiment == "offpolicy-learning"])
    if offpolicy_cleanrl:
        offpolicy_cleanrl_section(offpolicy_cleanrl, o, [r for r in cleanrl if r.experiment == "offpolicy-cleanrl"])
    if gpu or gpuscale:
        gpu_section(gpu, headline, gpuscale, o)
    if profiled:
        profiles_section(profiled, o)
    if tuning:
        tuning_section(tuning, o)
        gemm_section(tuning, o)
    if tunesweep:
        tunesweep_section(tunesweep, o)
    if small_exp1 := [r for r in exp1 if r.model == "small"]:
        target_section(small_exp1, o)
    if exp1:
        findings_section(exp1, exp2, exp3, cx, o)
    # learning parity: one agent per run, at the scripts' batch and length, on the cheap envs (not
    # envscale's, the agent scripts', nor Craftax's)
    not_parity = ("envscale", "agents", "expensive", "tuning", "craftax-learning", "continuous", "continuous-learning",
                  "pixels", "pixels-learning", "gpu", "headline", "torchenv", "cpucompile", "dqn", "dqn-learning",
                  "offpolicy", "offpolicy-learning", "offpolicy-cleanrl", "gpuscale", "tunesweep", "hosts")
    if small := [r for r in runs if r.model == "small" and r.experiment not in not_parity]:
        learning_section(small, exp1 or small, o)  # parity over Experiment 1's seeds
    o.claims_table()
    if skipped:
        o.md += ["## Skipped runs", ""] + [f"- `{p}`: {why}" for p, why in skipped] + [""]
    (out / "REPORT.md").write_text("\n".join(o.md))
    console.print(f"wrote {out / 'REPORT.md'} and {len(o.charts)} charts")
    if args.docs:
        try:
            changed = docs.write(args.docs, o.blocks)
        except ValueError as e:
            console.print(f"[red]error[/]: {e}")
            return 1
        console.print(f"generated blocks rewritten in {len(changed)} file(s): {', '.join(map(str, changed)) or '-'}")
    return 0


@dataclass
class Archive:
    """Packs what the report reads of every complete run (run.json, summary.json and the event
    files; not the console logs) into one .tar.xz that analyze.py reads as it reads a folder."""

    runs: tyro.conf.Positional[tuple[str, ...]] = ("runs",)
    """folders holding run directories; each goes in the archive under its own name"""
    out: str = "results/study.tar.xz"
    """the archive to write: a new file, or one not yet committed (a committed archive is never rewritten)"""


@dataclass
class EnvTime:
    """Measures each env's step time with random actions and caches it in OUT/envtime.json."""

    out: str = "results"
    """folder of the cache (and of the report)"""
    envs: tuple[str, ...] = ()
    """env ids to measure (default: benchback-rl's 12 environments)"""
    num_envs: int = 32
    """parallel environments, as in training"""
    steps: int = 2000
    """steps per measurement, inside one jitted lax.scan"""
    force: bool = False
    """measure again even if the cache has the env"""


def committed(path: str) -> bool:
    """Whether git tracks this file (in the repository around it, if any)."""
    where = Path(path).resolve()
    if not where.exists():
        return False
    try:
        ask = subprocess.run(["git", "ls-files", "--error-unmatch", where.name], cwd=where.parent, capture_output=True)
    except FileNotFoundError:  # no git: nothing is committed here
        return False
    return ask.returncode == 0


def main() -> int:
    if sys.argv[1:2] == ["archive"]:
        args = tyro.cli(Archive, args=sys.argv[2:], prog="analyze.py archive")
        if committed(args.out):
            console.print(f"[red]error[/]: {args.out} is committed, and a committed archive is never rewritten: every "
                          "version stays in each clone's history. Pack the new runs into an archive of their own "
                          "(--out results/<study>-<what it adds>.tar.xz) and pass both to analyze.py")
            return 2
        count, left_out = pack(list(args.runs), args.out)
        for path, why in left_out:
            console.print(f"[yellow]warning[/]: left out {path}: {why}")
        console.print(f"wrote {args.out}: {count} runs, {Path(args.out).stat().st_size / 1e6:.1f} MB")
        return 0 if count else 1
    if sys.argv[1:2] == ["envtime"]:
        args = tyro.cli(EnvTime, args=sys.argv[2:], prog="analyze.py envtime")
        times = env_times(Path(args.out), list(args.envs or BENCHBACK_RL_ENVS), args.num_envs, args.steps, args.force)
        table = Table(title="env step time (32 envs, random actions)")
        for col in ("env", "µs per step", "relative"):
            table.add_column(col)
        for env, rel in sorted(complexity(times).items(), key=lambda kv: kv[1]):
            table.add_row(env, f"{times[env] * 1e6:.1f}", f"{rel:.2f}")
        console.print(table)
        return 0
    return report(tyro.cli(Report, description=__doc__))


if __name__ == "__main__":
    sys.exit(main())
