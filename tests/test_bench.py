"""bench.sh: the schedule it plans, its filters and shards, resume, failures and Ctrl-C."""

import functools
import json
import os
import re
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers import ROOT, TINY, analyze, bench


def planned(*args) -> list[str]:
    args = list(args)
    cut = args.index("--") if "--" in args else len(args)  # --dry-run is bench.sh's, not the scripts'
    proc = bench(*args[:cut], "--dry-run", *args[cut:])
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stdout.splitlines() if line.startswith("[")]
    assert proc.stdout.splitlines()[-1] == f"{len(lines)} planned runs (dry run: nothing executed)"
    return lines


def per_experiment(lines) -> Counter:
    return Counter(line[1:line.index(" ")] for line in lines)


def test_full_schedule():
    lines = planned("sweep")
    # warm-up: a run per framework; exp1: 12 envs x 6 variants x 3 sizes; exp2: 12 envs x 10 modes;
    # exp3: Acrobot x 10 modes x 3 sizes -- benchback-rl's 231 runs per repeat, with our variants added;
    # cpuenv: the 7 envs with a CPU twin x {torch, linen} x (the JAX env, sync, and vector on CartPole,
    # envpool on the 3 classic-control envs) x 2 sizes x 2 batch shapes = (8 + 2 * 6 + 4 * 4) x 4;
    # envscale: (CartPole's 8 + Breakout's 4 variants, and each env alone: CartPole 4 ways, Breakout 2)
    # x 9 counts; agents: CartPole-v1 and Breakout-MinAtar x (4 batched variants x 4 counts + 4 single-agent);
    # expensive: the two Craftax envs and three cheap ones x 6 variants x 2 sizes; torchenv: 3 envs x 6
    # variants x 2 sizes, and each env alone 4 ways at 4 counts; cpucompile: 4 variants (eager, compiled at two
    # scopes, Linen) x (5 envs in the loop, CartPole and Acrobot through EnvPool, Breakout and Pong on Atari)
    assert per_experiment(lines) == {"warmup": 4, "exp1": 216, "exp2": 120, "exp3": 30, "cpuenv": 144,
                                     "envscale": (8 + 4 + 4 + 2) * 9, "agents": 2 * (4 * 4 + 4),
                                     "expensive": 5 * 6 * 2, "torchenv": 3 * 6 * 2 + 3 * 4 * 4, "cpucompile": 4 * 9}
    assert all("--sync-timing" in line for line in lines
               if line.startswith(("[exp2", "[exp3", "[cpuenv", "[env")) and "env_alone.py" not in line)
    assert not any("--sync-timing" in line for line in lines if line.startswith(("[exp1", "[warmup")))
    assert len(set(lines)) == len(lines)
    assert "python ppo_torch.py --no-jit-env --env-id Freeway-MinAtar --model small --seed 1 " \
           "--log-dir runs/exp2/r1 --sync-timing" in "\n".join(lines)


def test_torchenv_and_cpucompile_plans():
    """torchenv: every training run synced, 20 iterations; the env-alone runs each in its count's folder,
    only on envs with a torch twin; --env-counts and --iterations apply. cpucompile: Atari at CleanRL's batch
    with the CNN in its folder, the rest at the scripts' batch, compiled and eager beside Linen."""
    lines = planned("torchenv")
    trained = [line for line in lines if "env_alone.py" not in line]
    assert len(trained) == 36 and all("--sync-timing" in l and "--num-iterations 20" in l for l in trained)
    assert sum("ppo_torch_compile.py --torch-env" in l for l in trained) == 6
    alone = [line for line in lines if "env_alone.py" in line]
    assert {l.split("--backend ")[1].split()[0] for l in alone} == {"gymnax", "gymnax-dlpack", "torch", "torch-compile"}
    assert all(f"alone/envs{l.split('--num-envs ')[1].split()[0]}" in l for l in alone)
    counts = planned("torchenv", "--env-counts", "64", "--iterations", "30")
    assert {l.split("--num-envs ")[1].split()[0] for l in counts if "env_alone.py" in l} == {"64"}
    assert all("--num-iterations 30" in l for l in counts if "env_alone.py" not in l)
    assert not planned("torchenv", "--envs", "Breakout-MinAtar")  # no torch twin: nothing to plan
    lines = planned("cpucompile")
    atari = [line for line in lines if "Breakout-v5" in line or "Pong-v5" in line]
    assert len(atari) == 8 and all("--model cnn" in l and "/atari" in l and "--num-envs 8" in l for l in atari)
    assert {l.split()[3] for l in lines} == {"ppo_torch_gymnasium.py", "ppo_torch_compile_gymnasium.py",
                                             "ppo_linen_gymnasium.py"}


def test_agents_runs_each_count_in_its_folder_and_the_baseline_once():
    lines = planned("agents", "--agent-counts", "2,8", "--iterations", "10")
    batched = [line for line in lines if "_agents.py" in line]
    assert len(batched) == 2 * 4 * 2 and len(lines) == len(batched) + 2 * 4
    for n in (2, 8):
        at_n = [line for line in batched if f"--log-dir runs/agents/r1/n{n} " in line]
        assert len(at_n) == 8 and all(line.endswith(f"--sync-timing --num-agents {n} --num-iterations 10")
                                      for line in at_n)
    assert sum("ppo_torch_agents.py --compile" in line for line in batched) == 4
    single = [line for line in lines if line not in batched]
    assert all("--log-dir runs/agents/r1/single --sync-timing" in line for line in single)
    assert {line.split()[3] for line in single} == {"ppo_linen.py", "ppo_nnx.py", "ppo_torch.py",
                                                     "ppo_torch_compile.py"}
    # --variants keeps the listed ones of each list: batched at each N, single-agent once
    kept = planned("agents", "--variants", "linen_agents,torch", "--agent-counts", "2", "--envs", "CartPole-v1")
    assert [line.split()[3] for line in sorted(kept)] == ["ppo_linen_agents.py", "ppo_torch.py"]
    proc = bench("agents", "--agent-counts", "0", "--dry-run")
    assert proc.returncode == 2 and "--agent-counts must be positive integers" in proc.stderr


