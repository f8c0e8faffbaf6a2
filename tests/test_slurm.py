"""bench.sh --slurm: the sweep as a SLURM job array plus an analysis job, first against a stub
sbatch (what is submitted), then on a real single-node SLURM cluster started here (Debian's
slurm-wlm: slurmctld and slurmd on localhost, no munge, no cgroups)."""

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import STEADY, TINY, bench

INSTALL = "apt-get install -y slurm-wlm (Debian's SLURM: slurmctld, slurmd, sbatch)"


def test_slurm_needs_sbatch(tmp_path):
    bin_dir = tmp_path / "bin"  # a PATH with bash and the basics, and no sbatch
    bin_dir.mkdir()
    for tool in ("bash", "env", "tr", "seq", "mkdir", "dirname"):
        (bin_dir / tool).symlink_to(shutil.which(tool))
    proc = bench("exp2", "--slurm", "2", env={"PATH": str(bin_dir)})
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "sbatch" in proc.stderr, proc.stderr


def test_slurm_submits_shards_then_the_analysis(tmp_path):
    """With a stub sbatch that records what it is given."""
    bin_dir, calls = tmp_path / "bin", tmp_path / "calls"
    bin_dir.mkdir()
    stub = bin_dir / "sbatch"
    stub.write_text('#!/bin/bash\nn=$(ls %s | wc -l)\nprintf "%%s\\0" "$@" > %s/$n\necho $((1000 + n))\n'
                    % (calls, calls))
    stub.chmod(0o755)
    calls.mkdir()
    out = tmp_path / "runs"
    proc = bench("exp2", "--envs", "CartPole-v1", "--variants", "linen,torch", "--resume", "--out", out,
                 "--slurm", "3", "--sbatch", "--partition=gpu --gpus=1", "--", "--num-envs", "4",
                 env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    assert proc.returncode == 0, proc.stderr
    array, analysis = ((calls / str(i)).read_text().split("\0")[:-1] for i in range(2))
    assert "--array=0-2" in array and "--partition=gpu" in array and "--gpus=1" in array
    wrap = next(a for a in array if a.startswith("--wrap="))
    task = wrap.removeprefix("--wrap=")
    for part in ("bench.sh exp2 --envs CartPole-v1", "--resume", f"--out {out}",
                 "--shard $SLURM_ARRAY_TASK_ID/3 -- --num-envs 4"):
        assert part in task.replace("\\,", ","), task
    assert "--slurm" not in task and "--sbatch" not in task
    assert "--dependency=afterany:1000" in analysis and "--partition=gpu" in analysis
    assert f"analyze.py {out} --out {out}/results" in next(a for a in analysis if a.startswith("--wrap="))
    assert "job array 1000" in proc.stdout and "analysis job 1001" in proc.stdout
    assert f"{out}/results/REPORT.md" in proc.stdout and f"{out}/slurm/task_<i>.out" in proc.stdout


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """slurmctld and slurmd on this machine, state and logs in a temporary folder, ports of their
    own; stopped by their pid files afterwards, whatever the test did."""
    if not (shutil.which("slurmctld") and shutil.which("slurmd") and shutil.which("sbatch")):
        pytest.skip(f"no SLURM here: {INSTALL}")
    d = tmp_path_factory.mktemp("slurm")
    host = socket.gethostname().split(".")[0]
    (d / "state").mkdir()
    (d / "spool").mkdir()
    conf = d / "slurm.conf"
    conf.write_text(f"""ClusterName=benchback
SlurmctldHost={host}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/none
CredType=cred/none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SlurmctldPort={free_port()}
SlurmdPort={free_port()}
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool
SlurmctldPidFile={d}/slurmctld.pid
SlurmdPidFile={d}/slurmd.pid
SlurmctldLogFile={d}/slurmctld.log
SlurmdLogFile={d}/slurmd.log
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
NodeName={host} NodeAddr=127.0.0.1 CPUs={os.cpu_count()} State=UNKNOWN
PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP
""")
    env = {**os.environ, "SLURM_CONF": str(conf)}
    try:
        for daemon in ("slurmctld", "slurmd"):
            subprocess.run([daemon, "-f", str(conf)], env=env, check=True, timeout=60, capture_output=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout
            if state.strip() == "idle":
                break
            time.sleep(1)
        else:
            pytest.fail(f"the node never became idle: {state!r}\n{(d / 'slurmctld.log').read_text()[-2000:]}")
        yield env
    finally:
        for daemon in ("slurmd", "slurmctld"):
            pid_file = d / f"{daemon}.pid"
            if pid_file.exists():
                pid = int(pid_file.read_text().split()[0])
                try:
                    os.kill(pid, signal.SIGTERM)
                    for _ in range(50):
                        os.kill(pid, 0)
                        time.sleep(0.2)
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def wait_for(jobs: list[str], env, timeout=600):
    deadline = time.time() + timeout
    while time.time() < deadline:
        queued = subprocess.run(["squeue", "-h", "-j", ",".join(jobs), "-o", "%i"], env=env, capture_output=True,
                                text=True).stdout
        if not queued.strip():
            return
        time.sleep(2)
    pytest.fail(f"jobs {jobs} still queued after {timeout} s")


def submitted(proc) -> list[str]:
    """The job ids bench.sh printed: the array's, then the analysis job's."""
    line = next(line for line in proc.stdout.splitlines() if line.startswith("bench.sh: submitted"))
    words = line.split()
    return [words[words.index("array") + 1], words[words.index("job", words.index("analysis")) + 1]]


def finished_runs(out: Path) -> set[str]:
    return {p.parent.name.rsplit("__", 1)[0] for p in out.glob("exp2/r*/*/summary.json")}


def test_sweep_on_a_live_slurm_cluster(slurm_cluster, tmp_path):
    """Two shards, one repeat each, one run failing; the analysis job; then a resubmission with
    --resume that runs only what is missing."""
    env, out = slurm_cluster, tmp_path / "runs"
    failing = tmp_path / "python"  # fails for PyTorch's second repeat, runs everything else for real
    failing.write_text(f'#!/bin/bash\nif [[ "$*" == *ppo_torch.py*"--seed 2"* ]]; then echo boom >&2; exit 3; fi\n'
                       f'exec {sys.executable} "$@"\n')
    failing.chmod(0o755)
    plan = ["exp2", "--envs", "CartPole-v1", "--variants", "linen,torch", "--repeats", "2", "--out", out,
            "--no-calibrate"]
    proc = bench(*plan, "--slurm", "2", "--", *TINY, *STEADY, env=env, python=failing)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    wait_for(submitted(proc), env)

    tasks = sorted((out / "slurm").glob("task_*.out"))
    assert [t.name for t in tasks] == ["task_0.out", "task_1.out"]  # every task ran
    summaries = [next(line for line in t.read_text().splitlines() if line.startswith("bench.sh:")) for t in tasks]
    assert all(f"of 2 planned (shard {i}/2)" in s for i, s in enumerate(summaries)), summaries
    assert sum("1 failed" in s for s in summaries) == 1
    # the shards' runs together are the plan, but for the failure, which is reported
    assert finished_runs(out) == {"CartPole-v1__linen__small__s1", "CartPole-v1__torch__small__s1",
                                  "CartPole-v1__linen__small__s2"}
    failures = (out / "failures.log").read_text()
    assert "exit 3" in failures and "ppo_torch.py" in failures and "boom" in failures
    analysis_log = (out / "slurm" / "analysis.out").read_text()
    assert "ppo_torch.py" in analysis_log  # the analysis job repeats the failures
    report = (out / "results" / "REPORT.md").read_text()
    # a shard holds a repeat's pair, so the pair ran in one session and is compared
    assert "3 runs read" in report and "| torch / linen | small |" in report

    again = bench(*plan, "--resume", "--slurm", "2", "--", *TINY, *STEADY, env=env)  # the real python now
    assert again.returncode == 0, again.stdout + again.stderr
    wait_for(submitted(again), env)
    summaries = [next(line for line in t.read_text().splitlines() if line.startswith("bench.sh:")) for t in tasks]
    assert sorted(s.split(" of ")[0] for s in summaries) == ["bench.sh: 0 ran, 2 skipped, 0 failed",
                                                            "bench.sh: 1 ran, 1 skipped, 0 failed"]
    assert finished_runs(out) == {f"CartPole-v1__{v}__small__s{r}" for v in ("linen", "torch") for r in (1, 2)}
    assert "4 runs read" in (out / "results" / "REPORT.md").read_text()
