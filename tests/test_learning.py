"""Each variant learns CartPole with the defaults (100 iterations, 819,200 steps).

Random play returns about 22 on CartPole-v1 and the maximum is 500; the contract asks
for a mean of at least 400 over the episodes of the last 10 iterations.
"""

import pytest
from helpers import AGENT_SCRIPTS, COMPILED_TWINS, SCRIPTS, read_json, run_ok

# Not here, for the suite's time: the agent scripts, since tests/test_agents.py proves each agent, eager or
# compiled, computes what the single-agent script computes with its seed; and one script of each eager/compiled
# torch pair, since tests/test_compilation.py proves the compiled one with --compile-mode none is the eager one,
# number for number, and tests/test_equivalence.py that its compiled updates are the reference's: of the JAX-env
# pair the compiled script learns here, with its env in torch (which tests/test_torch_envs.py proves steps as
# Gymnax's envs step; its rollout through Gymnax is tests/test_rollout.py's); on Gymnasium the eager one, through
# EnvPool's next-step autoreset (its masked reset steps are those of Gymnasium's next-step vector env, which
# tests/test_vectorization.py proves weigh nothing).
PAIRED = {script for pair in COMPILED_TWINS.items() for script in pair}
CASES = [(s, ()) for s in SCRIPTS if s not in AGENT_SCRIPTS and s not in PAIRED] + [
    ("ppo_torch_compile.py", ("--torch-env",)), ("ppo_torch_gymnasium.py", ("--vectorization", "envpool"))]


HALF = CASES[0::2]  # the other half is tests/test_learning_more.py's: a file each, so the two workers share them


def ids(cases):
    return [" ".join((s, *t)) for s, t in cases]


@pytest.mark.parametrize("script,toggles", HALF, ids=ids(HALF))
def test_learns_cartpole_with_defaults(script, toggles, tmp_path):
    learns_cartpole(script, toggles, tmp_path)


def learns_cartpole(script, toggles, tmp_path):
    """(The CPU-env torch script also with EnvPool's next-step autoreset: its masked reset steps.)"""
    run_dir = run_ok(script, *toggles, log_dir=tmp_path)
    summary, args = read_json(run_dir / "summary.json"), read_json(run_dir / "run.json")["args"]
    assert args["num_iterations"] == 100 and args["env_id"] == "CartPole-v1"
    assert summary["charts/episodic_return_final"] >= 400, summary