def test_expensive_runs_twenty_iterations_unless_told():
    lines = planned("expensive", "--envs", "Acrobot-v1,Craftax-Symbolic-v1")  # Acrobot-v1 is not one of its envs
    assert len(lines) == 6 * 2 and all("--env-id Craftax-Symbolic-v1 " in line for line in lines)
    assert all(line.endswith("--sync-timing --num-iterations 20") for line in lines)
    fewer = planned("expensive", "--iterations", "5", "--models", "small")
    assert len(fewer) == 5 * 6 and all(line.endswith("--num-iterations 5") for line in fewer)
    assert "Craftax-Symbolic-v1" in bench("expensive", "--envs", "Craftax-Pixels-v1", "--dry-run").stderr


def test_envscale_keeps_the_minibatch_and_a_folder_per_count():
    lines = planned("envscale", "--iterations", "50")
    alone = [line for line in lines if "env_alone.py" in line]
    assert len(alone) == (4 + 2) * 9 and all(line.endswith("--num-steps 128 --num-iterations 4") for line in alone)
    assert not any("--model" in line or "--sync-timing" in line for line in alone)  # the env alone: no model
    lines = [line for line in lines if line not in alone]
    assert len(lines) == (8 + 4) * 9
    for n in (8, 64, 2048):
        mine = [line for line in lines if f"--num-envs {n} " in line]
        assert len(mine) == 12
        # minibatch = n * 128 steps / (n / 8) = 1024; each count in its own folder, so --resume
        # never takes one count's finished run for another's; envscale keeps its own 4 iterations
        assert all(f"--log-dir runs/envscale/r1/envs{n} " in line and f"--num-minibatches {n // 8} " in line
                   and line.endswith("--num-iterations 4") for line in mine), mine[0]
    assert {line.split()[3] for line in lines} == {"ppo_torch_gymnasium.py", "ppo_linen_gymnasium.py", "ppo_torch.py",
                                                   "ppo_linen.py"}


def test_cpuenv_keeps_the_listed_envs_with_a_twin():
    lines = planned("cpuenv", "--envs", "CartPole-v1,DeepSea-bsuite,Seaquest-MinAtar", "--models", "small")
    env_of = lambda line: re.search(r"--env-id (\S+)", line)[1]
    assert sorted({env_of(line) for line in lines}) == ["CartPole-v1", "Seaquest-MinAtar"]
    # CartPole: every corner; Seaquest: no vectorization but sync offers it; each at both batch shapes
    assert len(lines) == (8 + 4) * 2
    assert not any("--vectorization" in line for line in lines if env_of(line) == "Seaquest-MinAtar")
    cleanrl = [line for line in lines if "/cleanrl " in line]
    assert len(cleanrl) == 12 and all(line.endswith("--num-envs 4 --num-steps 128 --num-minibatches 4 "
                                                    "--update-epochs 4") for line in cleanrl)


def test_continuous_presets():
    """continuous: the Gymnax frameworks on both continuous envs, the CPU-env scripts stepped each way on
    Pendulum and HalfCheetah, two sizes, 20 synced iterations; continuous-learning: the six Gymnax
    scripts on Pendulum at their defaults, the two CPU-env scripts on HalfCheetah for 1M env steps."""
    lines = planned("continuous")
    alone = [line for line in lines if "env_alone.py" in line]
    assert sorted(re.search(r"--backend (\S+) --env-id (\S+)", line).groups() for line in alone) == [
        ("async", "HalfCheetah-v5"), ("async", "Pendulum-v1"), ("envpool", "HalfCheetah-v5"), ("envpool", "Pendulum-v1"),
        ("gymnax", "Pendulum-v1"), ("mjx", "HalfCheetah-v5"), ("sync", "HalfCheetah-v5"), ("sync", "Pendulum-v1")]
    lines = [line for line in lines if line not in alone]
    assert len(lines) == 6 * 2 * 2 + 6 * 2 * 2 and len(set(lines)) == len(lines)
    assert all(line.endswith("--sync-timing --num-iterations 20") for line in lines)
    assert sum("--vectorization async --env-id HalfCheetah-v5" in line for line in lines) == 2 * 2
    pendulum = planned("continuous", "--envs", "Pendulum-v1", "--iterations", "30")
    pendulum = [line for line in pendulum if "env_alone.py" not in line]
    assert len(pendulum) == 6 * 2 + 6 * 2 and all(line.endswith("--num-iterations 30") for line in pendulum)
    # --variants keeps the listed ones of each list: no Gymnax script is planned on HalfCheetah, no env alone
    kept = planned("continuous", "--variants", "nnx,torch_gymnasium-envpool", "--models", "medium")
    assert sorted((line.split()[3], re.search(r"--env-id (\S+)", line)[1]) for line in kept) == [
        ("ppo_nnx.py", "MountainCarContinuous-v0"), ("ppo_nnx.py", "Pendulum-v1"),
        ("ppo_torch_gymnasium.py", "HalfCheetah-v5"), ("ppo_torch_gymnasium.py", "Pendulum-v1")]
    learning = planned("continuous-learning", "--repeats", "3")
    assert len(learning) == 3 * (6 + 2) and not any("--sync-timing" in line for line in learning)
    cheetah = [line for line in learning if "HalfCheetah-v5" in line]
    assert len(cheetah) == 3 * 2 and all(line.endswith("--num-iterations 122") for line in cheetah)  # 1M steps


