"""A newcomer's run (issue 88), where stdout is no terminal (a log file, a job scheduler, a notebook's
subprocess): it says what it will run, when the first iteration (compilation included) is done and then where
it is, and its last line says whether it learned, by the study's target for its algorithm, env and model; a
run stopped by SIGTERM says at which step. The harness does it, one text in every script: one script per
algorithm runs here."""

import json
import re
import signal
import subprocess
import sys

import pytest
from helpers import ROOT, TINY, read_json

OFFPOLICY = ["--learning-starts", "200", "--log-frequency", "50", "--buffer-size", "300"]
RUNS = {"ppo_linen.py": [*TINY, "--num-iterations", "4"],
        "dqn_torch.py": ["--total-timesteps", "400", *OFFPOLICY],
        "td3_linen.py": ["--total-timesteps", "300", *OFFPOLICY, "--env-id", "Pendulum-v1"],
        "sac_torch.py": ["--total-timesteps", "300", *OFFPOLICY, "--env-id", "Pendulum-v1"]}
TOTAL = {"ppo_linen.py": 4 * 4 * 16, "dqn_torch.py": 400, "td3_linen.py": 300, "sac_torch.py": 300}
PROGRESS = re.compile(r"step ([\d,]+) of ([\d,]+): (no episode ended yet|return -?[\d,.]+ \(the episodes of the last 10 "
                      r"iterations\)), [\d,]+ steps/s, [\d,.]+ min left at this rate$")


@pytest.mark.parametrize("script", RUNS)
def test_a_piped_run_says_where_it_is_and_whether_it_learned(script, tmp_path):
    done = subprocess.run([sys.executable, script, *RUNS[script], "--progress-seconds", "0", "--log-dir", tmp_path],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stderr
    (run_dir,) = tmp_path.iterdir()
    lines = [line for line in done.stdout.splitlines() if line.startswith(("step ", str(run_dir)))]
    assert lines[0] == f"{run_dir}: {TOTAL[script]:,} env steps to run; the first iteration includes compilation"
    assert re.fullmatch(r"step [\d,]+: first iteration done, compilation included, [\d.]+ s", lines[1]), lines[1]
    steps = [int(m.group(1).replace(",", "")) for line in lines[2:-1] if (m := PROGRESS.match(line))]
    assert len(steps) == len(lines) - 3 >= 2 and steps == sorted(steps) and steps[-1] == TOTAL[script], lines
    # the last line: the final return, as summary.json has it, and the verdict on the study's target
    final = read_json(run_dir / "summary.json")["charts/episodic_return_final"]
    algorithm, env_id = script.split("_")[0], RUNS[script][RUNS[script].index("--env-id") + 1] if "--env-id" in RUNS[
        script] else "CartPole-v1"
    target = json.loads((ROOT / "results" / "targets.json").read_text())[algorithm][env_id]["small"]["target"]
    said = f"final return {final:,.2f} (the episodes of the last 10 iterations)" if final is not None else (
        "no episode ended in the last 10 iterations")
    assert lines[-1].startswith(f"{run_dir}: {said}; the study's target for {env_id}, small model"), lines[-1]
    assert lines[-1].endswith(f"{target:g}: not reached"), lines[-1]  # a few hundred steps learn little


def test_a_run_stopped_by_sigterm_says_where(tmp_path):
    """A scheduler's time limit: the run stops as Ctrl-C stops it, saying at which step, exit 143, no summary."""
    proc = subprocess.Popen([sys.executable, "ppo_linen.py", *TINY, "--num-iterations", "100000", "--progress-seconds",
                             "0", "--log-dir", tmp_path], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            cwd=ROOT)
    for line in proc.stdout:
        if "first iteration done" in line:
            break
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    (run_dir,) = tmp_path.iterdir()
    last = out.strip().splitlines()[-1]
    assert re.fullmatch(rf"{re.escape(str(run_dir))}: stopped by SIGTERM at step [\d,]+ of 6,400,000; the logs of "
                        "the finished iterations are kept, no summary.json", last), last
    assert proc.returncode == 143 and "Traceback" not in err and not (run_dir / "summary.json").exists()
