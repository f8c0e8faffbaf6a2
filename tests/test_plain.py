"""The plain script (plain.py; README, "Copying a script into your project"): each script without the
benchmark's harness. Every script's plain version stands alone (no harness left, no benchmark flag, every
name it calls defined); one script of each algorithm and framework runs plain, in this process, and logs
what the full script logs with the same seed: the same tags but the harness's, the same values."""

import ast
import builtins
import dataclasses
import importlib.util

import plain
import pytest
from helpers import JAX_SET_BY_SCRIPTS, ROOT, ran_in_process, scalars
from test_shape import ALL

HARNESS_FLAGS = {"sync_timing", "matmul_precision", "log_dir", "save_model", "load_model", "eval_episodes",
                 "profile", "progress_seconds", "track"}
HARNESS_TAGS = ("time/", "memory/")  # what RunLog adds to the algorithm's own tags
UNEQUAL = ("charts/SPS",)  # a clock's reading
RUNS = {  # one script per algorithm and framework, at a tiny size; the flags each run takes
    **{s: ["--num-envs", "4", "--num-steps", "16", "--num-minibatches", "2", "--update-epochs", "2",
           "--num-iterations", "3"] for s in ("ppo_linen.py", "ppo_nnx.py", "ppo_equinox.py", "ppo_torch.py",
                                             "ppo_linen_agents.py")},
    **{s: ["--total-timesteps", "600", "--learning-starts", "400", "--log-frequency", "100", "--buffer-size", "500"]
       for s in ("dqn_linen.py", "dqn_torch.py")},
    **{s: ["--total-timesteps", "300", "--learning-starts", "200", "--log-frequency", "50", "--buffer-size", "300"]
       for s in ("td3_nnx.py", "td3_torch.py", "sac_equinox.py", "sac_torch.py")},
}


def plain_source(script: str) -> str:
    return plain.plain((ROOT / script).read_text())


def load_plain(script: str, folder):
    path = folder / f"plain_{script}"
    path.write_text(plain_source(script))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("script", ALL)
def test_the_plain_script_stands_alone(script):
    """No harness left; every name it refers to is defined, imported or a builtin; shorter than the
    reading part by what the harness took."""
    text = plain_source(script)
    assert "# %% harness" not in text and "# harness" not in text and "# plain:" not in text
    body = ast.parse(text).body
    defined = set().union(*map(plain.bound, body)) | set(dir(builtins))
    harness = {"RunArgs", "RunLog", "START_TIME", "start_run", "check_args", "make_run_dir", "save_model", "read_model",
               "region", "traced", "invalid"}
    assert not (plain.used(body) | defined) & harness, f"{script}'s plain version still has some of the harness"
    assert plain.used(body) <= defined, plain.used(body) - defined
    assert text.count("\n") < (ROOT / script).read_text().split("# %% harness")[0].count("\n")


@pytest.mark.parametrize("script", ["ppo_linen.py", "ppo_torch.py", "dqn_linen.py", "td3_torch.py"])
def test_the_plain_arguments_are_the_algorithms(script, tmp_path):
    """The plain script's flags: the full script's but the benchmark's own."""
    full = {f.name for f in dataclasses.fields(__import__("helpers").load(script).RunArgs)}
    assert {f.name for f in dataclasses.fields(load_plain(script, tmp_path).Args)} == full - HARNESS_FLAGS
    assert HARNESS_FLAGS - {"sync_timing"} <= full  # (--sync-timing: the PPO scripts')


@pytest.mark.parametrize("script", sorted(RUNS))
def test_the_plain_script_logs_what_the_full_one_does(script, tmp_path, monkeypatch):
    """Run plain and full with the same seed, in this process: every tag the plain run writes, the full run
    writes with the same values at the same steps, and the full run writes no other but the harness's."""
    import jax

    full = scalars(ran_in_process(script, *RUNS[script], log_dir=tmp_path / "full"))
    monkeypatch.chdir(tmp_path)  # the plain script writes into runs/ where it runs
    monkeypatch.setattr("sys.argv", [script, *RUNS[script]])
    kept = {name: jax.config.values[name] for name in JAX_SET_BY_SCRIPTS}
    try:
        load_plain(script, tmp_path).main()
    finally:
        for name, value in kept.items():
            jax.config.update(name, value)
    (run_dir,) = (tmp_path / "runs").iterdir()
    alone = scalars(run_dir)
    assert set(alone) == {tag for tag in full if not tag.startswith(HARNESS_TAGS)}
    assert any(tag.startswith("losses/") for tag in alone)
    for tag, values in alone.items():
        if tag not in UNEQUAL:
            assert values == full[tag], tag
        assert [step for step, _ in values] == [step for step, _ in full[tag]], tag


def test_the_command(tmp_path):
    """python plain.py SCRIPT prints the plain script; a file that is not a benchmark script: one line, exit 2."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, ROOT / "plain.py", "ppo_linen.py"], capture_output=True, text=True,
                          cwd=ROOT)
    assert done.returncode == 0 and done.stdout == plain_source("ppo_linen.py")
    (tmp_path / "other.py").write_text("print('hello')\n")
    done = subprocess.run([sys.executable, ROOT / "plain.py", tmp_path / "other.py"], capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and done.stderr.startswith("error:")