def test_gpu_preset():
    """gpu: the six Gymnax scripts on CartPole-v1 and Breakout-MinAtar at three sizes, the large model again
    at TF32 in its own folder, Craftax-Classic and Pendulum (small) and Breakout's CNN; --envs and --models
    keep what they list of it."""
    lines = planned("gpu")
    assert len(lines) == 6 * (2 * 3 + 2 + 2 + 1) and len(set(lines)) == len(lines)
    assert all("--sync-timing" in line and line.endswith("--num-iterations 20") for line in lines)
    tf32 = [line for line in lines if "--matmul-precision tf32" in line]
    assert len(tf32) == 6 * 2 and all("--model large" in line and "/tf32 " in line for line in tf32)
    assert Counter(re.search(r"--env-id (\S+) --model (\S+)", line).groups() for line in lines
                   if "Breakout" in line and "tf32" not in line) == {
        ("Breakout-MinAtar", m): 6 for m in ("small", "medium", "large", "cnn")}
    kept = planned("gpu", "--envs", "CartPole-v1", "--models", "large", "--iterations", "30")
    assert len(kept) == 6 * 2 and all("CartPole-v1" in line and line.endswith("--num-iterations 30") for line in kept)


def test_gpuscale_preset():
    """gpuscale: CartPole-v1, small, Linen and four PyTorch variants at 32, 512 and 4,096 envs, each count in its
    own folder; --env-counts replaces the counts."""
    lines = planned("gpuscale", "--repeats", "3")
    assert len(lines) == 3 * 5 * 3 and len(set(lines)) == len(lines)
    assert all("--env-id CartPole-v1 --model small" in line and "--sync-timing" in line
               and line.endswith("--num-iterations 18") for line in lines)
    assert Counter(re.search(r"/envs(\d+) .*--num-envs (\d+)", line).groups() for line in lines) == {
        (n, n): 15 for n in ("32", "512", "4096")}
    assert sum("ppo_torch_compile.py --compile-mode default --torch-env" in line for line in lines) == 9
    kept = planned("gpuscale", "--env-counts", "64", "--variants", "linen,torch_compile-torchenv")
    assert len(kept) == 2 and all("/envs64 " in line and "--num-envs 64" in line for line in kept)
    longer = planned("gpuscale", "--iterations", "25")  # said once, not once by the preset and again by the option
    assert all(line.count("--num-iterations") == 1 and line.endswith("--num-iterations 25") for line in longer)


def test_hosts_preset_runs_one_setup_for_each_regime_it_names():
    """hosts (issue 90): one subfolder per regime of the decision table that names it (Regime.hosts), no other;
    each subfolder's runs on that regime's envs and model, both frameworks in each, PPO's at 20 iterations (or
    --iterations, said once), DQN's at the regime's train frequency, PyTorch's own-env runs on its env in torch."""
    from analysis.decision import REGIMES

    lines = planned("hosts", "--repeats", "3")
    assert len(set(lines)) == len(lines) and {re.search(r"hosts r(\d)", line)[1] for line in lines} == {"1", "2", "3"}
    folder = lambda line: re.search(r"--log-dir runs/hosts/r\d/(\S+)", line)[1]
    regimes = {regime.hosts: regime for regime in REGIMES if regime.hosts}
    assert {folder(line) for line in lines} == set(regimes)
    for sub, regime in regimes.items():
        mine = [line for line in lines if folder(line) == sub]
        assert {re.search(r"--env-id (\S+) --model (\S+)", line).groups() for line in mine} <= {
            (env, model) for env in regime.envs for model in regime.models}, sub
        torch = [bool(re.search(r"python \w+_torch", line)) for line in mine]
        assert any(torch) and not all(torch), sub  # each framework's pick
        if sub.startswith("dqn"):
            assert all("--train-frequency 10" in line and "--num-envs" not in line for line in mine)
        elif sub in ("td3", "sac"):
            assert all(f"python {sub}_" in line for line in mine)
        else:
            assert all(line.count("--num-iterations") == 1 and "--num-iterations 20" in line for line in mine), sub
        if sub == "own-env":
            assert all("--torch-env" in line for line, t in zip(mine, torch) if t)
    longer = planned("hosts", "--iterations", "25")
    assert all(line.count("--num-iterations") == 1 and "--num-iterations 25" in line for line in longer
               if "/jax-env " in line)


