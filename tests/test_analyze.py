"""analyze.py on event files the tests write themselves (known durations, so the expected
speedups are worked out by hand), on broken runs, and on real tiny runs of the scripts."""

import dataclasses
import json
import math

import numpy as np
import pytest
from analysis import agents, continuous, cpuenv, docs, expensive, pixels, runs, stats, tunesweep
from analysis.output import Output
from helpers import STEADY, TINY, analyze, bench, cleanrl_run, load

STARTUP = 1.5  # seconds from a fake run's start to its first iteration


def fake_run(root, variant, env_id, model, seed, total, iterations, synced=False, final_return=100.0, device="cpu",
             rollout_only=False, rollout_share=0.25, session=None, summary=None, steps_per_iteration=8192,
             start_return=0.0, **args):
    """A run directory as the scripts write it, with the given durations (and arguments, and summary entries); its
    returns climb in a line from start_return to final_return."""
    from tensorboard.summary import Writer

    run_dir = root / f"{env_id}__{variant}__{model}__s{seed}__{1_000_000 + seed}"
    run_dir.mkdir(parents=True)
    info = {"args": {"env_id": env_id, "model": model, "seed": seed, "sync_timing": synced,
                     "num_iterations": len(iterations), **args},
            "variant": variant, "versions": {"python": "3.11", "jax": "0.10.2"}, "device": device,
            "cpu": "Test CPU", "start_time": 1000.0 - STARTUP, **({"session": session} if session else {})}
    (run_dir / "run.json").write_text(json.dumps(info))
    summary = {"time/total": total, "charts/episodic_return_final": final_return, **(summary or {})}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    writer = Writer(str(run_dir))
    for i, seconds in enumerate(iterations):
        step = (i + 1) * steps_per_iteration
        writer.add_scalar("time/iteration", seconds, step, wall_time=1000.0 + sum(iterations[: i + 1]))
        writer.add_scalar("memory/peak_rss_mb", 100.0 + i, step)
        writer.add_scalar("charts/episodic_return", start_return + (final_return - start_return) * (i + 1) / len(iterations), step,
                          wall_time=1000.0 + sum(iterations[: i + 1]))
        if rollout_only:  # env_alone.py: every iteration is a rollout
            writer.add_scalar("time/rollout", seconds, step)
        elif synced:
            writer.add_scalar("time/rollout", seconds * rollout_share, step)
            writer.add_scalar("time/update", seconds * (1 - rollout_share), step)
    writer.close()
    return run_dir


ITERATIONS = [5.0] + [1.0] * 7 + [0.5] * 10  # buckets: 5 (iteration 0), 1 (1..7), 0.5 (8..end, 10 of them)


@pytest.fixture
def synthetic(tmp_path):
    runs = tmp_path / "runs"
    for seed, total in ((1, 10.0), (2, 20.0)):
        fake_run(runs, "linen", "CartPole-v1", "small", seed, total, ITERATIONS)
    for seed, total in ((1, 30.0), (2, 60.0)):
        fake_run(runs, "torch", "CartPole-v1", "small", seed, total, [x * 2 for x in ITERATIONS])
    fake_run(runs, "linen", "Acrobot-v1", "small", 1, 10.0, ITERATIONS)
    fake_run(runs, "torch", "Acrobot-v1", "small", 1, 20.0, [x * 3 for x in ITERATIONS])
    fake_run(runs, "linen", "Acrobot-v1", "small", 3, 1.0, ITERATIONS, synced=True)  # Experiment 2
    fake_run(runs, "linen", "Acrobot-v1", "medium", 3, 1.0, ITERATIONS, synced=True)  # Experiment 3
    out = tmp_path / "results"
    out.mkdir()
    # the x axis without measuring: CartPole steps twice as fast as Acrobot
    (out / "envtime.json").write_text(json.dumps({"CartPole-v1": 1e-5, "Acrobot-v1": 2e-5}))
    return runs, out


def test_speedups_by_hand(synthetic):
    runs_dir, _ = synthetic
    found, skipped = runs.find_runs([str(runs_dir)])
    assert not skipped and len(found) == 8
    exp1 = [r for r in found if not r.synced]
    (row,) = stats.speedup_table(exp1, stats.total_time, [("torch", "linen")])
    # one ratio per repeat, never every pair: CartPole seed 1 30/10 and seed 2 60/20 = 3, 3; Acrobot 20/10 = 2
    assert row["ratios"] == 3 and row["envs"] == 2 and row["pair"] == "torch / linen"
    assert row["geomean"] == pytest.approx((3 * 3 * 2) ** (1 / 3))
    assert row["median"] == pytest.approx(3.0)
    # two envs are too few for an interval: the per-env geometric means, 2 (Acrobot) and 3 (CartPole)
    assert math.isnan(row["ci_low"]) and stats.spread(row) == "2 envs, range 2.00–3.00"
    (steady,) = stats.speedup_table(exp1, stats.steady("time/iteration"), [("torch", "linen")])
    # iterations 8..end: 1.0/0.5 for CartPole's two repeats and 1.5/0.5 for Acrobot
    assert steady["geomean"] == pytest.approx((2 ** 2 * 3) ** (1 / 3))


def test_overhead_buckets(synthetic):
    found, _ = runs.find_runs([str(synthetic[0])])
    linen = next(r for r in found if r.variant == "linen" and not r.synced)
    assert stats.iteration_buckets(linen) == pytest.approx((5.0, 1.0, 0.5))


def test_spread_says_what_the_data_carry():
    """An interval from 5 envs or more; from fewer, how many envs (or repeats of one env) and the range;
    from one run, that."""
    many = stats.ratio_row([np.array([x]) for x in (1.0, 2.0, 2.0, 2.0, 4.0)])
    assert stats.spread(many).startswith("[") and stats.ratio_cell(many).startswith("2.00x [")
    few = stats.ratio_row([np.array([1.5]), np.array([3.0]), np.array([2.0])])
    assert stats.spread(few) == "3 envs, range 1.50–3.00"
    one = stats.ratio_row([np.array([1.25])])
    assert stats.ratio_cell(one) == "1.25x (1 run each)"
    seeds = stats.ratio_row([np.array([1.0, 4.0])])
    assert stats.spread(seeds) == "1 env, 2 repeats, range 1.00–4.00"


def test_report_written(synthetic):
    runs_dir, out = synthetic
    before = {p: p.read_bytes() for p in runs_dir.rglob("*") if p.is_file()}
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "| torch / linen | small | 2.62x |" in report
    assert "| linen | small | 3 | 5.00 | 1.00 | 0.500 |" in report  # overhead buckets, 3 runs
    assert "Test CPU" in report and "jax 0.10.2" in report
    lines = report.splitlines()
    for chart in ("headline", "exp1_durations", "exp1_speedups", "exp1_overhead", "exp1_steady_speedups",
                  "exp2_rollout_update", "exp3_compile_modes", "learning_curves", "learning_curves_time"):
        png = out / f"{chart}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", chart
        (at,) = [i for i, line in enumerate(lines) if line.startswith("![") and line.endswith(f"({chart}.png)")]
        assert lines[at + 2].startswith("*") and len(lines[at + 2]) > 40, f"{chart} has no caption"
    assert "Total run time" in proc.stderr  # the same tables on the console
    after = {p: p.read_bytes() for p in runs_dir.rglob("*") if p.is_file()}
    assert before == after, "analyze.py changed a run directory"