def test_dqn_presets():
    """dqn: every DQN script, the torch ones and the CPU-env twins (the compiled one too) with each buffer, the torch
    ones on the env in torch, at each train frequency in its own folder and with 10 envs, for the preset's steps and
    no PPO flag;
    dqn-learning: every script at CleanRL's defaults, and Linen and eager torch learning from Breakout's images."""
    lines = planned("dqn")
    assert len(lines) == 15 * 4 and len(set(lines)) == len(lines)
    for k in (1, 4, 10):
        mine = [line for line in lines if f"/tf{k} " in line]
        assert len(mine) == 15 and all(line.endswith(f"--total-timesteps 25000 --train-frequency {k}") for line in mine)
    many = [line for line in lines if "/envs10 " in line]
    assert len(many) == 15 and all(line.endswith("--total-timesteps 25000 --num-envs 10 --train-frequency 10")
                                   for line in many)
    assert sum("--buffer host" in line for line in lines) == 5 * 4
    assert sum("dqn_torch_compile_gymnasium.py" in line for line in lines) == 2 * 4
    assert sum("--torch-env" in line for line in lines) == 2 * 4
    assert not any("--sync-timing" in line or "--num-iterations" in line for line in planned("dqn", "--iterations", "30"))
    learning = planned("dqn-learning", "--repeats", "3")
    cartpole = [line for line in learning if "CartPole-v1" in line]
    assert len(cartpole) == 7 * 3 and all(re.search(r"python dqn_\w+\.py --env-id CartPole-v1 --model small --seed \d "
                                                    r"--log-dir runs/dqn-learning/r\d$", line) for line in cartpole)
    pixels = sorted(line.split(" --seed")[0].split("python ")[1] for line in learning if "CartPole-v1" not in line)
    assert pixels == [f"dqn_{fw}.py --env-id Breakout-MinAtar --model cnn" for fw in ("linen", "torch") for _ in range(3)]
    assert all("runs/dqn-learning/r" in line and "/breakout --total-timesteps 500000 --learning-rate 1e-4" in line
               for line in learning if "Breakout" in line)
    assert len(planned("dqn", "--variants", "dqn_linen,dqn_torch-host")) == 2 * 4


def test_offpolicy_preset():
    """offpolicy: every TD3 and SAC script on Pendulum-v1, the torch ones with each buffer and on the env in torch,
    for the preset's steps and no PPO flag; --variants keeps the listed ones."""
    lines = planned("offpolicy", "--repeats", "3", "--iterations", "30")
    assert len(lines) == 18 * 3 and len(set(lines)) == len(lines)
    assert all(re.search(r"python (td3|sac)_\w+\.py (--buffer host |--torch-env )?--env-id Pendulum-v1 --model small "
                         r"--seed (?P<seed>\d) --log-dir runs/offpolicy/r(?P=seed) --total-timesteps 25000 --learning-starts 5000$", line)
               for line in lines), lines
    for alg in ("td3", "sac"):
        scripts = {line.split("python ")[1].split(" --env-id")[0] for line in lines if f" {alg}_" in line}
        assert scripts == {f"{alg}_{fw}.py" for fw in ("linen", "nnx", "equinox", "torch", "torch_compile")} | {
            f"{alg}_{fw}.py {flag}" for fw in ("torch", "torch_compile") for flag in ("--buffer host", "--torch-env")}
    assert len(planned("offpolicy", "--variants", "td3_linen,sac_torch-host,dqn_linen")) == 2


def test_offpolicy_learning_preset():
    """offpolicy-learning: TD3's and SAC's CPU-env twins (eager and compiled PyTorch, Linen) on HalfCheetah-v5 for
    200,000 env steps, each script's own (CleanRL's) learning starts; --envs keeps MuJoCo's tasks only, as the
    twins step no other."""
    lines = planned("offpolicy-learning", "--repeats", "3")
    assert len(lines) == 6 * 3 and len(set(lines)) == len(lines)
    assert all(re.search(r"python (td3|sac)_(torch|torch_compile|linen)_gymnasium\.py --env-id HalfCheetah-v5 --model small "
                         r"--seed (?P<seed>\d) --log-dir runs/offpolicy-learning/r(?P=seed) --total-timesteps 200000$",
                         line) for line in lines), lines
    assert len(planned("offpolicy-learning", "--envs", "HalfCheetah-v5,CartPole-v1")) == 6
    assert planned("offpolicy-learning", "--envs", "Pendulum-v1") == []


CLEANRL_SCRIPTS = ("dqn", "dqn_jax", "td3_continuous_action", "td3_continuous_action_jax", "sac_continuous_action")


def fake_cleanrl(folder: Path, fail=()) -> Path:
    """A CleanRL checkout whose scripts import its cleanrl_utils and write their run folder as CleanRL's do
    (runs/<env>__<script>__<seed>__<time> in the folder they start in), at once; the scripts named in fail begin
    theirs and exit 3."""
    (folder / "cleanrl_utils").mkdir(parents=True)
    (folder / "cleanrl_utils" / "__init__.py").write_text("")
    for name in CLEANRL_SCRIPTS:
        script = folder / "cleanrl" / f"{name}.py"
        script.parent.mkdir(parents=True, exist_ok=True)
        script.write_text(f"""import sys
from pathlib import Path
import cleanrl_utils  # CleanRL's own package, beside its scripts' folder
sys.path.insert(0, {str(ROOT / "tests")!r})
from helpers import cleanrl_run
args = dict(zip(sys.argv[1::2], sys.argv[2::2]))
run = cleanrl_run(Path("runs"), {name!r}, int(args["--seed"]), int(args["--total-timesteps"]), {{}},
                  env_id=args["--env-id"], sps_times={{100: 1.0, 200: 1.5}})
sys.exit(3 if {name in fail} else 0)
""")
    return folder


def test_cleanrl_presets(tmp_path):
    """--cleanrl: CleanRL's own scripts in the plan at the preset's settings and seed, by their own flags, in
    dqn-learning (CartPole-v1), offpolicy-learning and offpolicy-cleanrl, which needs it; refused without a
    checkout."""
    cleanrl = fake_cleanrl(tmp_path / "cleanrl")
    lines = planned("offpolicy-cleanrl", "--cleanrl", cleanrl, "--repeats", "2")
    theirs = [line for line in lines if str(cleanrl) in line]
    assert len(lines) == 9 * 2 and len(theirs) == 3 * 2
    assert all(re.search(rf" {re.escape(str(cleanrl))}/cleanrl/(td3_continuous_action|td3_continuous_action_jax|"
                         r"sac_continuous_action)\.py --env-id HalfCheetah-v5 --seed \d --total-timesteps 50000$",
                         line) for line in theirs), theirs
    assert all(line.endswith("--total-timesteps 50000") for line in lines)
    assert len(planned("offpolicy-learning", "--cleanrl", cleanrl)) == 9
    dqn = planned("dqn-learning", "--cleanrl", cleanrl)
    assert {next(word for word in line.split() if word.endswith(".py")) for line in dqn if str(cleanrl) in line} == {
        f"{cleanrl}/cleanrl/dqn.py", f"{cleanrl}/cleanrl/dqn_jax.py"}
    assert all("CartPole-v1" in line for line in dqn if str(cleanrl) in line)
    for args, message in ((["offpolicy-cleanrl"], "give --cleanrl DIR"),
                          (["dqn-learning", "--variants", "cleanrl_dqn"], "give --cleanrl DIR"),
                          (["dqn-learning", "--cleanrl", tmp_path], "give the folder of a CleanRL checkout")):
        proc = bench(*args, "--dry-run")
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


def test_cleanrl_runs_move_into_their_session_once_they_end(tmp_path):
    """A CleanRL script starts in a folder of its own; once it ended, its run folder moves into
    <repeat>/cleanrl-runs/<session>/, where analyze.py reads its session and iterations, and --resume skips it; a
    run that failed leaves nothing there. PYTHON given relative to the repository works from that folder."""
    out, cleanrl = tmp_path / "runs", fake_cleanrl(tmp_path / "cleanrl", fail=("sac_continuous_action",))
    slot = out / "offpolicy-cleanrl" / "r1"
    args = ("offpolicy-cleanrl", "--cleanrl", cleanrl, "--out", out, "--no-calibrate",
            "--variants", "cleanrl_td3_continuous_action,cleanrl_sac_continuous_action")
    python = os.path.relpath(sys.executable, ROOT)
    first = bench(*args, python=python, env={"BENCHBACK_SESSION": "S1"})
    assert first.returncode == 1, first.stdout + first.stderr
    assert "1 ran, 0 skipped, 1 failed of 2 planned" in first.stdout
    (ended,) = (slot / "cleanrl-runs").glob("*/*")
    assert ended.parent.name == "S1" and ended.name.startswith("HalfCheetah-v5__td3_continuous_action__1__")
    assert sorted(p.name for p in slot.iterdir()) == ["cleanrl-runs", "logs"]  # the failed one's folder is gone

    from analysis.runs import runs_below
    (run,), _ = runs_below(out)
    assert run.info["session"] == "S1" and run.variant == "cleanrl_td3_continuous_action"
    steps, seconds, _ = run.series("time/iteration")
    assert list(steps) == [200] and list(seconds) == [0.5] and run.info["args"]["log_frequency"] == 100

    again = bench(*args, "--resume", env={"BENCHBACK_SESSION": "S2"})
    assert "0 ran, 1 skipped, 1 failed of 2 planned" in again.stdout, again.stdout + again.stderr
    assert [p.parent.name for p in (slot / "cleanrl-runs").glob("*/*")] == ["S1"]


def test_tunesweep_preset():
    """tunesweep: each population size N as a tune.py call of each agent script (--population N) and, at the largest N
    only, a tune.py call of each single-agent script (a process per trial); every call of a repeat seeds its random
    sampler with the repeat, so every way runs the same configurations; a call's folder is named after the session
    (a resumed sweep never continues a cut-off study, whose wall time would then be two sessions')."""
    lines = planned("tunesweep", "--repeats", "2", "--iterations", "5")
    assert len(lines) == 2 * 2 * (4 * 2 + 3) and len(set(lines)) == len(lines)
    pattern = (r"\[tunesweep r(?P<r>\d)\] \S+ tune.py (?P<script>ppo_\w+\.py) "
               r"--env-ids (?P<env>CartPole-v1|Pendulum-v1) --seeds (?P=r) --trials (?P<n>\d+) (--population (?P=n) )?"
               r"--sampler random --sampler-seed (?P=r) "
               r"--pruner none --space learning_rate=log:1e-4:3e-3 ent_coef=float:0:0.02 clip_coef=float:0.1:0.3 "
               r"--out runs/tunesweep/r(?P=r)/n(?P=n)/(?P=env)__(?P<variant>\w+)__small__s(?P=r)__(?P<session>\S+) "
               r"-- (--compile )?--model small --num-iterations 5$")
    found = [re.fullmatch(pattern, line) for line in lines]
    assert all(found), [line for line, m in zip(lines, found) if not m]
    assert len({m["session"] for m in found}) == 1
    population = [m for m in found if "--population" in m[0]]
    agents = ("linen_agents", "nnx_agents", "torch_agents", "torch_agents_compile")
    assert {(m["variant"], m["n"]) for m in population} == {(v, n) for v in agents for n in ("16", "64")}
    assert all((m["variant"] == "torch_agents_compile") == ("-- --compile" in m[0]) for m in found)
    one_by_one = {(m["script"], m["n"]) for m in found if m not in population}
    assert one_by_one == {("ppo_linen.py", "64"), ("ppo_nnx.py", "64"), ("ppo_torch.py", "64")}
    kept = planned("tunesweep", "--agent-counts", "2,8", "--variants", "linen,torch_agents", "--envs", "CartPole-v1")
    assert sorted(line.split("--trials ")[1].split(" --sampler")[0] for line in kept) == ["2 --population 2",
                                                                                           "8", "8 --population 8"]