def test_cpu_env_experiments_by_hand(tmp_path):
    """The corners' ratios, paired by repeat, and the env-scaling throughputs, on runs whose
    durations are known; a run on another device is never paired."""
    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    # cpuenv: each corner's iterations a known multiple of ITERATIONS, on two envs and two repeats;
    # in repeat 2 the sync loop takes 1.5 times as long; a third repeat's EnvPool run is on a GPU
    corners = {"torch_gymnasium": 8.0, "torch_gymnasium-vector": 2.0, "torch_gymnasium-envpool": 4.0, "torch": 2.0,
               "linen_gymnasium": 4.0, "linen_gymnasium-envpool": 2.0, "linen": 1.0}
    defaults = dict(num_envs=32, num_steps=256, update_epochs=10, num_minibatches=8)
    for env, scale in (("CartPole-v1", 1.0), ("Breakout-MinAtar", 3.0)):
        for variant, factor in corners.items():
            for seed in (1, 2, 3):
                factor_r = factor * (1.5 if seed == 2 and variant == "torch_gymnasium" else 1.0)
                device = "NVIDIA H100" if seed == 3 and variant == "torch_gymnasium-envpool" else "cpu"
                fake_run(runs_dir / "cpuenv" / f"r{seed}", variant, env, "small", seed, 10.0,
                         [x * factor_r * scale for x in ITERATIONS], synced=True, device=device, **defaults)
    # envscale: a rollout (a quarter of each iteration) of 0.1 s for 8 and 16 envs, 0.19 s for 32
    for n, seconds in ((8, 0.4), (16, 0.4), (32, 0.76)):
        fake_run(runs_dir / "envscale" / "r1" / f"envs{n}", "linen", "CartPole-v1", "small", 1, 10.0,
                 [4.0, seconds, seconds, seconds], synced=True, num_envs=n, num_steps=128)
    # the env alone (env_alone.py's runs): rollouts of 0.05 s for 8 envs and 16, 0.08 s for 32
    for n, seconds in ((8, 0.05), (16, 0.05), (32, 0.08)):
        fake_run(runs_dir / "envscale" / "r1" / f"envs{n}", "env-vector", "CartPole-v1", "none", 1, 1.0,
                 [1.0, seconds, seconds, seconds], synced=True, rollout_only=True, num_envs=n, num_steps=128)
    out.mkdir()
    (out / "envtime.json").write_text(json.dumps({"CartPole-v1": 1e-5, "Breakout-MinAtar": 2e-5}))

    loaded, _ = runs.find_runs([str(runs_dir)])
    assert {r.experiment for r in loaded} == {"cpuenv", "envscale"}
    envscale = [r for r in loaded if r.experiment == "envscale"]
    assert sorted(cpuenv.rollout_throughput(r) for r in envscale if r.variant == "linen") == \
        pytest.approx([8 * 128 / 0.1, 16 * 128 / 0.1, 32 * 128 / 0.19])
    assert cpuenv.saturation({8: 10.0, 16: 19.0, 32: 20.0, 64: 20.5}) == 16
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    # steady rollouts, updates and iterations, per repeat: 8 (12 in repeat 2) against 4, 2 and 1 times
    # the same base; repeat 3 pairs everywhere but with the GPU's EnvPool run
    config = "32 envs x 256 steps, 10 epochs x 8"
    for what, pair, cell in (
            ("EnvPool instead of the sync loop, PyTorch kept", "torch_gymnasium-envpool / torch_gymnasium",
             "0.42x (0.33–0.50, 2 repeats)"),  # "A instead of B" is A / B, as every ratio: below 1, A is faster
            ("the JAX env instead of EnvPool, PyTorch kept", "torch / torch_gymnasium-envpool", "0.50x (0.50–0.50, 2 repeats)"),
            ("the framework alone, EnvPool", "torch_gymnasium-envpool / linen_gymnasium-envpool", "2.00x (2.00–2.00, 2 repeats)"),
            ("everything moved to JAX", "torch_gymnasium / linen", "8.00x (8.00–12.00, 3 repeats)")):
        for env in ("Breakout-MinAtar", "CartPole-v1"):
            assert f"| {what} | {pair} | {env} | {config} | small | {cell} | {cell} | {cell} |" in report
    assert "| CartPole-v1 | linen | 10,240 | 20,480 | 21,558 | 16 |" in report
    assert "| CartPole-v1 | env-vector | 20,480 | 40,960 | 51,200 | 32 |" in report
    for chart in ("cpuenv_2x2", "envscale"):
        assert (out / f"{chart}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"({chart}.png)" in report


def test_agents_experiment_by_hand(tmp_path):
    """Time per agent (a run's steady time over its N), paired by repeat, against Linen's batched
    agents at the same N and against one agent per process, on runs whose durations are known."""
    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    # seconds per iteration per agent (times ITERATIONS, whose steady part is 0.5): Linen's agents
    # 1 at every N, torch's 3 alone and 2 at N = 4 (5 in repeat 3); one agent per process: 1.5 and 3
    per_agent = {("linen_agents", 1): 1.0, ("linen_agents", 4): 1.0, ("torch_agents", 1): 3.0, ("torch_agents", 4): 2.0,
                 ("linen", None): 1.5, ("torch", None): 3.0}
    for seed in (1, 2, 3):
        for (variant, n), seconds in per_agent.items():
            seconds = 5.0 if (seed, variant, n) == (3, "torch_agents", 4) else seconds
            folder = runs_dir / "agents" / f"r{seed}" / (f"n{n}" if n else "single")
            fake_run(folder, variant, "CartPole-v1", "small", seed, 10.0, [x * seconds * (n or 1) for x in ITERATIONS],
                     synced=True, **({"num_agents": n} if n else {}))
    out.mkdir()
    (out / "envtime.json").write_text(json.dumps({"CartPole-v1": 1e-5}))
    loaded, _ = runs.find_runs([str(runs_dir)])
    assert {r.experiment for r in loaded} == {"agents"}
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "| CartPole-v1 | 4 | 0.5 (0.5–0.5, 3 repeats) | not run | 1 (1–2.5, 3 repeats) | not run |" in report
    assert "| CartPole-v1 | one per process | 0.75 (0.75–0.75, 3 repeats) | not run | 1.5 (1.5–1.5, 3 repeats) | not run |" \
        in report
    # torch / linen at N; linen alone / linen's agents; torch alone / torch's agents
    assert ("| CartPole-v1 | 1 | – | 3.00x (3.00–3.00, 3 repeats) | – | 1.50x (1.50–1.50, 3 repeats) | "
            "1.00x (1.00–1.00, 3 repeats) | – |") in report
    assert ("| CartPole-v1 | 4 | – | 2.00x (2.00–5.00, 3 repeats) | – | 1.50x (1.50–1.50, 3 repeats) | "
            "1.50x (0.60–1.50, 3 repeats) | – |") in report
    assert agents.headline_rows(loaded) == [
        ["4 agents in one process, CartPole-v1, time per agent: PyTorch (torch.func) / Linen (jax.vmap)",
         "2.00x (2.00–5.00, 3 repeats)"]]
    # the claims results.md cites: Linen's batch is cheaper than Linen alone in every repeat, torch's not
    # (0.60 in repeat 3), torch's time per agent does not fall beyond the ranges (3 against 2..5)
    assert "| `linen_agents-cheaper-than-one-per-process` | cheaper | yes |" in report
    assert "| `torch_agents-cheaper-than-one-per-process` | cheaper | no |" in report
    assert "| `torch_agents-time-per-agent-falls-then-levels-off` | falls, levels off | no |" in report
    assert "| `torch_agents-one-agent-slower-than-the-plain-script` | slower | no |" in report
    assert (out / "agents.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "(agents.png)" in report


@pytest.mark.parametrize("series, holds", [
    ([[3, 3.2], [2, 2.1], [1, 1.2], [1.1, 1.15]], True),  # falls, falls, then level
    ([[3], [2], [1]], True),  # falls at every step
    ([[1, 1.1], [1.05, 1.2]], False),  # level only: nothing falls
    ([[3], [2], [2.5]], False),  # falls, then rises
    ([[3], [2, 2.2], [2.1], [1]], False),  # level, then falls again
])
def test_time_per_agent_falls_then_levels_off_only_step_by_step(series, holds):
    assert agents.falls_then_levels(series) is holds


def test_expensive_experiment_by_hand(tmp_path):
    """The framework ratio and the rollout's share, env by env, cheapest env first, on runs whose
    durations are known: PyTorch 3x Linen on CartPole, 1.1x on Craftax, where the rollout is 90%."""
    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    seconds = {("linen", "CartPole-v1"): 1.0, ("torch", "CartPole-v1"): 3.0,  # times ITERATIONS (steady 0.5)
               ("linen", "Craftax-Classic-Symbolic-v1"): 10.0, ("torch", "Craftax-Classic-Symbolic-v1"): 11.0}
    for seed in (1, 2, 3):
        for (variant, env), x in seconds.items():
            fake_run(runs_dir / "expensive" / f"r{seed}", variant, env, "small", seed, 10.0, [t * x for t in ITERATIONS],
                     synced=True, rollout_share=0.9 if env.startswith("Craftax") else 0.25)
    # a longer run in its own folder: its return climbs from 100 / 12 in the first iteration to 100
    fake_run(runs_dir / "craftax-learning", "linen", "Craftax-Classic-Symbolic-v1", "small", 1, 30.0, ITERATIONS)
    out.mkdir()
    (out / "envtime.json").write_text(json.dumps({"CartPole-v1": 1e-5, "Craftax-Classic-Symbolic-v1": 1e-3}))
    loaded, _ = runs.find_runs([str(runs_dir)])
    assert sorted({r.experiment for r in loaded}) == ["craftax-learning", "expensive"]
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    # env, model, step time (µs), Linen's steady s/iter and rollout share, nnx nnx_cached equinox torch torch_compile
    cartpole = "| CartPole-v1 | small | 10.0 | 0.500 | 0.250 | not run | not run | not run | 3.00x (3.00–3.00, 3 repeats) |"
    craftax = "| Craftax-Classic-Symbolic-v1 | small | 1,000 | 5.00 | 0.900 | not run | not run | not run | 1.10x"
    assert cartpole in report and craftax in report and report.index(cartpole) < report.index(craftax)
    assert "| Craftax-Classic-Symbolic-v1 | small | torch | 3 | 55.0 | 5.50 | 4.95 | 0.550 | 0.900 |" in report
    assert "| Craftax-Classic-Symbolic-v1 | linen | small | 18 | 147456 | 5.56 | 100 | 30.0 |" in report
    # PyTorch's gap on Craftax (1.10x) below CartPole's (3.00x), still above 1
    assert "| `torch-gap-smaller-on-craftax` | smaller | yes |" in report
    assert "| `torch-gap-not-smaller-on-craftax` | smaller | no |" in report
    assert "| `torch-still-slower-on-craftax` | slower | yes |" in report
    assert expensive.headline_rows([r for r in loaded if r.experiment == "expensive"]) == [
        ["expensive env, Craftax-Classic-Symbolic-v1: PyTorch, eager / Linen (steady iteration)", "1.10x (1.10–1.10, 3 repeats)"]]
    assert (out / "expensive.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "(expensive.png)" in report


def test_torchenv_and_cpucompile_by_hand(tmp_path):
    """The env in each framework's own language, on runs whose durations are known: PyTorch's rollout
    with its env in torch against its rollout through Gymnax and against Linen's, each env alone in env
    steps per second; and compiled over eager PyTorch on a CPU env. Each claim decided from them."""
    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    # (iteration factor over ITERATIONS, rollout share): Linen's steady rollout 0.5 x 0.25 = 0.125 s
    timings = {"linen": (1.0, 0.25), "nnx": (1.0, 0.25), "torch": (3.0, 0.5), "torch-torchenv": (2.0, 0.25),
               "torch_compile": (2.0, 0.5), "torch_compile-torchenv": (1.5, 0.2)}
    for seed in (1, 2, 3):
        for variant, (factor, share) in timings.items():
            fake_run(runs_dir / "torchenv" / f"r{seed}", variant, "CartPole-v1", "small", seed, 10.0,
                     [x * factor for x in ITERATIONS], synced=True, rollout_share=share)
        for variant, per_second in (("env-gymnax", 4e6), ("env-gymnax-dlpack", 5e5), ("env-torch-compile", 1e6)):
            fake_run(runs_dir / "torchenv" / f"r{seed}" / "alone" / "envs32", variant, "CartPole-v1", "none", seed, 5.0,
                     [0.1] * 4, rollout_only=True, num_envs=32, summary={"env_steps_per_second": per_second * seed})
        fake_run(runs_dir / "torchenv" / f"r{seed}" / "alone" / "envs256", "env-torch", "CartPole-v1", "none", seed, 5.0,
                 [0.1] * 4, rollout_only=True, num_envs=256, summary={"env_steps_per_second": 3e6})
        for variant, factor in (("linen_gymnasium-envpool", 2.0), ("torch_gymnasium-envpool", 1.0),
                                ("torch_compile_gymnasium-envpool", 0.8), ("torch_compile_gymnasium-envpool-update", 0.7)):
            fake_run(runs_dir / "cpucompile" / f"r{seed}" / "atari", variant, "Breakout-v5", "cnn", seed, 10.0,
                     [x * factor for x in ITERATIONS], synced=True)
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    # Linen's steady iteration, then nnx, torch, torch-torchenv, torch_compile, torch_compile-torchenv over it
    assert ("| CartPole-v1 | small | 0.500 | 1.00x (1.00–1.00, 3 repeats) | 3.00x (3.00–3.00, 3 repeats) | "
            "2.00x (2.00–2.00, 3 repeats) | 2.00x (2.00–2.00, 3 repeats) | 1.50x (1.50–1.50, 3 repeats) |") in report
    assert ("| CartPole-v1 | small | 0.125 | 1.00x (1.00–1.00, 3 repeats) | 6.00x (6.00–6.00, 3 repeats) | "
            "2.00x (2.00–2.00, 3 repeats) | 4.00x (4.00–4.00, 3 repeats) | 1.20x (1.20–1.20, 3 repeats) |") in report
    assert ("| CartPole-v1 | small | 0.33x (0.33–0.33, 3 repeats) | 0.67x (0.67–0.67, 3 repeats) | "
            "0.30x (0.30–0.30, 3 repeats) | 0.75x (0.75–0.75, 3 repeats) |") in report
    assert "| CartPole-v1 | 32 | 8,000,000 | 1,000,000 | – | 2,000,000 |" in report  # medians over seeds 1..3
    assert "| CartPole-v1 | 256 | – | – | 3,000,000 | – |" in report
    for claim, holds in (("torch_compile-torchenv-rollout-faster-than-gymnax", "yes"),
                         ("torch_compile-torchenv-iteration-slower-than-linen", "yes"),
                         ("torch_compile-torchenv-rollout-faster-than-linen", "no"),
                         ("torch-torchenv-iteration-faster-than-gymnax", "yes"),
                         ("env-torch-compile-slower-than-env-gymnax-alone-at-32", "yes"),
                         ("env-torch-compile-faster-than-env-gymnax-dlpack-alone-at-256", "no"),  # not run there
                         ("torch_compile-torchenv-iteration-faster-than-gymnax-small", "yes"),
                         ("torch_compile-torchenv-iteration-level-with-gymnax-small", "no"),
                         ("env-torch-compile-faster-than-env-gymnax-dlpack-alone-at-32", "yes"),
                         ("compiled-faster-than-eager-atari", "yes"),
                         ("compiled-not-faster-than-eager-atari", "no"),
                         ("compiled-faster-than-eager-atari-update", "yes"),
                         ("policy-step-eager-faster-atari", "yes")):
        assert f"| `{claim}` |" in report and report.split(f"| `{claim}` |")[1].split("|")[1].strip() == holds, claim
    # Atari: compiled / eager 0.80 on every part (0.70 with the policy step eager), eager 0.50x Linen's,
    # compiled 0.40x (0.35x)
    assert ("| Atari through EnvPool, the CNN | Breakout-v5 | cnn | update, policy step | 1.00 | 0.80x (0.80–0.80, "
            "3 repeats) | 0.80x (0.80–0.80, 3 repeats) | 0.80x (0.80–0.80, 3 repeats) | 0.50x (0.50–0.50, 3 repeats) | "
            "0.40x (0.40–0.40, 3 repeats) |") in report
    assert ("| Atari through EnvPool, the CNN | Breakout-v5 | cnn | update; policy step eager | 1.00 | 0.70x (0.70–0.70, "
            "3 repeats) |") in report
    assert (out / "torchenv.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_dqn_by_hand(tmp_path):
    """DQN's study on runs whose durations are known: seconds per 1,000 env steps while training (the
    iterations after the first update's), filling the buffer, and a 500k-step run, each over Linen's at
    each update-to-data ratio; its decision rows, and its time to a target of its own learning runs."""
    from analysis import decision, dqn

    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    dqn_args = dict(steps_per_iteration=1000, log_frequency=1000, learning_starts=10_000, total_timesteps=25_000)
    # iteration 0 compiles; 9 fill the buffer (0.1 s); the first update's iteration (9 s: torch.compile compiles
    # there) is neither; 14 train (0.2 s)
    iterations = lambda factor: [3.0] + [0.1] * 9 + [9.0] + [0.2 * factor] * 14
    for seed in (1, 2, 3):
        for k in (1, 4, 10):  # compiled PyTorch is eager's at 10 and 4, 0.75 of it (0.67 with the host buffer) at 1
            for variant, factor in (("dqn_linen", 1.0), ("dqn_nnx", 1.5), ("dqn_torch", 2.0), ("dqn_torch-host", 3.0),
                                    ("dqn_torch_compile", 1.5 if k == 1 else 2.0),
                                    ("dqn_torch_compile-host", 2.0 if k == 1 else 3.0)):
                fake_run(runs_dir / "dqn" / f"r{seed}" / f"tf{k}", variant, "CartPole-v1", "small", seed, 10.0,
                         iterations(factor * (2 if k == 1 else 1)), train_frequency=k, **dqn_args)
        for variant, factor in (("dqn_linen", 1.0), ("dqn_torch", 1.25)):  # 10 envs, an update per vector step
            fake_run(runs_dir / "dqn" / f"r{seed}" / "envs10", variant, "CartPole-v1", "small", seed, 10.0,
                     iterations(factor * 0.5), train_frequency=10, num_envs=10, **dqn_args)
        for variant, seconds in (("dqn_linen", 1.0), ("dqn_nnx", 1.5), ("dqn_torch", 2.0)):  # returns climb for 500 iterations
            fake_run(runs_dir / "dqn-learning" / f"r{seed}", variant, "CartPole-v1", "small", seed, 100.0,
                     [seconds] * 500, final_return=400.0 if seed == 3 and variant == "dqn_nnx" else 500.0,
                     steps_per_iteration=1000, log_frequency=1000, learning_starts=10_000, total_timesteps=500_000,
                     train_frequency=10)
        for variant in ("dqn_linen", "dqn_torch"):  # from images: torch's seed 3 ends at 4, 10 times its first
            fake_run(runs_dir / "dqn-learning" / f"r{seed}" / "breakout", variant, "Breakout-MinAtar", "cnn", seed, 50.0,
                     [1.0] * 50, final_return=4.0 if seed == 3 and variant == "dqn_torch" else 20.0,
                     steps_per_iteration=1000, log_frequency=1000, learning_starts=20_000, total_timesteps=50_000,
                     learning_rate=1e-4, batch_size=32, train_frequency=4, target_network_frequency=1000, end_e=0.01,
                     exploration_fraction=0.1, buffer_size=100_000)
        # CleanRL's own dqn.py, as it writes a run: an episode outside the last 10,000 steps, then one inside
        cleanrl_run(runs_dir / "dqn-learning" / "cleanrl-runs", "dqn", seed, 500_000,
                    {100: 20.0, 489_999: 0.0, 490_000: 300.0 if seed == 3 else 500.0})
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "(and 3 of CleanRL's own scripts)" in report
    assert ("(learning rate 0.0001, batch 32, an update every 4 env steps, a target copy every 1,000, epsilon to 0.01 "
            "over the first 10%) for 50,000 env steps, a replay buffer of 100,000 and learning from step 20,000") in report
    assert "| CleanRL's dqn.py (PyTorch) | 500.0, 500.0, 300.0 | 2 of 3 | – | – | – |" in report
    # eager torch's 500, 500, 500 against dqn.py's: Welch's t of 1 on 2 degrees of freedom; Linen's counterpart,
    # dqn_jax.py, did not run
    assert "| PyTorch, eager | 500.0, 500.0, 500.0 | 3 of 3 | 0.42 |" in report
    # Breakout's target: 90% of the way from the first returns' median, 0.4, to the best median final, 20: 18.04,
    # torch's seed 3 (4 from 0.08) learned, but not five times over its floor of 1
    assert "| Flax Linen | 0.400, 0.400, 0.400 | 20.00, 20.00, 20.00 | 3 of 3 | 3 of 3 |" in report
    assert "| PyTorch, eager | 0.400, 0.400, 0.0800 | 20.00, 20.00, 4.000 | 2 of 3 | 2 of 3 |" in report
    assert "5 of 6 runs ended at 5 times their first return or more" in report
    assert "| 1 | 10 | Flax Linen | device | 0.2 (0.2–0.2, 3 repeats) | 1 | 1 | 1 |" in report
    assert "| 10 | 10 | PyTorch, eager | device | 0.125 (0.125–0.125, 3 repeats) | 1.25x (1.25–1.25, 3 repeats) |" in report
    assert ("| 1 | 10 | PyTorch, eager, buffer on the host | host | 0.6 (0.6–0.6, 3 repeats) | 3.00x (3.00–3.00, "
            "3 repeats) | 1.00x (1.00–1.00, 3 repeats) |") in report
    assert "| 1 | 1 | PyTorch, eager | device | 0.8 (0.8–0.8, 3 repeats) | 2.00x (2.00–2.00, 3 repeats) |" in report
    loaded, _ = runs.find_runs([str(runs_dir)])
    one = next(r for r in loaded if r.variant == "dqn_torch" and r.experiment == "dqn" and dqn.num_envs(r) == 1)
    # start-up, the 11 iterations up to the first update's (3 + 0.9 + 9), then 489 steady ones
    steady = 0.4 if dqn.train_frequency(one) == 10 else 0.8
    assert dqn.run_length(one, 500_000) == pytest.approx(STARTUP + 12.9 + 489 * steady)
    by_experiment = {e: [r for r in loaded if r.experiment == e] for e in runs.EXPERIMENTS}
    rows = {row["regime"].name: row for row in decision.decision_rows(by_experiment)}
    assert rows["DQN, JAX env"]["winner"] == "dqn_linen" and rows["DQN, JAX env"]["loser"] == "dqn_torch"
    assert rows["DQN, JAX env"]["row"]["geomean"] == pytest.approx(2.0)
    assert rows["DQN, JAX env"]["runs"] == 6  # one env's runs: those with 10 envs are not this row's
    assert rows["DQN, many envs"]["row"]["geomean"] == pytest.approx(1.25) and rows["DQN, many envs"]["runs"] == 6
    assert rows["DQN, an update every env step"]["row"]["geomean"] == pytest.approx(1.5)  # compiled PyTorch's
    assert rows["DQN, an update every env step"]["target"] is None  # no learning runs at that ratio
    # its own target, not PPO's: 90% of the way from the first return, 1, to the best median final, 500: 450.1,
    # crossed at the 451st iteration (NNX's seed 3, which ends at 400, never; NNX is not JAX's pick)
    reached = rows["DQN, JAX env"]["target"]
    assert reached["row"]["geomean"] == pytest.approx((STARTUP + 2 * 451) / (STARTUP + 451))
    assert reached["missed"] == {} and reached["paired"] == 3
    assert (f"| Flax Linen | 500.0, 500.0, 500.0 | 3 of 3 | – | 100 (100–100, 3 repeats) | {STARTUP + 475:.3g} "
            f"({STARTUP + 475:.3g}–{STARTUP + 475:.3g}, 3 repeats) (3 of 3 reached it) |") in report
    assert "| Flax NNX | 500.0, 500.0, 400.0 | 2 of 3 |" in report
    for claim, holds in (("dqn-linen-faster-than-torch-on-gymnax", "yes"),
                         ("dqn-compiled-faster-than-eager-every-step", "yes"),
                         ("dqn-compiled-not-faster-than-eager-every-10", "yes"),
                         ("dqn-nnx-equinox-within-20-percent-of-linen", "no"),  # NNX 1.5x, Equinox not run
                         ("dqn-cpu-env-torch-faster-than-linen-every-10", "no"),  # not run
                         ("dqn-cnn-learns-breakout", "no"), ("dqn-every-run-reached-475", "no"),
                         ("dqn-finals-level-with-cleanrl", "no"), ("dqn-cleanrl-jax-ends-below-475-too", "no")):
        assert report.split(f"| `{claim}` |")[1].split("|")[1].strip() == holds, claim
    # level with CleanRL only once every script has its p: dqn_jax.py did not run, so the JAX scripts have none
    assert report.split("| `dqn-finals-level-with-cleanrl` |")[1].split("|")[2].strip().endswith(
        "; no p yet for dqn_linen and dqn_nnx (each one's CleanRL counterpart has fewer than two seeds)")


def test_offpolicy_by_hand(tmp_path):
    """TD3's and SAC's study on runs whose durations are known: seconds per 1,000 env steps while training, filling
    the buffer and over a 1M-step run, each over its algorithm's Linen, with the buffer's place and the env's
    language; the same runs' learning table against -200; their decision rows and their own target."""
    from analysis import decision, offpolicy

    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    # iteration 0 compiles; 4 fill the buffer (0.1 s); the first update's iteration (9 s) is neither; 19 train
    iterations = lambda factor: [3.0] + [0.1] * 4 + [9.0] + [0.2 * factor] * 19
    factors = {"td3_linen": 1.0, "td3_nnx": 1.1, "td3_equinox": 1.15, "td3_torch": 2.0, "td3_torch-host": 3.0,
               "td3_torch-torchenv": 2.5, "td3_torch_compile": 1.5, "td3_torch_compile-host": 2.5,
               "td3_torch_compile-torchenv": 1.8, "sac_linen": 0.8, "sac_torch": 1.6}  # SAC's over its own Linen
    for seed in (1, 2, 3):
        for variant, factor in factors.items():  # from -1,400 up to -150 (NNX's seed 3: -250)
            fake_run(runs_dir / "offpolicy" / f"r{seed}", variant, "Pendulum-v1", "small", seed, 40.0,
                     iterations(factor), final_return=-250.0 if (variant, seed) == ("td3_nnx", 3) else -150.0,
                     start_return=-1400.0, steps_per_iteration=1000, log_frequency=1000, learning_starts=5000,
                     total_timesteps=25_000)
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "CleanRL's settings but 25,000 env steps of which the first 5,000 only fill the buffer" in report
    assert "| TD3 | Flax Linen | device | Gymnax | 0.2 (0.2–0.2, 3 repeats) | 1 | 1 | 1 |" in report
    assert ("| TD3 | PyTorch, eager, buffer on the host | host | Gymnax | 0.6 (0.6–0.6, 3 repeats) | 3.00x (3.00–3.00, "
            "3 repeats) | 1.00x (1.00–1.00, 3 repeats) |") in report
    assert "| TD3 | PyTorch, torch.compile, its env in torch | device | torch | 0.36 (0.36–0.36, 3 repeats) | 1.80x" in report
    assert "| SAC | Flax Linen | device | Gymnax | 0.16 (0.16–0.16, 3 repeats) | 1 | 1 | 1 |" in report
    assert "| SAC | PyTorch, eager | device | Gymnax | 0.32 (0.32–0.32, 3 repeats) | 2.00x (2.00–2.00, 3 repeats) |" in report
    loaded, _ = runs.find_runs([str(runs_dir)])
    one = next(r for r in loaded if r.variant == "td3_torch")
    # start-up, the 6 iterations up to the first update's (3 + 0.4 + 9), then 994 steady ones
    assert offpolicy.run_length(one, 1_000_000) == pytest.approx(STARTUP + 12.4 + 994 * 0.4)
    td3_learning, sac_learning = report.split("### TD3 on Pendulum-v1: ")[1], report.split("### SAC on Pendulum-v1: ")[1]
    assert "| Flax NNX | -150.0, -150.0, -250.0 | 2 of 3 |" in td3_learning.split("###")[0]
    assert "| PyTorch, eager | -150.0, -150.0, -150.0 | 3 of 3 |" in sac_learning.split("###")[0]
    assert "NNX" not in sac_learning.split("###")[0]
    by_experiment = {e: [r for r in loaded if r.experiment == e] for e in runs.EXPERIMENTS}
    rows = {row["regime"].name: row for row in decision.decision_rows(by_experiment)}
    td3 = rows["TD3, JAX env"]  # PyTorch's pick: compiled, with its buffer on the device
    assert (td3["winner"], td3["loser"]) == ("td3_linen", "td3_torch_compile") and td3["row"]["geomean"] == pytest.approx(1.5)
    assert rows["SAC, JAX env"]["row"]["geomean"] == pytest.approx(2.0)
    assert rows["TD3, each framework's own env"]["loser"] == "td3_torch_compile-torchenv"
    # its own target: 90% of the way from the first return, -1,350, to the best median final, -150: -270, first
    # reached by the 23rd iteration (3 + 0.4 + 9, then 17 steady ones)
    reached = td3["target"]
    assert reached["row"]["geomean"] == pytest.approx((STARTUP + 12.4 + 17 * 0.3) / (STARTUP + 12.4 + 17 * 0.2))
    for claim, holds in (("td3-linen-faster-than-torch-on-gymnax", "yes"), ("td3-compiled-faster-than-eager", "yes"),
                         ("td3-nnx-within-20-percent-of-linen", "yes"), ("td3-equinox-slower-than-linen", "yes"),
                         ("td3-compiled-not-faster-than-eager", "no"),
                         ("td3-linen-faster-than-torch-on-its-own-env", "yes"),
                         ("sac-linen-faster-than-torch-on-gymnax", "no"),  # not every torch variant ran
                         ("td3-every-run-ends-at-minus-200", "no"), ("td3-every-run-reached-minus-200", "no"),  # NNX's 3
                         ("sac-every-run-ends-at-minus-200", "yes"), ("sac-every-run-reached-minus-200", "yes")):
        assert report.split(f"| `{claim}` |")[1].split("|")[1].strip() == holds, claim


def test_offpolicy_learning_by_hand(tmp_path):
    """TD3's and SAC's CPU-env twins on HalfCheetah-v5 beside CleanRL's own scripts: each algorithm's learning
    table against its own target, each script's p against CleanRL's in its framework (SAC's Linen against
    CleanRL's PyTorch SAC), and PyTorch's steady time over Linen's in its algorithm."""
    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    iterations = lambda factor: [3.0] + [0.1] * 4 + [9.0] + [0.2 * factor] * 194  # 200 iterations of 1,000 steps
    finals = {"td3_linen_gymnasium": 3000.0, "td3_torch_gymnasium": 3100.0, "sac_linen_gymnasium": 4000.0,
              "sac_torch_gymnasium": 4200.0}
    for seed in (1, 2, 3):
        for variant, final in finals.items():  # PyTorch twice Linen's time in TD3, three times in SAC
            factor = 1.0 if "linen" in variant else 2.0 if "td3" in variant else 3.0
            fake_run(runs_dir / "offpolicy-learning" / f"r{seed}", variant, "HalfCheetah-v5", "small", seed, 100.0,
                     iterations(factor), final_return=final + seed, start_return=-300.0, steps_per_iteration=1000,
                     log_frequency=1000, learning_starts=5000, total_timesteps=200_000)
        for exp_name, final in (("td3_continuous_action", 3100.0), ("sac_continuous_action", 1000.0)):
            cleanrl_run(runs_dir / "offpolicy-learning" / "cleanrl-runs", exp_name, seed, 200_000,
                        {100: -300.0, 195_000: final + 10 * seed}, env_id="HalfCheetah-v5")
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    td3, sac = (report.split(f"### {alg} on HalfCheetah-v5: ")[1].split("###")[0] for alg in ("TD3", "SAC"))
    # the note names the CleanRL scripts that ran, not the three the preset has
    assert "CleanRL's own sac_continuous_action.py and td3_continuous_action.py ran at the same settings" in report
    assert "| CleanRL's td3_continuous_action.py (PyTorch) | 3,110, 3,120, 3,130 | 3 of 3 | – |" in td3
    # eager torch's 3,101..3,103 against td3_continuous_action.py's 3,110..3,130: Welch's p 0.088; Linen's
    # counterpart, td3_continuous_action_jax.py, did not run
    assert "| PyTorch, eager, Gymnasium's env | 3,101, 3,102, 3,103 | 3 of 3 | 0.088 |" in td3
    assert "| Flax Linen, Gymnasium's env | 3,001, 3,002, 3,003 | 3 of 3 | – |" in td3
    # SAC's Linen against CleanRL's PyTorch SAC, which ends near 1,000
    assert "| Flax Linen, Gymnasium's env | 4,001, 4,002, 4,003 | 3 of 3 | 3.0e-06 |" in sac
    assert "CleanRL's sac_continuous_action.py (PyTorch) | 1,010, 1,020, 1,030" in sac and "td3_continuous" not in sac
    torch = "PyTorch, eager, Gymnasium's env"
    assert f"| TD3 | {torch} | 0.4 (0.4–0.4, 3 repeats) | 2.00x (2.00–2.00, 3 repeats) |" in report
    assert "| SAC | Flax Linen, Gymnasium's env | 0.2 (0.2–0.2, 3 repeats) | 1 |" in report
    assert f"| SAC | {torch} | 0.6 (0.6–0.6, 3 repeats) | 3.00x (3.00–3.00, 3 repeats) |" in report
    level = report.split("| `offpolicy-mujoco-finals-level-with-cleanrl` |")[1].split("|")
    assert level[1].strip() == "no" and level[2].strip() == (
        "the smallest p: 2.7e-06 (sac_torch_gymnasium); no p yet for td3_linen_gymnasium (each one's CleanRL "
        "counterpart has fewer than two seeds)")


def test_offpolicy_cleanrl_by_hand(tmp_path):
    """TD3's and SAC's twins beside CleanRL's own scripts in the same sessions: CleanRL's steady time from the wall
    times of its charts/SPS events, each script's over its counterpart's paired by repeat and session only."""
    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    iterations = lambda factor: [3.0] + [0.1] * 24 + [9.0] + [0.2 * factor] * 24  # 50 iterations of 1,000 steps
    theirs = {"td3_continuous_action": 0.05, "td3_continuous_action_jax": 0.015, "sac_continuous_action": 0.03}
    for seed in (1, 2, 3):
        for variant, factor in (("td3_linen_gymnasium", 1.0), ("td3_torch_gymnasium", 2.0),
                                ("sac_linen_gymnasium", 1.0), ("sac_torch_gymnasium", 3.0)):
            fake_run(runs_dir / "offpolicy-cleanrl" / f"r{seed}", variant, "HalfCheetah-v5", "small", seed, 100.0,
                     iterations(factor), session="S1", steps_per_iteration=1000, log_frequency=1000,
                     learning_starts=25_000, total_timesteps=50_000)
        for exp_name, seconds in theirs.items():  # seconds per 100 env steps, logged from step 25,100 on
            session = "S2" if seed == 3 and exp_name == "td3_continuous_action" else "S1"  # not paired: another
            cleanrl_run(runs_dir / "offpolicy-cleanrl" / f"r{seed}" / "cleanrl-runs" / session, exp_name, seed,
                        50_000, {30_000: 100.0}, env_id="HalfCheetah-v5", learning_starts=25_000,
                        sps_times={25_000 + 100 * i: 2000.0 + seconds * i for i in range(1, 251)})
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    table = report.split("### TD3 and SAC on HalfCheetah-v5 beside CleanRL's scripts")[1].split("###")[0]
    # PyTorch's TD3 0.4 s per 1,000 steps against CleanRL's 0.5: 0.8, its seed 3 in another session unpaired
    assert ("| TD3 | PyTorch, eager, Gymnasium's env | 0.4 (0.4–0.4, 3 repeats) | CleanRL's td3_continuous_action.py "
            "(PyTorch) | 0.5 (0.5–0.5, 3 repeats) | 0.80x (0.80–0.80, 2 repeats) |") in table
    assert ("| TD3 | Flax Linen, Gymnasium's env | 0.2 (0.2–0.2, 3 repeats) | CleanRL's td3_continuous_action_jax.py "
            "(Flax Linen) | 0.15 (0.15–0.15, 3 repeats) | 1.33x (1.33–1.33, 3 repeats) |") in table
    assert ("| SAC | Flax Linen, Gymnasium's env | 0.2 (0.2–0.2, 3 repeats) | CleanRL's sac_continuous_action.py "
            "(PyTorch) | 0.3 (0.3–0.3, 3 repeats) | 0.67x (0.67–0.67, 3 repeats) |") in table
    assert report.split("| `offpolicy-twins-not-slower-than-cleanrl` |")[1].split("|")[1].strip() == "no"


def test_runs_on_different_devices_are_never_paired(tmp_path):
    fake_run(tmp_path, "linen", "CartPole-v1", "small", 1, 10.0, ITERATIONS)
    fake_run(tmp_path, "torch", "CartPole-v1", "small", 1, 20.0, ITERATIONS, device="NVIDIA H100")
    found, _ = runs.find_runs([str(tmp_path)])
    assert stats.speedup_table(found, stats.total_time, [("torch", "linen")]) == []


def test_the_fast_checksum_is_tensorboards():
    """analyze.py reads event files with google-crc32c's checksum in place of TensorBoard's pure-Python one: the
    same CRC32C (its check value, and TensorBoard's own on records of every length up to a few hundred bytes)."""
    from analysis.runs import fast_checksums
    from tensorboard.compat.tensorflow_stub import pywrap_tensorflow as stub

    def pure(data):  # what TensorBoard's crc32c computes, from the parts the patch leaves alone
        return stub.crc_finalize(stub.crc_update(stub.CRC_INIT, data))

    fast_checksums()
    assert stub.crc32c(b"123456789") == 0xE3069283  # CRC-32C's check value
    records = [np.random.default_rng(n).bytes(n) for n in range(300)]
    assert [stub.crc32c(r) for r in records] == [pure(r) for r in records]


def test_broken_runs_reported_and_skipped(synthetic):
    runs_dir, out = synthetic
    partial = fake_run(runs_dir, "linen", "CartPole-v1", "small", 7, 10.0, ITERATIONS)
    (partial / "summary.json").unlink()
    empty = fake_run(runs_dir, "linen", "CartPole-v1", "small", 8, 10.0, ITERATIONS)
    for f in empty.glob("*tfevents*"):
        f.unlink()
    corrupt = fake_run(runs_dir, "linen", "CartPole-v1", "small", 9, 10.0, ITERATIONS)
    (corrupt / "run.json").write_text("{not json")
    damaged = fake_run(runs_dir, "linen", "CartPole-v1", "small", 10, 10.0, ITERATIONS)
    next(damaged.glob("*tfevents*")).write_bytes(b"\x00garbage" * 64)
    profiled = fake_run(runs_dir, "linen", "CartPole-v1", "small", 11, 10.0, ITERATIONS, profile=True)  # no trace
    tracked = fake_run(runs_dir, "linen", "CartPole-v1", "small", 12, 10.0, ITERATIONS, track="mlflow")
    (runs_dir / "not_a_run").mkdir()
    (runs_dir / "not_a_run" / "notes.txt").write_text("ignored")

    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    warnings = [line for line in proc.stderr.splitlines() if "skipped" in line]
    for run_dir, why in ((partial, "partial"), (empty, "empty"), (corrupt, "corrupt"), (damaged, ""),
                         (profiled, "--profile, but its trace"), (tracked, "--track")):
        assert any(run_dir.name in w and why in w for w in warnings), (run_dir.name, warnings)
    assert not any("not_a_run" in w for w in warnings)
    assert len(warnings) == 6
    report = (out / "REPORT.md").read_text()
    assert "8 runs read" in report and "6 skipped" in report


def op(name, ts, dur, tid=1, **extra):
    return {"ph": "X", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid, **extra}


def test_a_trace_is_cut_to_its_last_iteration_and_read_by_hand():
    """The profile table's arithmetic on a trace written here: the cut keeps the last iteration from its
    rollout range on, times from its start; torch's ops nested in another (addmm in linear) or overlapping
    on another thread count once; the time in them is their union."""
    from analysis import profiles

    raw = [{"ph": "M", "name": "thread_name", "pid": 1, "tid": 1, "args": {"name": "python"}},
           op("rollout", 100.0, 50.0), op("aten::linear", 110.0, 20.0, cat="cpu_op"),  # iteration 1: cut away
           op("rollout", 1000.0, 400.0, cat="user_annotation"), op("$threading.py wait", 1001.0, 5.0),
           op("aten::linear", 1010.0, 100.0, cat="cpu_op"), op("aten::addmm", 1020.0, 80.0, cat="cpu_op"),
           op("aten::item", 1200.0, 50.0, cat="cpu_op"), op("aten::add", 1220.0, 60.0, tid=2, cat="cpu_op"),
           op("update", 1400.0, 600.0, cat="user_annotation"), op("aten::mul", 1900.0, 100.0, cat="cpu_op")]
    cut = profiles.cut(raw)
    assert cut["iterationsTraced"] == 2
    kept = [e for e in cut["traceEvents"] if e["ph"] == "X"]
    assert [(e["name"], e["ts"]) for e in kept][:2] == [("rollout", 0.0), ("aten::linear", 10.0)]  # no Python tracer's
    tops = profiles.top_level([e for e in kept if e.get("cat") == "cpu_op"])
    assert [e["name"] for e in tops] == ["aten::linear", "aten::item", "aten::add", "aten::mul"]
    assert profiles.merged([(10, 110), (200, 250), (220, 280), (900, 1000)]) == [(10, 110), (200, 280), (900, 1000)]


def test_an_offpolicy_step_splits_into_its_phases_by_hand():
    """Issue 53's split on a cut trace written here (µs from the iteration's start): a torch step, its ops inside its
    host ranges; then a JAX step whose update, launched and returned at once, runs while the host waits in the next
    policy step (that time is the update's); statistics after the last range are the rest; the whole loop as one
    program is its own column. Every µs counted once."""
    from analysis import profiles

    jit = lambda module, ts, dur: op("fusion", ts, dur, tid=9, args={"hlo_module": module})
    events = [op("iteration", 0, 900), op("policy_step", 0, 100), op("aten::addmm", 10, 50, cat="cpu_op"),
              op("env_step", 100, 300), op("buffer", 400, 50), op("update", 450, 10),  # the update's call returns
              jit("jit_add", 410, 30), jit("jit_train_step", 455, 245),  # ... and its program runs on
              op("policy_step", 460, 300), jit("jit_policy", 700, 50),  # the host waits in the next policy step
              jit("jit__mean", 800, 20), op("$stats", 790, 100)]  # statistics: no phase
    split = profiles.split(events)
    # ms: the first policy step, and the second's from the update's end (700) to its range's (760)
    assert split == pytest.approx({"env_step": 0.300, "policy_step": 0.100 + 0.060, "buffer": 0.050,
                                   "update": 0.250, "loop": 0.0, "rest": 0.140}, abs=2e-3)
    assert sum(split.values()) == pytest.approx(0.9, abs=2e-3)
    one_program = profiles.split([op("iteration", 0, 5), jit("jit_iteration", 10, 80)])  # Gymnax: the whole loop
    assert one_program["loop"] == pytest.approx(0.080, abs=2e-3)


def test_a_profiled_run_without_its_trace_is_skipped_saying_why(tmp_path):
    fake_run(tmp_path, "torch", "CartPole-v1", "small", 1, 10.0, ITERATIONS, profile=True)
    found, skipped = runs.find_runs([str(tmp_path)])
    assert not found and "no trace.json.gz or perfetto_trace.json.gz" in skipped[0][1]


def test_a_committed_archive_is_never_rewritten(synthetic, tmp_path):
    """analyze.py archive writes a new archive, or packs again one not yet committed (a study that grows in a
    session); an archive git tracks it refuses (exit 2, the file untouched): each rewrite would stay in every
    clone's history. The committed study's own archive is refused as such."""
    import subprocess

    runs_dir, _ = synthetic
    repo, tarball = tmp_path / "repo", tmp_path / "repo" / "study.tar.xz"
    repo.mkdir()
    git = lambda *a: subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *a], cwd=repo, check=True,
                                    capture_output=True)
    git("init", "-q")
    for attempt in range(2):  # new, then packed again while uncommitted
        proc = analyze("archive", runs_dir, "--out", tarball)
        assert proc.returncode == 0, proc.stderr
    git("add", "study.tar.xz"), git("commit", "-q", "-m", "a study")
    before = tarball.read_bytes()
    proc = analyze("archive", runs_dir, "--out", tarball)
    assert proc.returncode == 2 and "is committed" in proc.stderr and "archive of their own" in proc.stderr
    assert tarball.read_bytes() == before
    proc = analyze("archive", runs_dir)  # the default --out: results/study.tar.xz, committed
    assert proc.returncode == 2 and "results/study.tar.xz is committed" in proc.stderr


def test_archive_reads_as_the_folder(synthetic, tmp_path):
    """analyze.py archive packs what the report reads; the report from the archive is the folder's."""
    runs_dir, out = synthetic
    for f in list(runs_dir.glob("*/run.json"))[:2]:
        (f.parent / "train.log").write_text("console output, not analysed")
    partial = fake_run(runs_dir, "linen", "CartPole-v1", "small", 7, 10.0, ITERATIONS)
    (partial / "summary.json").unlink()
    tarball = tmp_path / "study.tar.xz"
    proc = analyze("archive", runs_dir, "--out", tarball)
    assert proc.returncode == 0, proc.stderr
    assert "8 runs" in proc.stderr and "left out" in proc.stderr and partial.name in proc.stderr
    import tarfile

    names = tarfile.open(tarball).getnames()
    runs_packed = [n for n in names if n != runs.LEFT_OUT]  # and the list of what was left out
    assert all(n.startswith("runs/") for n in runs_packed) and len(runs_packed) == 8 * 3  # run.json, summary, events
    assert not any(n.endswith(".log") or partial.name in n for n in names)

    from_archive = tmp_path / "from_archive"
    from_archive.mkdir()
    (from_archive / "envtime.json").write_text((out / "envtime.json").read_text())
    for args, where in (((runs_dir, "--out", out), out), ((tarball, "--out", from_archive), from_archive)):
        proc = analyze(*args)
        assert proc.returncode == 0, proc.stderr
    folder_report, archive_report = ((where / "REPORT.md").read_text().split("\n") for where in (out, from_archive))
    # the partial run left out of the archive is still counted, and named, as skipped
    assert archive_report[2] == f"8 runs read from {tarball}; 1 skipped."
    assert any(line.startswith(f"- `{tarball}/runs/{partial.name}`: left out of the archive: partial")
               for line in archive_report)
    same = folder_report.index("## Skipped runs")
    assert folder_report[3:same] == archive_report[3:same] and same > 50

    # unpacked and packed again (a study that grows), the partial run is still listed as left out
    unpacked = tmp_path / "unpacked"
    tarfile.open(tarball).extractall(unpacked, filter="data")
    again = tmp_path / "again.tar.xz"
    proc = analyze("archive", unpacked / "runs", "--out", again)
    assert proc.returncode == 0, proc.stderr
    listed = json.loads(tarfile.open(again).extractfile(runs.LEFT_OUT).read())
    assert [path for path, _ in listed] == [f"runs/{partial.name}"], listed


def test_findings_and_learning_parity_by_hand(tmp_path):
    """benchback-rl's findings table and the parity tests, on runs whose times and returns are known."""
    runs, out = tmp_path / "runs" / "exp1", tmp_path / "results"
    # torch takes 4x, 2x, 1x Linen's time on envs of complexity 1, 2, 4: 0.1x per 10x complexity
    for env, torch_total in (("CartPole-v1", 40.0), ("Acrobot-v1", 20.0), ("MountainCar-v0", 10.0)):
        for seed, linen_return, torch_return in ((1, 100.0, 10.0), (2, 110.0, 20.0), (3, 120.0, 30.0)):
            fake_run(runs, "linen", env, "small", seed, 10.0, ITERATIONS, final_return=linen_return)
            fake_run(runs, "torch", env, "small", seed, torch_total, [x * 2 for x in ITERATIONS],
                     final_return=torch_return)
            fake_run(runs, "nnx", env, "small", seed, 12.0, [x * 1.5 for x in ITERATIONS],
                     final_return=linen_return + 2)
    for variant, total in (("linen", 10.0), ("torch", 15.0)):  # large: only on CartPole
        fake_run(runs, variant, "CartPole-v1", "large", 1, total, ITERATIONS)
    out.mkdir()
    (out / "envtime.json").write_text(json.dumps({"CartPole-v1": 1e-5, "Acrobot-v1": 2e-5, "MountainCar-v0": 4e-5}))
    proc = analyze(tmp_path / "runs", "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    section = report.split("## benchback-rl's findings next to ours")[1].split("## Learning parity")[0]
    ours = {cells[0]: cells[2] for line in section.splitlines() if line.startswith("| ")
            for cells in [line[2:-2].split(" | ")]}
    assert ours["Linen vs NNX, small model (nnx / linen)"] == "1.20x (3 envs, range 1.20–1.20)"
    assert ours["Linen vs PyTorch, large model"] == "1.50x (1 run each)"  # one env: no interval
    assert ours["Linen vs NNX, large model"] == "not run"
    assert ours["The gap shrinks with model size (torch / linen)"] == "4.00x / 1.50x (small / large; on CartPole-v1)"
    assert ours["The gap shrinks with env complexity (small)"] == (
        "torch / linen per env from 1.00x (MountainCar-v0) to 4.00x (CartPole-v1); 0.10x per 10x env complexity "
        "over 3 envs, 4.00x on the simplest (CartPole-v1), 1.00x on the most complex (MountainCar-v0)")
    # every variant's iterations 1..7 take twice its 8..end (ITERATIONS: 1 against 0.5)
    assert ours["PyTorch's iteration times are flat from iteration 1 (1..7 / 8..end, small)"] == (
        "torch 2.00x, linen 2.00x")
    assert ours["PyTorch has the smallest first-iteration overhead (iteration 0, small)"] == (
        "torch 10.0 s, linen 5.00 s, nnx 7.50 s")
    # returns 100/110/120 (linen), 102/112/122 (nnx), 10/20/30 (torch) on every env
    assert "| CartPole-v1 | small | linen | 3 | 110 |  |" in report
    assert "| CartPole-v1 | small | nnx | 3 | 112 | no difference detected (p = 0.82, 3 vs 3 seeds) |" in report
    assert "| CartPole-v1 | small | torch | 3 | 20.0 | differs (p < 0.001, 3 vs 3 seeds) |" in report
    assert "| CartPole-v1 | large | torch | 1 | 100 | not tested (fewer than 2 runs) |" in report
    # over the 3 envs: nnx is 0.2 pooled SDs above Linen everywhere (inside the 0.5 margin), torch 9 below
    parity = report.split("### Learning parity, per variant")[1]
    assert "| nnx against linen | small | 3 | none | equivalent (mean +0.20 SD over 3 envs, p < 0.001) |" in parity
    assert ("| torch against linen | small | 3 | Acrobot-v1, CartPole-v1, MountainCar-v0 | not shown equivalent "
            "(mean -9.00 SD over 3 envs, p = 1) |") in parity
    assert "6 of 6 per-env tests" not in parity and "3 of 6 per-env tests detect a difference" in parity


def test_equivalence_test_by_hand():
    """TOST: a mean difference well inside the margin is shown equivalent, one near it is not."""
    from scipy import stats as scipy_stats

    inside = [0.1, -0.1, 0.05, 0.0, 0.12, -0.08]
    assert stats.tost_p(inside, 0.5) < 0.001
    near = [0.45, 0.55, 0.5, 0.4, 0.6]
    assert stats.tost_p(near, 0.5) > 0.4
    d = np.array([0.3, 0.1, 0.2, 0.4])  # by hand: the upper test is the binding one
    t = (d.mean() - 0.5) / (d.std(ddof=1) / 2)
    assert stats.tost_p(d, 0.5) == pytest.approx(scipy_stats.t.cdf(t, 3))
    assert stats.welch_p([1.0, 2.0, 3.0], [1.0, 2.0, 3.0]) == pytest.approx(1.0)
    assert math.isnan(stats.welch_p([1.0], [1.0, 2.0]))


def test_no_runs_is_an_error(tmp_path):
    proc = analyze(tmp_path, "--out", tmp_path / "results")
    assert proc.returncode == 1 and "no complete run" in proc.stderr


def test_bootstrap_interval_narrows_with_agreement():
    agree = [np.full(4, 2.0) for _ in range(6)]
    assert stats.bootstrap_geomean_ci(agree) == pytest.approx((2.0, 2.0))
    spread = [np.full(4, x) for x in (1.0, 2.0, 4.0, 8.0, 16.0, 32.0)]
    low, high = stats.bootstrap_geomean_ci(spread)
    assert low < stats.geomean(np.concatenate(spread)) < high and high / low > 2
    four = [np.full(4, x) for x in (1.0, 2.0, 4.0, 8.0)]  # fewer than 5 envs: no interval
    assert all(math.isnan(x) for x in stats.bootstrap_geomean_ci(four))


def test_envtime_measures_and_caches(tmp_path):
    envs = ("CartPole-v1", "MountainCar-v0", "Breakout-MinAtar")
    proc = analyze("envtime", "--out", tmp_path, "--envs", *envs, "--steps", "200")
    assert proc.returncode == 0, proc.stderr
    times = json.loads((tmp_path / "envtime.json").read_text())
    assert set(times) == set(envs) and all(t > 0 for t in times.values())
    assert times["Breakout-MinAtar"] > times["CartPole-v1"]  # a 10x10 grid game steps slower than 4 floats
    # MountainCar's physics is as much work as CartPole's; when only its constant reward
    # reached the output, XLA dropped the physics and it measured 180x faster.
    assert times["MountainCar-v0"] > times["CartPole-v1"] / 10


def test_pipeline_on_real_tiny_runs(tmp_path):
    """bench.sh runs two scripts for real; analyze.py turns their logs into the report."""
    runs_dir = tmp_path / "runs"
    swept = bench("exp2", "--envs", "CartPole-v1", "--variants", "linen,torch", "--out", runs_dir, "--", *TINY, *STEADY)
    assert swept.returncode == 0, swept.stdout + swept.stderr
    proc = analyze(runs_dir, "--out", tmp_path / "results")
    assert proc.returncode == 0, proc.stderr
    report = (tmp_path / "results" / "REPORT.md").read_text()
    assert "2 runs read" in report and "| torch / linen | small |" in report
    assert (tmp_path / "results" / "exp2_rollout_update.png").exists()
    assert not (tmp_path / "results" / "exp3_compile_modes.png").exists()  # Experiment 3 is Acrobot-v1


def test_generated_blocks_are_written_and_checked(tmp_path):
    """analyze.py --docs rewrites each block between its markers and nothing else; a figure
    edited by hand, or a block no analysis generates, is named."""
    page = tmp_path / "page.md"
    page.write_text("intro\n<!-- BEGIN analyze.py a -->\nold\n<!-- END analyze.py a -->\nprose 2x\n"
                    "<!-- BEGIN analyze.py b -->\n<!-- END analyze.py b -->\n")
    generated = {"a": "| 1.00x |\n", "b": "- two\n", "c": "unused\n"}
    assert docs.stale(page, generated) == ["a", "b"]
    assert docs.write([tmp_path], generated) == [page]
    text = page.read_text()
    assert text == ("intro\n<!-- BEGIN analyze.py a -->\n| 1.00x |\n<!-- END analyze.py a -->\nprose 2x\n"
                    "<!-- BEGIN analyze.py b -->\n- two\n<!-- END analyze.py b -->\n")
    assert docs.stale(page, generated) == [] and docs.write([page], generated) == []
    page.write_text(text.replace("1.00x", "1.01x"))
    assert docs.stale(page, generated) == ["a"]
    page.write_text(text + "<!-- BEGIN analyze.py nope -->\n<!-- END analyze.py nope -->\n")
    with pytest.raises(ValueError, match="nope"):
        docs.write([page], generated)


def test_steady_state_needs_ten_iterations(tmp_path):
    """Iterations 8..end, and at least 10 of them: two iterations are no steady state."""
    short = fake_run(tmp_path, "linen", "CartPole-v1", "small", 1, 10.0, ITERATIONS[:12])
    whole = fake_run(tmp_path, "torch", "CartPole-v1", "small", 1, 10.0, ITERATIONS)
    found = {r.variant: r for r in runs.find_runs([str(tmp_path)])[0]}
    assert stats.steady("time/iteration")(found["linen"]) is None and math.isnan(stats.iteration_buckets(found["linen"])[2])
    assert stats.steady("time/iteration")(found["torch"]) == pytest.approx(0.5)
    assert stats.startup(found["torch"]) == pytest.approx(STARTUP)  # from iteration 0's event, not summary.json
    assert stats.first_iteration(found["torch"]) == pytest.approx(5.0)
    assert short.exists() and whole.exists()


def test_runs_of_two_sessions_are_never_paired(tmp_path):
    """Monday's linen run against Tuesday's torch run measures the machine too: never paired, and
    a table made of several sessions says so."""
    fake_run(tmp_path / "a", "linen", "CartPole-v1", "small", 1, 10.0, ITERATIONS, session="monday")
    fake_run(tmp_path / "b", "torch", "CartPole-v1", "small", 1, 20.0, ITERATIONS, session="tuesday")
    fake_run(tmp_path / "b", "linen", "CartPole-v1", "small", 1, 5.0, ITERATIONS, session="tuesday")
    found, _ = runs.find_runs([str(tmp_path)])
    (row,) = stats.speedup_table(found, stats.total_time, [("torch", "linen")])
    assert row["ratios"] == 1 and row["geomean"] == pytest.approx(4.0)  # Tuesday's pair only
    assert stats.sessions_note(found) == "Sessions: 2 sessions (monday, tuesday); ratios pair runs of one session only."
    fake_run(tmp_path / "c", "nnx", "CartPole-v1", "small", 1, 5.0, ITERATIONS)
    assert "1 run from before sessions were recorded" in stats.sessions_note(runs.find_runs([str(tmp_path)])[0])


def calibration(session, torch_step=0.004, jax_step=0.002, torch_layer=(0.001, 0.020), jax_layer=(0.001, 0.010)):
    """What calibrate.py writes at the start of a session."""
    return {"session": session, "machine": {}, "versions": {}, "layer_rows": 1024,
            "layer_widths": {"medium": 256, "large": 1024},
            "layer_seconds": {"torch": dict(zip(("medium", "large"), torch_layer)),
                              "jax": dict(zip(("medium", "large"), jax_layer))},
            "minibatch_step_seconds": {"torch": torch_step, "jax": jax_step}}


def test_tuning_experiment_by_hand(tmp_path):
    """Each setting against the same script under XLA's default, torch.compile's scopes, the
    fastest measured (only what was faster in every repeat) and how the headline ratios move;
    the session's calibration in the sessions table and the layers' share of the gap."""
    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    # seconds per iteration, times ITERATIONS' steady 0.5: linen 1 (0.8 with XLA on one thread, in every
    # repeat); torch 3 (2.7 with XLA on one thread but 3.3 in repeat 3; 4 on one torch thread); torch.compile:
    # update+policy 2, grads 1.5 in every repeat
    seconds = {("linen", "xla-n"): 1.0, ("linen", "xla-1"): 0.8, ("torch", "xla-n"): 3.0, ("torch", "xla-1"): 2.7,
               ("torch", "torch-1"): 4.0, ("torch_compile-update+policy", "xla-n"): 2.0,
               ("torch_compile-grads", "xla-n"): 1.5}
    for seed in (1, 2, 3):
        for model in ("small", "medium"):
            for (variant, setting), x in seconds.items():
                x = 3.3 if (seed, variant, setting) == (3, "torch", "xla-1") else x
                fake_run(runs_dir / "tuning" / f"r{seed}" / setting, variant, "CartPole-v1", model, seed, 10.0,
                         [t * x for t in ITERATIONS], synced=True, session="s1",
                         update_epochs=10, num_minibatches=8, num_envs=32, num_steps=256)
    (runs_dir / "sessions").mkdir()
    (runs_dir / "sessions" / "s1.json").write_text(json.dumps(calibration("s1")))
    out.mkdir()
    (out / "envtime.json").write_text(json.dumps({"CartPole-v1": 1e-5}))
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "| CartPole-v1 | small | linen | xla-1 | 3 | 0.400 | 0.100 | 0.300 | 0.80x (0.80–0.80, 3 repeats) |" in report
    assert "| CartPole-v1 | small | torch | xla-1 | 3 | 1.35 | 0.338 | 1.01 | 0.90x (0.90–1.10, 3 repeats) |" in report
    assert "| CartPole-v1 | medium | torch_compile-grads | loss, gradients and clip; Adam eager | 0.750 | " \
           "0.188 | 0.562 | 0.75x (0.75–0.75, 3 repeats) | 0.50x (0.50–0.50, 3 repeats) |" in report
    # linen on one XLA thread and torch_compile's grads were faster in every repeat; torch's xla-1 was not
    assert "| linen | linen (xla-n) | linen (xla-1) |" in report
    assert "| torch | torch (xla-n) | torch (xla-n) |" in report
    assert "| torch_compile | torch_compile-update+policy (xla-n) | torch_compile-grads (xla-n) |" in report
    assert "| CartPole-v1 | small | torch_compile / linen | 2.00x (2.00–2.00, 3 repeats) | 1.87x (1.87–1.87, 3 repeats) |" \
        in report
    # the sessions table: the calibration's step and 1024-wide layer (ms); the layers' share of the gap:
    # medium: no difference between the layers, large not run here
    assert "| s1 | 42 | tuning | Test CPU |" in report and "| 4.00 | 2.00 | 20.00 | 10.00 |" in report
    assert "| s1 | medium | 976 | 0.00 | 1.00 | 0% |" in report


def fake_sweep(root, variant, seed, size, seconds, finals, session="s"):
    """A tune.py sweep as bench.sh's tunesweep lays it out: an agent script's one run of `seconds` whose agents end
    with `finals`, or a single-agent script's trials of `seconds` each, back to back, ending with `finals`."""
    sweep = root / "tunesweep" / f"r{seed}" / f"n{size}" / f"CartPole-v1__{variant}__small__s{seed}__{session}"
    population = variant.endswith("_agents")
    trials = {f"0-{size - 1}": max(finals)} if population else dict(enumerate(finals))
    for k, (trial, final) in enumerate(trials.items()):
        run_dir = fake_run(sweep / "trials" / str(trial), variant, "CartPole-v1", "small", seed, seconds, ITERATIONS,
                           final_return=final, session=session, **({"num_agents": size} if population else {}),
                           summary={"charts/episodic_return_final_per_agent": finals} if population else None)
        info = json.loads((run_dir / "run.json").read_text())
        (run_dir / "run.json").write_text(json.dumps({**info, "start_time": 100.0 + k * seconds}))


def test_tunesweep_by_hand(tmp_path):
    """The sweep study on sweeps whose times and returns are known: wall time per trial each way, the population
    against the same framework's trials one by one (a smaller sweep the one-by-one sweep's first trials), the best
    return each found in the population's time, and the decision table's row (each framework's fastest way)."""
    runs_dir, out = tmp_path / "runs", tmp_path / "results"
    for seed in (1, 2, 3):  # one by one: Linen 10 s a trial, PyTorch 20; populations: Linen 5 s a trial at N = 4,
        # PyTorch 15 (22.5 in repeat 3) at N = 4 and 15 at N = 2
        fake_sweep(runs_dir, "linen", seed, 4, 10.0, [100.0, 300.0, 200.0, 400.0])
        fake_sweep(runs_dir, "torch", seed, 4, 20.0, [100.0, 300.0, 200.0, 400.0])
        fake_sweep(runs_dir, "linen_agents", seed, 4, 20.0, [150.0, 250.0, 350.0, 50.0])
        fake_sweep(runs_dir, "linen_agents", seed, 2, 12.0, [150.0, 250.0])
        fake_sweep(runs_dir, "torch_agents", seed, 4, 90.0 if seed == 3 else 60.0, [150.0, 250.0, 350.0, 50.0])
        fake_sweep(runs_dir, "torch_agents", seed, 2, 30.0, [150.0, 250.0])
    fake_sweep(runs_dir, "linen", 1, 4, 10.0, [100.0, 300.0], session="cut")  # cut off after 2 of 4 trials
    out.mkdir()
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "Sweeps left out, incomplete (cut off, or a trial failed): 1." in report
    assert ("| CartPole-v1 | 4 | 10 (10–10, 3 repeats) | 20 (20–20, 3 repeats) | 5 (5–5, 3 repeats) | "
            "15 (15–22.5, 3 repeats) |") in report
    # N = 2: the one-by-one sweep's first 2 trials, 20 s; the population's 12 s, by when 1 trial was done
    assert ("| CartPole-v1 | 2 | Linen (jax.vmap) | 1.67x (1.67–1.67, 3 repeats) | 250 (250–250, 3 repeats) | "
            "1 of 2 | 100 (100–100, 3 repeats) | 300 (300–300, 3 repeats) |") in report
    assert ("| CartPole-v1 | 4 | Linen (jax.vmap) | 2.00x (2.00–2.00, 3 repeats) | 350 (350–350, 3 repeats) | "
            "2 of 4 | 300 (300–300, 3 repeats) | 400 (400–400, 3 repeats) |") in report
    assert ("| CartPole-v1 | 4 | PyTorch (torch.func) | 1.33x (0.89–1.33, 3 repeats) | 350 (350–350, 3 repeats) | "
            "3 of 4 | 300 (300–400, 3 repeats) | 400 (400–400, 3 repeats) |") in report  # repeat 3: 4 in 90 s
    # the decision at N = 4: Linen's population against PyTorch's, 3, 3 and 4.5 times the time per trial
    assert ("| tuning sweep |" in report and "| Linen (jax.vmap) | PyTorch (torch.func) / Linen (jax.vmap) | "
            "3.43x (1 env, 3 repeats, range 3.00–4.50) |") in report
    # what the docs may say: Linen's population is cheaper per trial in every repeat and has the better best by its
    # end; PyTorch's is not (repeat 3: 22.5 s a trial against 20, and 400 found one by one by then against 350)
    for claim, holds in (("linen_agents-cheaper-per-trial-than-one-by-one", "yes"),
                         ("torch_agents-cheaper-per-trial-than-one-by-one", "no"),
                         ("linen_agents-finds-better-by-its-end", "yes"), ("torch_agents-finds-better-by-its-end", "no")):
        assert {n: h for n, _, h in docs.CLAIM_ROW.findall(report)}[f"tunesweep-{claim}"] == holds
    # every JAX population against every PyTorch one, at N = 4: NNX as Linen, compiled PyTorch as eager
    units = [u for u in tunesweep.sweeps(runs.find_runs([str(runs_dir)])[0])[0] if u.info["sweep_size"] == 4]
    again = lambda v, w, slower=1.0: [dataclasses.replace(u, variant=w, summary={
        **u.summary, "time/total": u.summary["time/total"] * slower}) for u in units if u.variant == v]
    for slower, holds in ((1.0, True), (4.0, False)):  # planted: NNX's population as slow as PyTorch's
        out = Output(tmp_path)
        tunesweep.tunesweep_claims(units + again("linen_agents", "nnx_agents", slower) +
                                   again("torch_agents", "torch_agents_compile"), {}, [("CartPole-v1", 4)], out)
        assert out.claims["tunesweep-jax-populations-cheaper-than-torchs"][0] is holds


def test_continuous_learning_against_the_bars(tmp_path):
    """bench.sh's continuous-learning folder: each env and variant's seeds against the bar every seed must
    reach (-300 on Pendulum, 1,000 on HalfCheetah), the chart, and no env-complexity measurement for them."""
    runs_dir, out = tmp_path / "runs", tmp_path / "out"
    for seed, final in ((1, -150.0), (2, -350.0)):  # the second seed misses the bar
        fake_run(runs_dir / "continuous-learning" / f"r{seed}", "linen", "Pendulum-v1", "small", seed, 10.0, ITERATIONS,
                 final_return=final)
    fake_run(runs_dir / "continuous-learning" / "r1", "torch_gymnasium", "HalfCheetah-v5", "small", 1, 10.0, ITERATIONS,
             final_return=1200.0)
    loaded, _ = runs.find_runs([str(runs_dir)])
    assert {r.experiment for r in loaded} == {"continuous-learning"}
    rows = continuous.learning_rows(loaded)
    assert [(r[0], r[1], r[2], r[4], r[6], r[7], r[8]) for r in rows] == [
        ("HalfCheetah-v5", "torch_gymnasium", 1, 1200.0, 1000.0, "1 of 1", 18 * 8192),
        ("Pendulum-v1", "linen", 2, -250.0, -300.0, "1 of 2", 18 * 8192)]
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "## Learning continuous control" in report and (out / "continuous_learning.png").exists()
    assert "| Pendulum-v1 | linen | 2 |" in report and not (out / "envtime.json").exists()


def test_continuous_timing_against_linen_and_the_c_engine(tmp_path):
    """bench.sh's continuous folder: each variant over its group's Linen per repeat (the Gymnax group's and
    the CPU-env group's), the rollout's share, each env alone against the C engine, and README's lines."""
    runs_dir, out = tmp_path / "runs", tmp_path / "out"
    for seed in (1, 2, 3):
        folder = runs_dir / "continuous" / f"r{seed}"
        for variant, env, factor in (("linen", "Pendulum-v1", 1), ("torch", "Pendulum-v1", 2),
                                     ("linen_gymnasium", "HalfCheetah-v5", 1), ("torch_gymnasium", "HalfCheetah-v5", 3)):
            fake_run(folder, variant, env, "small", seed, 10.0, [x * factor for x in ITERATIONS], synced=True,
                     rollout_share=0.5 if factor == 1 else 0.25)
        for backend, seconds in (("env-sync", 0.5), ("env-mjx", 10.0)):  # 32 x 128 steps per iteration
            fake_run(folder, backend, "HalfCheetah-v5", "none", seed, 10.0, [60.0] + [seconds] * 3, synced=True,
                     rollout_only=True, num_envs=32, num_steps=128)
    loaded, _ = runs.find_runs([str(runs_dir)])
    assert {r.experiment for r in loaded} == {"continuous"}
    jax_env = continuous.ratio_rows(loaded, "linen", continuous.GROUPS["linen"])
    assert jax_env == [["Pendulum-v1", "small", 0.5, 0.5, "not run", "not run", "not run",
                        "2.00x (2.00–2.00, 3 repeats)", "not run"]]
    cpu_env = continuous.ratio_rows(loaded, "linen_gymnasium", continuous.GROUPS["linen_gymnasium"])
    assert cpu_env[0][:4] == ["HalfCheetah-v5", "small", 0.5, 0.5] and cpu_env[0][6] == "3.00x (3.00–3.00, 3 repeats)"
    variants, shares = continuous.share_rows(loaded)
    assert shares[0][2 + variants.index("torch_gymnasium")] == pytest.approx(0.25)
    alone = {row[1]: row for row in continuous.env_alone_rows(loaded)}
    assert alone["env-sync"][2] == "8.19e+03 (8.19e+03–8.19e+03, 3 repeats)" and alone["env-mjx"][3] == pytest.approx(0.05)
    lines = dict(continuous.headline_rows(loaded))
    assert lines["continuous actions, Pendulum-v1: PyTorch, eager / Linen, Gymnax env (steady iteration)"] == \
        "2.00x (2.00–2.00, 3 repeats)"
    assert lines["HalfCheetah-v5 alone: MJX (MuJoCo in JAX) / the C engine, env steps per second on this CPU"] == \
        "0.050x (410 against 8,192)"
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "## Continuous actions: time" in report and (out / "continuous_env_alone.png").exists()


def test_pixels_timing_cnn_against_mlp_and_linen(tmp_path):
    """bench.sh's pixels folder: each variant over its group's yardstick per repeat and model, each variant's
    CNN over its own MLP on the same game and repeat (never across repeats), Atari's group, README's lines."""
    runs_dir, out = tmp_path / "runs", tmp_path / "out"
    for seed in (1, 2, 3):
        folder = runs_dir / "pixels" / f"r{seed}"
        for variant, env, model, factor in (
                ("linen", "Breakout-MinAtar", "small", 1), ("torch", "Breakout-MinAtar", "small", 4),
                ("linen", "Breakout-MinAtar", "cnn", 3), ("torch", "Breakout-MinAtar", "cnn", 3 * seed),
                ("linen_gymnasium-envpool", "Breakout-v5", "cnn", 10), ("torch_gymnasium-envpool", "Breakout-v5", "cnn", 5)):
            fake_run(folder / ("atari" if env == "Breakout-v5" else ""), variant, env, model, seed, 10.0,
                     [x * factor for x in ITERATIONS], synced=True, rollout_share=0.5 if model == "small" else 0.2)
    loaded, _ = runs.find_runs([str(runs_dir)])
    assert {r.experiment for r in loaded} == {"pixels"}
    jax_env = pixels.ratio_rows(loaded, "linen", pixels.GROUPS["linen"])
    assert [row[:4] + row[-2:] for row in jax_env] == [
        ["Breakout-MinAtar", "cnn", 1.5, 0.2, "2.00x (1.00–3.00, 3 repeats)", "not run"],
        ["Breakout-MinAtar", "small", 0.5, 0.5, "4.00x (4.00–4.00, 3 repeats)", "not run"]]
    atari = pixels.ratio_rows(loaded, "linen_gymnasium-envpool", pixels.GROUPS["linen_gymnasium-envpool"])
    assert atari == [["Breakout-v5", "cnn", 5.0, 0.2, "0.50x (0.50–0.50, 3 repeats)"]]
    variants, rows = pixels.cnn_rows(loaded)
    assert variants == ["linen", "torch"] and rows == [["Breakout-MinAtar", "3.00x (3.00–3.00, 3 repeats)",
                                                        "1.50x (0.75–2.25, 3 repeats)"]]
    lines = dict(pixels.headline_rows(loaded))
    assert lines["pixels, Breakout-v5 with the CNN: PyTorch / Linen, both stepping EnvPool's Atari (steady iteration)"] \
        == "0.50x (0.50–0.50, 3 repeats)"
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "## Learning from pixels: time" in report and (out / "pixels.png").exists()


def test_pixels_learning_against_the_bar(tmp_path):
    """bench.sh's pixels-learning folder: each seed of Breakout-MinAtar's CNN against the bar of 10, and both
    learning charts (against steps and against wall time)."""
    runs_dir, out = tmp_path / "runs", tmp_path / "out"
    for seed, final in ((1, 12.0), (2, 8.0)):
        fake_run(runs_dir / "pixels-learning" / f"r{seed}", "torch", "Breakout-MinAtar", "cnn", seed, 10.0, ITERATIONS,
                 final_return=final)
    loaded, _ = runs.find_runs([str(runs_dir)])
    rows = pixels.learning_rows(loaded, pixels.BARS)
    assert [(r[1], r[2], r[4], r[6], r[7]) for r in rows] == [("torch", 2, 10.0, 10.0, "1 of 2")]
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert (out / "pixels_learning.png").exists() and (out / "pixels_learning_time.png").exists()
    assert "| Breakout-MinAtar | torch | 2 |" in (out / "REPORT.md").read_text()


def test_gpu_ratios_next_to_the_cpu_and_tf32_against_float32(tmp_path):
    """bench.sh's gpu folder: each framework over Linen on the GPU (pairs of one repeat) beside Experiment 1's
    ratio on the CPU for the same env and model, where the GPU's iteration goes, TF32 over float32 per
    variant (its tf32 subfolder), and README's lines; a GPU run never pairs with a CPU run."""
    from analysis import gpu

    runs_dir, out = tmp_path / "runs", tmp_path / "out"
    for seed in (1, 2):
        fake_run(runs_dir / "exp1" / f"r{seed}", "linen", "CartPole-v1", "small", seed, 10.0, ITERATIONS)
        fake_run(runs_dir / "exp1" / f"r{seed}", "torch", "CartPole-v1", "small", seed, 10.0,
                 [x * (2 + seed) for x in ITERATIONS])
    folder = runs_dir / "gpu" / "r1"
    for variant, factor in (("linen", 0.1), ("torch", 2.0)):
        fake_run(folder, variant, "CartPole-v1", "small", 1, 10.0, [x * factor for x in ITERATIONS], synced=True,
                 device="NVIDIA H200", matmul_precision="float32")
    fake_run(folder, "torch", "CartPole-v1", "large", 1, 10.0, ITERATIONS, synced=True, device="NVIDIA H200",
             matmul_precision="float32")
    fake_run(folder / "tf32", "torch", "CartPole-v1", "large", 1, 10.0, [x / 4 for x in ITERATIONS], synced=True,
             device="NVIDIA H200", matmul_precision="tf32", rollout_share=0.5)  # TF32 speeds the update most
    loaded, _ = runs.find_runs([str(runs_dir)])
    on_gpu, exp1 = ([r for r in loaded if r.experiment == e] for e in ("gpu", "exp1"))
    assert len(on_gpu) == 4 and len(exp1) == 4
    variants, rows = gpu.ratio_rows(on_gpu, exp1)
    assert variants == ["torch"] and rows == [["CartPole-v1", "small", "0.0500", "0.500",
                                              "20.00x (1 repeat) \\| 3.50x (3.00–4.00, 2 repeats)"]]
    assert gpu.precision_rows(on_gpu) == [["CartPole-v1", "large", "torch", "500", "0.25x (1 repeat)", "375",
                                           "0.17x (1 repeat)"]]
    split = {(row[1], row[2]): row for row in gpu.split_rows(on_gpu)}
    assert split["small", "torch"][4:7] == ["1,000", "250", "750"] and ("large", "torch") in split
    assert gpu.headline_rows(on_gpu, exp1) == (["CartPole-v1, GPU", "CartPole-v1, CPU"],
                                               [["PyTorch, eager / Linen", "20.00x", "3.50x"]])
    proc = analyze(runs_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    report = (out / "REPORT.md").read_text()
    assert "## On a GPU" in report and "bench.sh's gpu preset on NVIDIA H200" in report


def test_gpuscale_by_env_count_on_the_gpu_and_the_same_machines_cpu(tmp_path):
    """bench.sh's gpuscale folder: per number of envs, Linen against PyTorch compiled with its env in torch on the
    GPU, and on the same machine's CPU in a row of its own (a GPU run never pairs with a CPU run), steady and whole
    run; the other variants' ratios in a table of their own. The claims the docs make of it rest on counts with
    three repeats, as the decision table's rows do: two decide nothing."""
    from analysis import gpu
    from analysis.output import Output

    runs_dir = tmp_path / "runs"
    for seed in (1, 2):
        for device, variant, factor, total in (("NVIDIA H100", "linen", 0.1, 10.0), ("NVIDIA H100", gpu.SCALE_TORCH, 1.0, 15.0),
                                               ("NVIDIA H100", "torch-torchenv", 3.0, 12.0),
                                               ("cpu", "linen", 1.0, 20.0), ("cpu", gpu.SCALE_TORCH, 0.5 * seed, 80.0)):
            fake_run(runs_dir / ("gpu" if device != "cpu" else "cpu") / "gpuscale" / f"r{seed}" / "envs512", variant,
                     "CartPole-v1", "small", seed, total, [x * factor for x in ITERATIONS], synced=True, device=device,
                     num_envs=512)
    loaded, _ = runs.find_runs([str(runs_dir)])
    assert {r.experiment for r in loaded} == {"gpuscale"}
    rows = gpu.scale_rows(loaded)
    assert [row[:6] for row in rows] == [
        ["512", "NVIDIA H100", "2 / 2", "50.0 / 500", "10.00x (10.00–10.00, 2 repeats)", "1.50x (1.50–1.50, 2 repeats)"],
        ["512", "Test CPU", "2 / 2", "500 / 375", "0.75x (0.50–1.00, 2 repeats)", "4.00x (4.00–4.00, 2 repeats)"]]
    assert rows[0][6:] == ["12.5 / 125", "37.5 / 375", "0.500 / 5.00"]  # rollout, update (a quarter, three), iteration 0
    assert gpu.variant_rows(loaded) == [["512", "PyTorch, eager, its env in torch", "30.00x (30.00–30.00, 2 repeats)",
                                         "1.20x (1.20–1.20, 2 repeats)"]]
    out = Output(tmp_path / "out")
    gpu.gpuscale_claims(loaded, out)
    assert out.claims["gpuscale-linen-faster"][0] is False  # two repeats
    for variant, factor in (("linen", 0.1), (gpu.SCALE_TORCH, 1.0)):
        fake_run(runs_dir / "gpu" / "gpuscale" / "r3" / "envs512", variant, "CartPole-v1", "small", 3, 10.0,
                 [x * factor for x in ITERATIONS], synced=True, device="NVIDIA H100", num_envs=512)
    out = Output(tmp_path / "out")
    gpu.gpuscale_claims(runs.find_runs([str(runs_dir)])[0], out)
    assert out.claims["gpuscale-linen-faster"][:2] == (True, ("faster",))
    assert out.claims["gpuscale-gap-narrows-with-envs"][0] is False  # one count: no trend


def test_decision_table_names_each_regimes_fastest_framework_and_the_sentence_follows(tmp_path):
    """One row per regime that ran: with pairs from at least three repeats, the fastest variant of each
    framework (JAX's fastest of several) and the loser's fastest over the winner's, paired by repeat; a
    regime with one framework, too few repeats or no steady state says why it is not decided; the JAX-env
    regime comes from the shuffled re-run (headline) where it ran; README's sentence counts the winners."""
    from analysis import decision

    runs_dir = tmp_path / "runs"
    for seed in (1, 2, 3):
        for variant, factor in (("linen", 1.0), ("equinox", 0.9), ("torch", 3.0), ("torch_compile", 2.0 + seed / 10)):
            fake_run(runs_dir / "exp1" / f"r{seed}", variant, "CartPole-v1", "small", seed, 10.0,
                     [x * factor for x in ITERATIONS])
        for variant, factor in (("linen_gymnasium-envpool", 2.0), ("torch_gymnasium-envpool", 1.0)):
            fake_run(runs_dir / "pixels" / f"r{seed}" / "atari", variant, "Breakout-v5", "cnn", seed, 10.0,
                     [x * factor for x in ITERATIONS], synced=True)
        for variant, factor in (("linen", 1.0), ("torch", 1.5)):  # the re-run, medium only: exp1 keeps small
            fake_run(runs_dir / "headline" / f"r{seed}", variant, "CartPole-v1", "medium", seed, 10.0,
                     [x * factor for x in ITERATIONS])
        # each framework's own env: torch on Gymnax through DLPack is not in that regime, its env in torch is
        for variant, factor in (("linen", 1.0), ("torch", 0.5), ("torch_compile-torchenv", 1.2 + seed / 10)):
            fake_run(runs_dir / "torchenv" / f"r{seed}", variant, "Acrobot-v1", "small", seed, 10.0,
                     [x * factor for x in ITERATIONS], synced=True)
        # the compiled CPU-env session supersedes the pixels experiment's Atari runs
        for variant, factor in (("linen_gymnasium-envpool", 2.0), ("torch_gymnasium-envpool", 1.0),
                                ("torch_compile_gymnasium-envpool", 0.8)):
            fake_run(runs_dir / "cpucompile" / f"r{seed}" / "atari", variant, "Breakout-v5", "cnn", seed, 10.0,
                     [x * factor for x in ITERATIONS], synced=True)
    fake_run(runs_dir / "exp1" / "r1", "linen", "CartPole-v1", "medium", 1, 10.0, ITERATIONS)  # torch never ran
    fake_run(runs_dir / "pixels" / "r4" / "atari", "torch_gymnasium-envpool", "Breakout-v5", "cnn", 4, 10.0,
             ITERATIONS[:10], synced=True)  # too short for a steady state: not among the runs behind the ratio
    for variant in ("linen", "torch"):  # one repeat on one env: not decided
        fake_run(runs_dir / "continuous" / "r1", variant, "Pendulum-v1", "small", 1, 10.0, ITERATIONS, synced=True)
        fake_run(runs_dir / "expensive" / "r1", variant, "Craftax-Classic-Symbolic-v1", "small", 1, 10.0, ITERATIONS[:10])
    loaded, _ = runs.find_runs([str(runs_dir)])
    rows = decision.decision_rows({e: [r for r in loaded if r.experiment == e] for e in runs.EXPERIMENTS})
    assert [(row["regime"].name, row.get("winner"), row.get("loser"), f"{row['row']['geomean']:.3f}" if "row" in row
             else row["why"], row["runs"]) for row in rows] == [
        ("JAX env, small model", "equinox", "torch_compile", "2.443", 6),
        ("JAX env, medium model", "linen", "torch", "1.500", 6),
        ("each framework's own env, small model", "linen", "torch_compile-torchenv", "1.398", 6),
        ("expensive JAX env", None, None, "not decided: its runs are too short for a steady state", 2),
        ("continuous actions, JAX env", None, None, "not decided: fewer than 3 repeats of each compared variant", 2),
        ("pixels, Atari", "torch_compile_gymnasium-envpool", "linen_gymnasium-envpool", "2.500", 6)]
    # a run of a million env steps: start-up, iterations 0..7 as measured, then 115 steady ones (8,192 steps each)
    whole = lambda factor: STARTUP + factor * (sum(ITERATIONS[:8]) + 115 * ITERATIONS[-1])
    first = rows[0]["whole"]
    assert (first["winner"], first["loser"]) == ("equinox", "torch_compile")
    assert first["row"]["geomean"] == pytest.approx(np.exp(np.mean([np.log(whole(2 + s / 10) / whole(0.9)) for s in (1, 2, 3)])))
    # beside each framework's steady margin, the same regimes' whole runs (the first one's checked above)
    wholes = sorted(row["whole"]["row"]["geomean"] for row in rows[:3])
    assert wholes[0] < first["row"]["geomean"] == wholes[-1] and rows[-1]["whole"]["winner"] == rows[-1]["winner"]
    assert decision.answer(rows) == ("On a CPU, a JAX framework was the fastest in 3 of the 4 regimes decided "
                                     "(2 setups, a small and a medium row on the same envs counted once; PyTorch's "
                                     f"fastest variant took 1.40x to 2.44x as long per steady iteration, {wholes[0]:.2f}x "
                                     f"to {wholes[-1]:.2f}x over a modelled run of 1M env steps); PyTorch was the fastest "
                                     "in one: pixels, Atari (JAX's fastest variant took 2.50x as long per steady iteration, "
                                     f"{rows[-1]['whole']['row']['geomean']:.2f}x over a modelled run of 1M env steps). "
                                     "2 more regimes ran without a verdict (the table says why).")


def on_host(run_dir, family_model, flags=("avx2", "avx512f"), session=None):
    """The run's run.json as bench.sh writes it on a host type (calibrate.py's session beside it, if named)."""
    info = json.loads((run_dir / "run.json").read_text())
    info.update(cpu="AMD EPYC", cpu_family_model=list(family_model), cpu_flags=list(flags), cores=2)
    if session:
        info["session"] = session
    (run_dir / "run.json").write_text(json.dumps(info))


def test_each_regime_decided_again_on_each_host_type_and_a_flip_counts_as_decided_on_none(tmp_path):
    """bench.sh hosts (issue 90): on a second host type its subfolder's runs decide each regime again, beside the
    study's own runs on the first; where the verdict differs ("depends on the CPU") README's sentence counts the
    regime as decided on none and names it, and the why-sentence gives each host's calibration; where both hosts
    agree, the regime stays decided. A host's hosts runs, where it has them, are what decide it there."""
    from analysis import decision, hosts

    runs_dir = tmp_path / "runs"
    study, other = ("26", "2"), ("25", "17")
    for seed in (1, 2, 3):
        for variant, a, b in (("linen", 1.0, 1.0), ("torch_compile", 2.0, 0.8)):  # JAX env: flips on the other host
            on_host(fake_run(runs_dir / "headline" / f"r{seed}", variant, "CartPole-v1", "small", seed, 10.0,
                             [x * a for x in ITERATIONS]), study, session="s1")
            on_host(fake_run(runs_dir / "hosts" / f"r{seed}" / "jax-env", variant, "CartPole-v1", "small", seed, 10.0,
                             [x * b for x in ITERATIONS], synced=True), other, session="s2")
        for variant, a, b in (("torch_gymnasium-envpool", 1.0, 1.0), ("linen_gymnasium-envpool", 2.0, 1.5)):  # agrees
            on_host(fake_run(runs_dir / "cpucompile" / f"r{seed}" / "atari", variant, "Breakout-v5", "cnn", seed, 10.0,
                             [x * a for x in ITERATIONS], synced=True), study, session="s1")
            on_host(fake_run(runs_dir / "hosts" / f"r{seed}" / "atari", variant, "Breakout-v5", "cnn", seed, 10.0,
                             [x * b for x in ITERATIONS], synced=True), other, session="s2")
        # the other host's study runs of the JAX env give way to its hosts runs there (they would say PyTorch by 10x)
        for variant, a in (("linen", 10.0), ("torch_compile", 1.0)):
            on_host(fake_run(runs_dir / "exp1" / f"r{seed}", variant, "Acrobot-v1", "small", seed, 10.0,
                             [x * a for x in ITERATIONS]), other, session="s3")
    for session, layer_torch in (("s1", 0.040), ("s2", 0.020)):
        (runs_dir / "sessions").mkdir(exist_ok=True)
        (runs_dir / "sessions" / f"{session}.json").write_text(json.dumps({
            "session": session, "layer_seconds": {"torch": {"medium": 0.001, "large": layer_torch},
                                                  "jax": {"medium": 0.001, "large": 0.030}},
            "minibatch_step_seconds": {"torch": 0.006, "jax": 0.004}}))
    loaded, _ = runs.find_runs([str(runs_dir)])
    by_experiment = {e: [r for r in loaded if r.experiment == e] for e in runs.EXPERIMENTS}
    assert {r.path.parent.name for r in by_experiment["hosts"]} == {"jax-env", "atari"}
    rows = {row["regime"].name: row for row in hosts.host_rows(by_experiment)}
    first, second = "AMD EPYC (family 26 model 2, AVX-512, 2 cores)", "AMD EPYC (family 25 model 17, AVX-512, 2 cores)"
    jax_env, atari = rows["JAX env, small model"], rows["pixels, Atari"]
    assert (jax_env["cells"][first]["winner"], jax_env["cells"][second]["winner"]) == ("linen", "torch_compile")
    assert jax_env["cells"][second]["row"]["geomean"] == pytest.approx(1 / 0.8)  # from hosts/, not exp1's 10x
    assert jax_env["across"] == hosts.DEPENDS and atari["across"] == "agrees"
    assert hosts.flips(list(rows.values())) == ("JAX env, small model",)
    study_rows = decision.decision_rows(by_experiment)
    sentence = decision.answer(study_rows, hosts.flips(list(rows.values())))
    assert "One more depends on the CPU, its verdict differing between the host types that ran it (JAX env, small model)." in sentence
    assert sentence.startswith("On a CPU, PyTorch was the fastest in the one decided: pixels, Atari")
    assert hosts.summary(list(rows.values())).startswith("2 regimes were decided on more than one host type")
    assert "1 agree on every one, and 1 flip (JAX env, small model)" in hosts.summary(list(rows.values()))
    why = hosts.why(jax_env, hosts.calibrations(loaded))
    assert f"on {first} JAX was faster" in why and f"on {second} PyTorch was faster" in why
    assert "1024-wide layer took 1.33x JAX's" in why and "1024-wide layer took 0.67x JAX's" in why


def test_a_regime_is_decided_by_three_repeats_not_by_three_envs(tmp_path):
    """The first GPU study ran one repeat on each of three envs: one repeat, not decided, however wide the gap.
    gpuscale's three repeats on CartPole-v1 at 32 envs decide its row (its 512-env runs, two repeats, do not),
    and the answer counts the GPU's regimes apart from the CPU's."""
    from analysis import decision

    runs_dir = tmp_path / "runs"
    for env in ("CartPole-v1", "Acrobot-v1", "Breakout-MinAtar"):
        for variant, factor in (("linen", 1.0), ("torch", 20.0)):
            fake_run(runs_dir / "gpu" / "r1", variant, env, "small", 1, 10.0, [x * factor for x in ITERATIONS],
                     synced=True, device="NVIDIA H100")
    for seed in (1, 2, 3):
        for variant, factor in (("linen", 1.0), ("torch_compile-torchenv", 10.0)):
            for n in (32, 512)[:1 if seed == 3 else 2]:
                fake_run(runs_dir / "gpuscale" / f"r{seed}" / f"envs{n}", variant, "CartPole-v1", "small", seed, 10.0,
                         [x * factor for x in ITERATIONS], synced=True, device="NVIDIA H100", num_envs=n)
        for variant, factor in (("linen", 1.0), ("torch", 2.0)):
            fake_run(runs_dir / "exp1" / f"r{seed}", variant, "CartPole-v1", "small", seed, 10.0,
                     [x * factor for x in ITERATIONS])
    loaded, _ = runs.find_runs([str(runs_dir)])
    rows = {row["regime"].name: row for row in decision.decision_rows(
        {e: [r for r in loaded if r.experiment == e] for e in runs.EXPERIMENTS})}
    assert rows["on a GPU, JAX env, small model"]["why"] == "not decided: fewer than 3 repeats of each compared variant"
    assert rows["on a GPU, each framework's own env, 512 envs"]["why"].startswith("not decided: fewer than 3 repeats")
    gpu = rows["on a GPU, each framework's own env, 32 envs"]
    assert (gpu["winner"], gpu["loser"], gpu["row"]["geomean"]) == ("linen", "torch_compile-torchenv", pytest.approx(10.0))
    assert decision.answer(list(rows.values())) == (
        "On a CPU, a JAX framework was the fastest in the one decided: JAX env, small model (PyTorch's fastest variant "
        f"took 2.00x as long per steady iteration, {rows['JAX env, small model']['whole']['row']['geomean']:.2f}x over a "
        "modelled run of 1M env steps). On a GPU, a JAX framework was the fastest in the one decided: on a GPU, each "
        "framework's own env, 32 envs (PyTorch's fastest variant took 10.00x as long per steady iteration, "
        f"{gpu['whole']['row']['geomean']:.2f}x over a modelled run of 1M env steps). 2 more regimes ran without a verdict (the "
        "table says why).")


def test_each_frameworks_variant_is_chosen_where_it_is_not_measured(tmp_path):
    """The representative of each framework in a pair (env and repeat) is its fastest variant in the other
    pairs: here NNX is fastest only by its repeat 3, so repeat 3 is measured on Linen (chosen by repeats 1 and
    2) and repeats 1 and 2 on NNX (chosen with repeat 3). Chosen on the measured runs, NNX would represent JAX
    everywhere and the ratio would be 2.37x. A ratio whose range holds 1 decides no winner."""
    from analysis import decision

    runs_dir = tmp_path / "runs"
    for seed, nnx, torch_over in ((1, 1.1, 2.0), (2, 1.1, 2.0), (3, 0.5, 2.0)):
        for variant, factor in (("linen", 1.0), ("nnx", nnx), ("torch", torch_over)):
            fake_run(runs_dir / "exp1" / f"r{seed}", variant, "CartPole-v1", "small", seed, 10.0,
                     [x * factor for x in ITERATIONS])
        for variant, factor in (("linen_gymnasium", 1.0), ("torch_gymnasium", (1.1, 0.9, 0.95)[seed - 1])):
            fake_run(runs_dir / "cpucompile" / f"r{seed}", variant, "CartPole-v1", "small", seed, 10.0,
                     [x * factor for x in ITERATIONS], synced=True)
    loaded, _ = runs.find_runs([str(runs_dir)])
    rows = {row["regime"].name: row for row in decision.decision_rows(
        {e: [r for r in loaded if r.experiment == e] for e in runs.EXPERIMENTS})}
    jax_env = rows["JAX env, small model"]
    assert jax_env["row"]["geomean"] == pytest.approx((2.0 / 1.1 * 2.0 / 1.1 * 2.0) ** (1 / 3))
    assert jax_env["picks"]["JAX"] == [("nnx", 2), ("linen", 1)] and not jax_env["tie"]
    assert decision.fastest_cell(jax_env) == "Flax NNX (2 of 3 pairs); Flax Linen (1)"
    loop = rows["CPU env, Gymnasium's loop"]
    assert loop["tie"] and decision.fastest_cell(loop).startswith("neither beyond the spread (PyTorch, eager")
    assert decision.answer(list(rows.values())) == (
        "On a CPU, a JAX framework was the fastest in one: JAX env, small model (PyTorch's fastest variant took "
        f"1.88x as long per steady iteration, {jax_env['whole']['row']['geomean']:.2f}x over a modelled run of 1M env "
        "steps); in one (CPU env, Gymnasium's loop) neither was faster beyond the spread over envs or repeats.")


def test_time_to_target_per_regime_counts_the_pairs_that_never_reached_it(tmp_path):
    """Each decision row's time to the target return comes from its learning runs, each framework's pick
    chosen in the other pairs as for the steady state; torch.compile reaches the target faster than eager
    PyTorch in repeats 1 to 3 and never in repeat 4: it is PyTorch's pick there too, its pair leaves the
    ratio and is counted. The target is the one results/targets.json gives that env and model."""
    from analysis import decision, target

    runs_dir = tmp_path / "runs"
    for seed in (1, 2, 3, 4):
        for variant, factor, final in (("linen", 1.0, 100.0), ("torch", 2.0, 100.0),
                                       ("torch_compile", 1.5, 50.0 if seed == 4 else 100.0)):
            fake_run(runs_dir / "headline" / f"r{seed}", variant, "CartPole-v1", "small", seed, 10.0,
                     [x * factor for x in ITERATIONS], final_return=final, synced=True, num_envs=32, num_steps=256)
    loaded, _ = runs.find_runs([str(runs_dir)])
    by_experiment = {e: [r for r in loaded if r.experiment == e] for e in runs.EXPERIMENTS}
    target.write_targets(by_experiment, tmp_path)
    written = json.loads((tmp_path / "targets.json").read_text())["ppo"]["CartPole-v1"]["small"]
    assert written == {"target": pytest.approx(100 / 18 + 0.9 * (100 - 100 / 18), abs=0.01), "share": 0.9, "experiment": "headline",
                       "runs": 12, "iterations": 18, "steps": 18 * 32 * 256}
    row = decision.decision_rows(by_experiment)[0]
    reached = decision.to_target(row["regime"], by_experiment, target.study_targets(by_experiment))
    assert row["target"]["row"]["geomean"] == reached["row"]["geomean"]
    assert reached["picks"] == {"JAX": [("linen", 3)], "PyTorch": [("torch_compile", 3)]}
    # the target is crossed at the 17th iteration (100 * 17 / 18 >= 90.6): start-up and 16.5 s of iterations, scaled
    assert reached["row"]["geomean"] == pytest.approx((STARTUP + 1.5 * 16.5) / (STARTUP + 16.5))
    assert (reached["row"]["ratios"], reached["missed"], reached["paired"]) == (3, {"PyTorch": 1}, 4)
    assert decision.verdict_cell(reached).endswith("; PyTorch's pick never reached it in 1 of 4 pairs")


def test_each_regime_holds_its_envs_and_no_other():
    """Every regime keeps a run on each env it names and on no other env any script steps (a Gymnasium
    Pendulum among the MuJoCo runs would pool two envs under one name); and what it names is what it says:
    MuJoCo's rows MuJoCo envs, Atari's Atari games, the JAX-env rows JAX envs, the own-env rows torch twins."""
    from types import SimpleNamespace

    import gymnax
    from analysis import decision, gpu

    cpu_envs = load("ppo_torch_gymnasium.py")
    every_env = {*gymnax.registered_envs, *cpu_envs.TWINS, "Craftax-Symbolic-v1", "Craftax-Classic-Symbolic-v1"}
    mujoco = {"HalfCheetah-v5", "Hopper-v5", "Walker2d-v5"}
    for regime in decision.REGIMES:
        variants = regime.variants or ("linen", "torch", "linen_agents", "torch_agents")
        kept = {env for env in every_env for v in variants for m in regime.models for k in (1, 10)
                for n in (1, 10, *gpu.GPU_COUNTS) for device in ("cpu", "NVIDIA H100")
                if regime.keep(SimpleNamespace(env_id=env, variant=v, model=m,  # DQN's ratios, env counts, GPU's
                                               info={"args": {"train_frequency": k, "num_envs": n}, "device": device}))}
        assert kept == set(regime.envs), regime.name
        kind = ("mujoco" if "MuJoCo" in regime.name else "atari" if "Atari" in regime.name else
                "twins" if "own env" in regime.name else "jax" if "JAX env" in regime.name else None)
        allowed = {"mujoco": mujoco, "atari": set(cpu_envs.ATARI), "twins": set(load("torch_envs.py").ENVS),
                   "jax": {*gymnax.registered_envs, "Craftax-Symbolic-v1", "Craftax-Classic-Symbolic-v1"}}.get(kind)
        assert allowed is None or set(regime.envs) <= allowed, regime.name
    # each row names the hosts behind it: a CPU by its model, family and model, widest vector unit and cores
    host = lambda **info: decision.host_type(SimpleNamespace(info=info))
    assert (host(device="cpu", cpu="AMD EPYC", cpu_family_model=["25", "17"], cpu_flags=["avx2", "avx512f"], cores=2),
            host(device="cpu", cpu="AMD EPYC", cpu_family_model=["25", "1"], cpu_flags=["avx2"], cores=8),
            host(device="cpu", cpu="AMD EPYC"), host(device="NVIDIA H200")) == (
        "AMD EPYC (family 25 model 17, AVX-512, 2 cores)", "AMD EPYC (family 25 model 1, AVX2, 8 cores)",
        "AMD EPYC (vector units not recorded)", "NVIDIA H200")


def test_time_to_target_from_the_process_start(tmp_path):
    """The target is 90% of the way from the runs' start to the best variant's median final return; each
    run's time is from its process's start (run.json) to the end of its first iteration at the target; a
    variant that never gets there says so, and an env where nothing was learned has no target."""
    from analysis import target

    runs_dir = tmp_path / "runs"
    for seed in (1, 2, 3):
        for variant, final in (("linen", 100.0), ("torch", 50.0)):
            fake_run(runs_dir / "exp1" / f"r{seed}", variant, "CartPole-v1", "small", seed, 10.0, ITERATIONS,
                     final_return=final)
            fake_run(runs_dir / "exp1" / f"r{seed}", variant, "MemoryChain-bsuite", "small", seed, 10.0, ITERATIONS,
                     final_return=0.0)
    loaded, _ = runs.find_runs([str(runs_dir)])
    variants, rows = target.target_rows(loaded)
    # start: the median first return, (100 + 50) / 2 / 18; the target 90% of the way to 100, reached by Linen in
    # iteration 16 (100 * 17 / 18 >= 90.4), whose end is 5 + 7 * 1 + 9 * 0.5 s after the first iteration's
    # start, itself STARTUP after the process's
    assert variants == ["linen", "torch"] and rows[0] == ["CartPole-v1", "90.4", "18.0 s (3 of 3)", "never (0 of 3)"]
    assert rows[1] == ["MemoryChain-bsuite", "nothing learned", "–", "–"]
    assert rows[2] == ["median over envs, / Linen's", "", "1.00x (1 envs)", "–; never in 1"]  # the unreached counted


@pytest.mark.parametrize("medium_factors, holds", [((2.0, 2.1, 2.2), True),  # every repeat below small's
                                                   ((2.0, 2.1, 3.05), False)])  # one repeat inside small's range
def test_a_trend_claim_holds_only_beyond_the_ranges(tmp_path, medium_factors, holds):
    """'smaller at medium' is claimed only when the medium ratios' range lies wholly below the small's;
    the claims table records the verdict and the figures, and the docs' marker test reads it back."""
    from analysis import headline
    from analysis.output import Output

    runs_dir = tmp_path / "runs"
    for seed, medium in zip((1, 2, 3), medium_factors):
        for model, factor in (("small", 3.0 + seed / 100), ("medium", medium)):
            for variant, f in (("linen", 1.0), ("torch", factor), ("torch_compile", factor)):
                fake_run(runs_dir / "headline" / f"r{seed}", variant, "CartPole-v1", model, seed, 10.0 * f,
                         [x * f for x in ITERATIONS])
    loaded, _ = runs.find_runs([str(runs_dir)])
    out = Output(tmp_path)
    headline.size_claims(loaded, out)
    verdict, words, because = out.claims["eager-steady-ratio-smaller-at-medium"]
    assert verdict is holds and words == ("smaller",) and "torch / linen, steady: small 3.02x" in because
    assert out.claims["eager-steady-ratio-level-across-sizes"][0] is not holds
    assert not out.claims["eager-steady-ratio-larger-at-medium"][0]
    out.claims_table()
    claims = docs.claims_of("<!-- BEGIN analyze.py claims -->\n" + out.blocks["claims"] + "<!-- END analyze.py claims -->")
    assert claims["eager-steady-ratio-smaller-at-medium"] == (holds, ("smaller",))
    said = "The eager ratio is smaller at the medium model <!-- claim: eager-steady-ratio-smaller-at-medium -->."
    assert bool(docs.unclaimed(said, claims)) is not holds


# ---- issue 89, class 9
def regime_runs(root, ratios: dict, jax: str, torch: str, **kwargs):
    """A JAX variant's and a PyTorch variant's runs on each env in each repeat (seed r, in root/r<r>), from
    {env: [PyTorch's time over JAX's in repeat 1, 2, ...]}; JAX's iterations are ITERATIONS, PyTorch's scaled."""
    for env, over in ratios.items():
        for seed, ratio in enumerate(over, 1):
            for variant, factor in ((jax, 1.0), (torch, ratio)):
                fake_run(root / f"r{seed}", variant, env, "small", seed, 10.0, [x * factor for x in ITERATIONS],
                         **kwargs)


def decision_table(by_experiment: dict, folder) -> dict:
    """The decision table as analyze.py writes it: {regime: [fastest, A / B, time A / B, runs (host)]}."""
    from analysis import decision

    out = Output(folder)
    decision.decision_section(by_experiment, out)
    rows = [line[2:-2].split(" | ") for line in out.blocks["decision"].splitlines()[2:] if line.startswith("| ")]
    return {row[0]: row[2:] for row in rows}


def by_experiment_of(runs_dir) -> dict:
    loaded, _ = runs.find_runs([str(runs_dir)])
    return {e: [r for r in loaded if r.experiment == e] for e in runs.EXPERIMENTS}


def test_a_regime_of_two_envs_is_decided_over_its_two_envs(tmp_path):
    """A regime that ran on two envs is decided over those two, whatever their repeats. Continuous actions on
    Pendulum-v1 in 3 repeats, widely spread (PyTorch took 2, 3 and 4.5 times JAX's time: 3x by their geometric
    mean), and on MountainCarContinuous-v0 in 4, closer (1.2, 1.875, 1.5, 1.5: 1.5x): the ratio is the geometric
    mean of the 7 pairs, 2.02x (the mean of the two envs' means would be 2.12x), over 2 envs with the range of their
    means, 1.50-3.00 (the pairs' own range is 1.20-4.50; 7 pairs counted as envs would give an interval, 4 repeats
    pooled over envs another range). EnvPool's two envs, whose means lie either side of 1 (0.9x on CartPole-v1,
    2x on Acrobot-v1, 3 repeats each), decide no winner: the range of their means holds 1 (their 6 pairs counted
    as envs would give an interval)."""
    from analysis import decision

    continuous = {"Pendulum-v1": [2.0, 3.0, 4.5], "MountainCarContinuous-v0": [1.2, 1.875, 1.5, 1.5]}
    envpool = {"CartPole-v1": [0.8, 0.9, 1.0125], "Acrobot-v1": [1.6, 2.0, 2.5]}
    regime_runs(tmp_path / "runs" / "continuous", continuous, "linen", "torch", synced=True)
    regime_runs(tmp_path / "runs" / "cpucompile", envpool, "linen_gymnasium-envpool", "torch_gymnasium-envpool",
                synced=True)
    by_experiment = by_experiment_of(tmp_path / "runs")
    rows = {row["regime"].name: row for row in decision.decision_rows(by_experiment)}
    assert set(rows) == {"continuous actions, JAX env", "CPU env, EnvPool"}
    fields = lambda row: {k: row["row"][k] for k in ("geomean", "median", "min", "max", "envs", "ratios")}
    decided, tie = rows["continuous actions, JAX env"], rows["CPU env, EnvPool"]
    assert (decided["winner"], decided["loser"], decided["tie"], decided["runs"]) == ("linen", "torch", False, 14)
    assert fields(decided) == pytest.approx({"geomean": (3.0 ** 3 * 1.5 ** 4) ** (1 / 7), "median": 1.875, "min": 1.5,
                                             "max": 3.0, "envs": 2, "ratios": 7}, rel=1e-6)
    assert (tie["winner"], tie["loser"], tie["tie"], tie["runs"]) == (
        "linen_gymnasium-envpool", "torch_gymnasium-envpool", True, 12)
    assert fields(tie) == pytest.approx({"geomean": 1.8 ** 0.5, "median": (1.0125 + 1.6) / 2, "min": 0.9, "max": 2.0,
                                         "envs": 2, "ratios": 6}, rel=1e-6)
    assert all(math.isnan(row["row"][k]) for row in (decided, tie) for k in ("ci_low", "ci_high"))  # 2 envs: none
    assert decision_table(by_experiment, tmp_path) == {
        "continuous actions, JAX env": ["Flax Linen", "PyTorch, eager / Flax Linen", "2.02x (2 envs, range 1.50–3.00)",
                                        "14 (Test CPU (vector units not recorded))"],
        "CPU env, EnvPool": ["neither beyond the spread (Flax Linen by the mean)", "PyTorch, eager / Flax Linen",
                             "1.34x (2 envs, range 0.90–2.00)", "12 (Test CPU (vector units not recorded))"]}


def test_a_regime_of_five_envs_is_decided_by_an_interval_over_its_envs(tmp_path, monkeypatch):
    """From 5 envs on, a regime's ratio has the 95% bootstrap interval resampling its envs, each with all its repeats:
    the JAX-env regime, were it to hold 5 envs whose PyTorch/JAX ratios spread differently (tight on one, wide on
    others) over 3 or 4 repeats (16 pairs), is decided over 5 envs, its ratio the geometric mean of the 16 pairs,
    its interval the one over the 5 envs, which holds 1: no winner. Resampling the 16 pairs as envs would give a
    narrower interval, above 1, and a winner; grouping by repeat, 4 groups and a range."""
    from analysis import decision

    ratios = {"Acrobot-v1": [0.6, 0.75, 0.9], "Asterix-MinAtar": [0.95, 1.0, 1.05, 0.98],
              "Breakout-MinAtar": [1.1, 1.6, 2.3], "CartPole-v1": [1.3, 1.35, 1.4], "MountainCar-v0": [1.5, 2.5, 3.5]}
    five = dataclasses.replace(decision.REGIMES[0], envs=tuple(ratios))
    monkeypatch.setattr(decision, "REGIMES", [five])
    regime_runs(tmp_path / "runs" / "exp1", ratios, "linen", "torch")
    by_experiment = by_experiment_of(tmp_path / "runs")
    [row] = decision.decision_rows(by_experiment)
    per_env = [np.array(ratios[env]) for env in sorted(ratios)]  # by hand: each env's pairs together
    low, high = stats.bootstrap_geomean_ci(per_env)
    means = [stats.geomean(r) for r in per_env]
    flat = np.concatenate(per_env)
    assert low < 1 < high and stats.bootstrap_geomean_ci([np.array([x]) for x in flat])[0] > 1  # what the data hold
    assert (row["winner"], row["loser"], row["tie"], row["runs"]) == ("linen", "torch", True, 32)
    assert {k: row["row"][k] for k in ("geomean", "median", "ci_low", "ci_high", "min", "max", "envs", "ratios")} == \
        pytest.approx({"geomean": stats.geomean(flat), "median": float(np.median(flat)), "ci_low": low,
                       "ci_high": high, "min": min(means), "max": max(means), "envs": 5, "ratios": 16}, rel=1e-6)
    assert decision_table(by_experiment, tmp_path) == {five.name: [
        "neither beyond the spread (Flax Linen by the mean)", "PyTorch, eager / Flax Linen",
        f"{stats.geomean(flat):.2f}x [{low:.2f}, {high:.2f}]", "32 (Test CPU (vector units not recorded))"]}