def test_tunesweep_runs_the_same_configurations_each_way_and_analyze_reads_them(tmp_path):
    """A tiny tunesweep for real: the population's agents and the one-by-one trials get the same values in the same
    order (what the study's comparison rests on); a resumed sweep skips the calls that ended, also on the folder
    unpacked from analyze.py's archive of it (a study carried to another machine); analyze.py's table pairs the two
    ways."""
    sweep = ("tunesweep", "--agent-counts", "2", "--variants", "linen,linen_agents", "--envs", "CartPole-v1",
             "--iterations", "2", "--no-calibrate")
    args = (*sweep, "--out", tmp_path)
    tiny = ["--", "--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "1"]
    proc = bench(*args, *tiny)
    assert proc.returncode == 0 and "2 ran, 0 skipped, 0 failed of 2 planned" in proc.stdout, proc.stdout + proc.stderr
    sweeps = tmp_path / "tunesweep" / "r1" / "n2"
    values = ("learning_rate", "ent_coef", "clip_coef")
    alone = [json.loads(p.read_text())["args"] for p in sorted(sweeps.glob("*__linen__*/trials/*/*/run.json"))]
    [agents] = [json.loads(p.read_text())["args"] for p in sweeps.glob("*__linen_agents__*/trials/*/*/run.json")]
    assert len(alone) == 2 and [[a[name] for a in alone] for name in values] == [agents[f"{name}s"] for name in values]
    assert all(json.loads(p.read_text())["trials"] == {"complete": 2} for p in sweeps.glob("*/summary.json"))
    again = bench(*args, "--resume", *tiny)
    assert "0 ran, 2 skipped" in again.stdout, again.stdout + again.stderr
    report = analyze(tmp_path, "--out", tmp_path / "results")
    assert report.returncode == 0, report.stdout[-2000:] + report.stderr[-2000:]
    assert re.search(r"\| CartPole-v1 \| 2 \| Linen \(jax\.vmap\) \| [\d.]+x \(1 repeat\) \|",
                     (tmp_path / "results" / "REPORT.md").read_text())
    packed = analyze("archive", tmp_path, "--out", tmp_path / "sweep.tar.xz")
    assert packed.returncode == 0, packed.stderr[-2000:]
    with tarfile.open(tmp_path / "sweep.tar.xz") as tar:
        tar.extractall(tmp_path / "elsewhere", filter="data")
    moved = bench(*sweep, "--out", tmp_path / "elsewhere" / tmp_path.name, "--resume", *tiny)
    assert "0 ran, 2 skipped" in moved.stdout, moved.stdout + moved.stderr


def test_profile_preset():
    """profile: every run traced, 6 iterations (--iterations cannot drop it below the traced ones), in one
    folder; the workloads of docs/profiling.md's table, PyTorch on its own env where it has one."""
    lines = planned("profile")
    assert len(lines) == 33 and len(set(lines)) == 33
    ppo, offpolicy = [x for x in lines if " ppo_" in x], [x for x in lines if " ppo_" not in x]
    assert all(line.endswith("--log-dir runs/profile/r1 --profile --num-iterations 6") for line in ppo), ppo
    workloads = Counter(re.search(r"--env-id (\S+) --model (\S+)", line).groups() for line in ppo)
    assert workloads == {("CartPole-v1", "small"): 10, ("CartPole-v1", "medium"): 4, ("Pendulum-v1", "small"): 4,
                         ("Breakout-MinAtar", "cnn"): 3}
    # TD3's and SAC's: 20 iterations of 100 env steps, 10 of them learning (the first compiles), the last two traced
    assert all(x.endswith("--profile --total-timesteps 2000 --learning-starts 1000 --log-frequency 100")
               for x in offpolicy)
    assert Counter(re.search(r"python (\w+?)_", x)[1] for x in offpolicy) == {"td3": 6, "sac": 6}
    assert planned("profile", "--iterations", "20") == lines
    assert len(planned("profile", "--envs", "Breakout-MinAtar", "--variants", "linen,torch_compile-torchenv")) == 1


def test_calibration_writes_what_the_analysis_reads(tmp_path):
    """calibrate.py, which bench.sh runs first in every session, with the scripts' own code."""
    proc = subprocess.run([sys.executable, str(ROOT / "calibrate.py"), "--seconds", "0.05", "--out",
                           str(tmp_path / "now.json")], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    measured = json.loads((tmp_path / "now.json").read_text())
    assert set(measured["minibatch_step_seconds"]) == {"jax", "torch"}
    assert all(seconds > 0 for seconds in measured["minibatch_step_seconds"].values())


def test_repeats_use_their_own_seed():
    lines = planned("exp3", "--repeats", "2")
    assert len(lines) == 60
    assert sum("--seed 2 --log-dir runs/exp3/r2" in line for line in lines) == 30


def order(lines, repeat) -> list[str]:
    """The runs of one repeat, as their commands without seed and folder, in the order they run."""
    return [re.sub(r" --seed \d+ --log-dir \S+", "", line.split(maxsplit=3)[3]) for line in lines
            if line.startswith(f"[exp1 r{repeat}]")]


def test_each_repeat_runs_in_its_own_shuffled_order():
    lines = planned("exp1", "--repeats", "2", "--envs", "CartPole-v1,Acrobot-v1")
    first, second = order(lines, 1), order(lines, 2)
    assert sorted(first) == sorted(second) and first != second  # the same runs, in another order
    nested = [f"ppo_{v}.py --env-id {env} --model {m}" for env in ("CartPole-v1", "Acrobot-v1")
              for v in ("linen", "nnx", "nnx_cached", "equinox", "torch", "torch_compile")
              for m in ("small", "medium", "large")]
    assert sorted(first) == sorted(nested) and first != nested  # not the loops' order
    assert planned("exp1", "--repeats", "2", "--envs", "CartPole-v1,Acrobot-v1") == lines  # same seed, same order
    other = planned("exp1", "--repeats", "2", "--envs", "CartPole-v1,Acrobot-v1", "--order-seed", "7")
    assert sorted(other) == sorted(lines) and other != lines
    sweep = planned("sweep", "--models", "small", "--envs", "CartPole-v1")
    assert all(line.startswith("[warmup") for line in sweep[:4])  # the warm-up still comes first


def test_the_plan_file_records_the_order_and_its_seed(tmp_path):
    """And the session: every run records it, and its calibration comes first."""
    options = ("exp2", "--envs", "CartPole-v1", "--variants", "linen,nnx,equinox", "--order-seed", "3",
               "--out", tmp_path)
    proc = bench(*options, "--", *TINY)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    plan = (tmp_path / "plan.txt").read_text().splitlines()
    assert "order seed 3" in plan[0]
    dry = planned(*options, "--", *TINY)
    assert plan[1:] == dry
    ran = [f"ppo_{line.split()[4]}.py" for line in proc.stdout.splitlines() if line.startswith("[")]
    assert ran == [line.split()[3] for line in dry]  # they ran in the planned order
    (calibration,) = (tmp_path / "sessions").glob("*.json")
    session = json.loads(calibration.read_text())
    assert calibration.stem == session["session"] and session["session"] in proc.stdout
    assert {"torch", "jax"} <= set(session["layer_seconds"]) and all(
        t > 0 for t in session["minibatch_step_seconds"].values())
    assert {json.loads(p.read_text())["session"] for p in tmp_path.glob("exp2/r1/*/run.json")} == {session["session"]}


def test_tuning_runs_each_setting_in_its_folder():
    lines = planned("tuning", "--repeats", "2")
    assert len(lines) == 2 * 2 * 11  # repeats x sizes x (variant, setting) pairs
    settings = {"xla-n": "env XLA_FLAGS=--xla_cpu_multi_thread_eigen=true ",
                "xla-1": "env XLA_FLAGS=--xla_cpu_multi_thread_eigen=false ",
                "torch-1": "env OMP_NUM_THREADS=1 ", "omp-passive": "env OMP_WAIT_POLICY=PASSIVE "}
    for line in lines:
        setting = re.search(r"--log-dir runs/tuning/r\d/(\S+) ", line)[1]
        assert settings[setting] in line and line.endswith("--sync-timing --num-iterations 20"), line
    scopes = sorted(re.search(r"--compile-scope (\S+)", x)[1] for x in lines if "--compile-scope" in x and " r1]" in x)
    assert scopes == sorted(["grads", "grads", "grads+policy", "update", "update+policy"] * 2)
    kept = planned("tuning", "--variants", "linen", "--models", "small")
    assert len(kept) == 2 and all("ppo_linen.py" in x for x in kept)


def test_filters():
    assert per_experiment(planned("sweep", "--envs", "CartPole-v1,Acrobot-v1", "--models", "small")) == \
        {"warmup": 4, "exp1": 12, "exp2": 20, "exp3": 10, "cpuenv": (8 + 6) * 2, "envscale": (8 + 6 + 4 + 3) * 9,
         "agents": 2 * (4 * 4 + 4), "expensive": 6, "torchenv": 2 * 6 + 2 * 4 * 4, "cpucompile": 4 * 2 + 4 * 2}
    lines = planned("exp2", "--variants", "linen,torch_compile")
    assert len(lines) == 24 and all("ppo_linen.py" in x or "ppo_torch_compile.py" in x for x in lines)
    assert len(planned("exp1", "--envs", "extra", "--models", "large")) == 7 * 6
    assert per_experiment(planned("sweep", "--experiments", "exp3")) == {"exp3": 30}
    assert all(x.endswith("--num-iterations 7 --num-envs 8") for x in planned("exp3", "--iterations", "7", "--",
                                                                            "--num-envs", "8"))


@functools.cache
def full_sweep() -> list[str]:
    return planned("sweep", "--repeats", "2")


@pytest.mark.parametrize("n", [3, 7])
def test_shards_partition_the_schedule(n):
    full = full_sweep()
    shards = [planned("sweep", "--repeats", "2", "--shard", f"{i}/{n}") for i in range(n)]
    assert sorted(sum(shards, [])) == sorted(full)  # every run in exactly one shard
    group = lambda line: (line.split("]")[0], line.split("--env-id ")[1].split()[0])  # experiment, repeat, env
    homes = {}
    for i, shard in enumerate(shards):
        for line in shard:
            assert homes.setdefault(group(line), i) == i, f"{group(line)} split over shards"  # pairs stay together
    assert all(shards) and max(map(len, shards)) < 1.5 * len(full) / n  # every shard works, none much more


@pytest.mark.parametrize("args, message", [
    (["--shard", "3/3"], "--shard"), (["--repeats", "0"], "--repeats"), (["--variants", "jaxx"], "unknown variant"),
    (["--models", "tiny"], "unknown model"), (["nope"], "unknown preset"), (["--bogus"], "unknown option"),
    (["exp1", "--experiments", "exp2"], "not part of preset"),
    (["--envs", "CartPole-v1,Foo"], "unknown env 'Foo'"), (["--envs", "MNISTBandit-bsuite"], "unknown env"),
])
def test_bad_options(args, message):
    proc = bench(*args, "--dry-run")
    assert proc.returncode == 2 and message in proc.stderr


def run_dirs(slot, variant):
    return sorted(slot.glob(f"CartPole-v1__{variant}__small__s1__*"))


def test_failure_logged_then_resume(tmp_path):
    out, slot = tmp_path / "runs", tmp_path / "runs" / "exp2" / "r1"
    failing = tmp_path / "python"  # fails for Equinox, runs everything else for real
    failing.write_text(f'#!/bin/bash\nif [[ "$*" == *ppo_equinox.py* ]]; then echo boom >&2; exit 3; fi\n'
                       f'exec {sys.executable} "$@"\n')
    failing.chmod(0o755)
    first = bench("exp2", "--envs", "CartPole-v1", "--variants", "equinox,linen", "--out", out, "--no-calibrate", "--", *TINY,
                  python=failing)
    assert first.returncode == 1, first.stdout + first.stderr
    assert "1 ran, 0 skipped, 1 failed of 2 planned" in first.stdout
    log = (out / "failures.log").read_text()
    assert "exit 3" in log and "ppo_equinox.py --env-id CartPole-v1" in log and "boom" in log
    (linen,) = run_dirs(slot, "linen")
    assert (linen / "summary.json").exists()  # the failure did not stop the sweep

    half = slot / "CartPole-v1__equinox__small__s1__1"  # an interrupted run: no summary.json
    half.mkdir()
    (half / "run.json").write_text("{}")
    second = bench("exp2", "--envs", "CartPole-v1", "--variants", "equinox,linen", "--out", out, "--resume", "--no-calibrate",
                   "--", *TINY)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "1 ran, 1 skipped, 0 failed of 2 planned" in second.stdout
    assert run_dirs(slot, "linen") == [linen]  # finished: not run again
    equinox = run_dirs(slot, "equinox")
    assert len(equinox) == 2 and half in equinox  # rerun in a new directory; the old one untouched
    assert [p.name for p in half.iterdir()] == ["run.json"]
    assert (next(p for p in equinox if p != half) / "summary.json").exists()


def sigint_default():
    """A sweep started in a terminal: SIGINT at its default, even where this test inherited it
    ignored (a background job of a non-interactive shell), which no trap could undo."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_stops_the_sweep(tmp_path):
    out = tmp_path / "runs"
    proc = subprocess.Popen(["bash", str(ROOT / "bench.sh"), "exp2", "--envs", "CartPole-v1", "--variants",
                             "linen,torch", "--out", str(out), "--iterations", "100000", "--no-calibrate"], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=sigint_default,
                            env={**os.environ, "PYTHON": sys.executable})
    slot = out / "exp2" / "r1"
    deadline = time.time() + 300
    while not any(slot.glob("*/*tfevents*")) and time.time() < deadline:
        time.sleep(1)
    time.sleep(3)  # training has started
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert "interrupted" in stderr and re.search(r"0 ran, 0 skipped, 0 failed of 2 planned", stdout)
    (first,) = [p for p in slot.iterdir() if p.name != "logs"]  # the sweep did not go on after Ctrl-C
    assert not (first / "summary.json").exists() and (first / "run.json").exists()
    assert not processes_mentioning(out), "a run outlived the sweep"


def processes_mentioning(text) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode()
        except OSError:  # the process ended meanwhile
            continue
        if str(text) in args:
            found.append(args)
    return found


def test_ctrl_c_ends_a_run_that_ignores_it(tmp_path):
    """A run that ignores SIGINT (a wrapper that does, or a run started with it ignored) is
    interrupted again, then terminated: the sweep neither hangs nor leaves it running."""
    stubborn = tmp_path / "python"
    stubborn.write_text("#!/bin/bash\ntrap '' INT\necho started\nwhile true; do sleep 1; done\n")
    stubborn.chmod(0o755)
    out = tmp_path / "runs"
    proc = subprocess.Popen(["bash", str(ROOT / "bench.sh"), "exp2", "--envs", "CartPole-v1", "--variants",
                             "linen,torch", "--out", str(out), "--no-calibrate"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, preexec_fn=sigint_default,
                            env={**os.environ, "PYTHON": str(stubborn)})
    logs = out / "exp2" / "r1" / "logs"
    deadline = time.time() + 60
    while not any("started" in log.read_text() for log in logs.glob("*.log")) and time.time() < deadline:
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stdout + stderr
    assert "0 ran, 0 skipped, 0 failed of 2 planned" in stdout
    assert not processes_mentioning(out), "a run outlived the sweep"
