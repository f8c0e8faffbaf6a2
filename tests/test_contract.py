"""The contract every ppo_*.py keeps (SPEC section 2-3): arguments, files, tags, errors."""

import ast
import dataclasses
import math
import os

import numpy as np
import pytest
from analysis import profiles
from helpers import (AGENT_SCRIPTS, GYMNASIUM_SCRIPTS, ONE_AGENT_SCRIPTS, REGIONS, ROOT, SCRIPTS, SYNC_TAGS, TAGS, TINY,
                     TINY_ARGS, analyze, check_profiled, frameworks, load, ran_in_process, read_json, run, run_ok, scalars,
                     summary_keys, wall_times)

# SPEC section 2: the shared fields and their defaults, identical in every script
SHARED_ARGS = {
    "env_id": "CartPole-v1", "model": "small", "num_envs": 32, "num_steps": 256, "num_minibatches": None,
    "update_epochs": 10, "num_iterations": 100, "learning_rate": None, "gamma": 0.99, "gae_lambda": 0.95,
    "clip_coef": 0.2, "clip_vloss": True, "ent_coef": None, "vf_coef": 0.5, "max_grad_norm": 0.5,
    "adam_eps": 1e-5, "adam_betas": (0.9, 0.999), "normalize": True, "bootstrap_truncation": True, "seed": 1,
    "sync_timing": False, "matmul_precision": "float32", "log_dir": "runs", "save_model": False, "load_model": None,
    "eval_episodes": 0, "profile": False, "progress_seconds": 30.0, "track": None,
}
# the defaults an action space picks for the fields left None above: the seed README's, CleanRL's continuous script's
ACTION_SPACE_DEFAULTS = {False: dict(num_minibatches=8, learning_rate=2.5e-4, ent_coef=0.01),
                         True: dict(num_minibatches=32, learning_rate=3e-4, ent_coef=0.0)}
# the only fields a variant may add: compile toggles, the torch scripts' env in torch, the CPU-env scripts'
# vectorization, the agent scripts' count
COMPILE_TOGGLES = {"jit", "jit_env", "compile_mode", "compile_scope", "compile", "torch_env", "vectorization",
                   "num_agents", "learning_rates", "ent_coefs", "clip_coefs"}  # the agent scripts': values per agent
SECTIONS = ["imports", "Args", "environment helpers", "model", "rollout", "GAE", "loss and update",
            "training loop with logging", "main", "harness"]
DETERMINISTIC_TAGS = TAGS - {"charts/SPS", "time/iteration", "memory/peak_rss_mb"}


def test_all_scripts_found():
    assert {"ppo_linen.py", "ppo_torch.py"} <= set(SCRIPTS)


def test_shared_args_identical():
    reference = None
    for script in SCRIPTS:
        fields = {f.name: f for f in dataclasses.fields(load(script).RunArgs)}
        assert set(fields) - set(SHARED_ARGS) <= COMPILE_TOGGLES, f"{script} adds {set(fields) - set(SHARED_ARGS)}"
        shared = {name: (fields[name].default, str(fields[name].type)) for name in SHARED_ARGS}
        assert {n: d for n, (d, _) in shared.items()} == SHARED_ARGS, script
        reference = reference or (script, shared)
        assert shared == reference[1], f"{script} and {reference[0]} differ in a type or default"


@pytest.mark.parametrize("continuous", [False, True])
def test_action_space_defaults_identical(continuous):
    """Every script fills a value left unset with its action space's default, the same in every script;
    a value given is kept."""
    for script in SCRIPTS:
        m = load(script)
        assert m.DEFAULTS == ACTION_SPACE_DEFAULTS, script
        assert dataclasses.asdict(m.with_defaults(m.RunArgs(), continuous)).items() >= ACTION_SPACE_DEFAULTS[continuous].items()
        assert m.with_defaults(dataclasses.replace(m.RunArgs(), ent_coef=0.5), continuous).ent_coef == 0.5


def test_help_says_each_default_once(capsys):
    """--help gives a field the action space picks the default of each space, once (not tyro's 'None')."""
    import re

    import tyro

    for script in SCRIPTS:
        m = load(script)
        with pytest.raises(SystemExit):
            tyro.cli(m.RunArgs, args=["--help"])
        text = " ".join(re.sub(r"[│╭╮╰╯─]", " ", capsys.readouterr().out).split())
        for name, value in ACTION_SPACE_DEFAULTS[False].items():
            flag = "--" + name.replace("_", "-")
            said = text[text.index(flag):].split(" --")[0]
            assert "(default: None)" not in said, (script, said)
            assert f"(default: {value}, or {ACTION_SPACE_DEFAULTS[True][name]} for continuous actions)" in said, said


def test_every_field_has_help():
    for script in SCRIPTS:
        source = (ROOT / script).read_text()
        body = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "Args").body
        for field, doc in zip(body, body[1:]):
            if isinstance(field, ast.AnnAssign):
                assert isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant), \
                    f"{script}: field {field.target.id} has no docstring"


def test_sections_in_order():
    for script in SCRIPTS:
        lines = (ROOT / script).read_text().splitlines()
        assert [line[5:] for line in lines if line.startswith("# %% ")] == SECTIONS, script


def test_scripts_are_self_contained():
    """Each script can be copied alone: it imports no module of this project but torch_envs, the envs written in
    torch, which the torch scripts import under --torch-env only (test_torch_envs.py holds where)."""
    ours = ({p.stem for p in ROOT.glob("*.py")} | {"tests", "helpers"}) - {"torch_envs"}
    for script in SCRIPTS:
        tree = ast.parse((ROOT / script).read_text())
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {n.module.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        assert not imported & ours, f"{script} imports {imported & ours}"


def test_jax_scripts_do_not_import_torch():
    for script in SCRIPTS:
        if "torch" not in script:
            assert "import torch" not in (ROOT / script).read_text(), script


SAVE_AND_EVALUATE = ("--save-model", "--eval-episodes", "3")


@pytest.fixture(scope="module")
def tiny_runs(tmp_path_factory):
    """One tiny run per script that saves its model and evaluates it, plus a second with the same
    seed, --sync-timing and --profile: the determinism test compares them (neither blocking to time
    the phases, nor tracing, nor what runs after training may change a number)."""
    runs = {}
    for script in SCRIPTS:
        log_dir = tmp_path_factory.mktemp(script.removesuffix(".py"))
        runs[script] = (run_ok(script, *TINY, *SAVE_AND_EVALUATE, log_dir=log_dir),
                        run_ok(script, *TINY, "--sync-timing", "--profile", log_dir=log_dir))
    return runs


@pytest.mark.parametrize("script", SCRIPTS)
def test_tiny_run_writes_the_contract(script, tiny_runs):
    run_dir, _ = tiny_runs[script]
    env_id, variant, model, seed, stamp = run_dir.name.split("__")
    assert (env_id, model, seed) == ("CartPole-v1", "small", "s1") and stamp.isdigit()

    info = read_json(run_dir / "run.json")
    assert info["variant"] == variant and info["args"]["num_envs"] == 4  # what ran: analyze.py reads it here
    assert (info["args"]["env_id"], info["args"]["seed"], info["args"]["num_iterations"]) == ("CartPole-v1", 1, 10)
    assert info["args"]["learning_rate"] == ACTION_SPACE_DEFAULTS[False]["learning_rate"]  # what ran, not None
    # full float32 matmuls, as each framework in the process reports it back
    assert info["matmul_precision"] == {fw: FLOAT32[fw] for fw in frameworks(script)}
    if script in GYMNASIUM_SCRIPTS:  # the CPU twin, and how it is vectorized
        assert info["env"] == {"id": "CartPole-v1", "vectorization": "sync", "autoreset": "SameStep"}  # as the env reports it
    assert {"python", "jax", "jaxlib", "flax", "optax", "equinox", "gymnax", "torch"} <= set(info["versions"])
    assert info["device"] and info["cpu"]
    # the machine as the run found it (SPEC: what a timing depends on besides the code)
    assert info["cores"] == os.cpu_count() and info["affinity"] == sorted(os.sched_getaffinity(0))
    assert set(info["cpu_flags"]) <= {"avx2", "avx512f", "amx_tile"} and len(info["load_average"]) == 3
    assert info["session"] == os.environ.get("BENCHBACK_SESSION")  # bench.sh sets it; here, none
    threads = {"XLA_FLAGS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY"}
    if "torch" in frameworks(script):
        threads |= {"torch_intra_op", "torch_inter_op", "torch_backend", "torch_cpu_capability"}
    assert set(info["threads"]) == threads
    if "torch" in frameworks(script):
        assert info["threads"]["torch_intra_op"] >= 1 and info["threads"]["torch_backend"]

    summary = read_json(run_dir / "summary.json")
    assert set(summary) == summary_keys(script) == set(read_json(tiny_runs[script][1] / "summary.json"))
    assert summary["time/total"] > 0
    assert summary["charts/episodic_return_final"] > 0

    logged = scalars(run_dir)
    # what analyze.py reads instead of summary.json: start-up (imports, set-up) from iteration 0's event
    (_, first), first_wall = logged["time/iteration"][0], wall_times(run_dir)[0]
    assert 0 < first_wall - first - info["start_time"] < summary["time/total"]
    assert TAGS <= set(logged) and not SYNC_TAGS & set(logged), set(logged) ^ TAGS
    steps = [step for step, _ in logged["time/iteration"]]
    batch, iterations = TINY_ARGS["num_envs"] * TINY_ARGS["num_steps"], TINY_ARGS["num_iterations"]
    assert steps == [batch * (i + 1) for i in range(iterations)]  # step = global env steps
    # the rate of each iteration's last optimizer step, read from the optimizer: linear decay to 0
    per_iteration = TINY_ARGS["update_epochs"] * TINY_ARGS["num_minibatches"]
    schedule = [ACTION_SPACE_DEFAULTS[False]["learning_rate"] * (1 - ((i + 1) * per_iteration - 1) / (iterations * per_iteration))
                for i in range(iterations)]
    assert [value for _, value in logged["charts/learning_rate"]] == pytest.approx(schedule, rel=1e-5)
    assert all(math.isfinite(v) for tag in TAGS for _, v in logged[tag])


@pytest.mark.parametrize("script", SCRIPTS)
def test_same_seed_same_metrics(script, tiny_runs):
    first, second = (scalars(run_dir) for run_dir in tiny_runs[script])
    for tag in DETERMINISTIC_TAGS:
        assert first[tag] == second[tag], f"{tag} differs between two runs with seed 1 (the second with --sync-timing)"


@pytest.mark.parametrize("script", SCRIPTS)
def test_profile_traces_the_named_regions(script, tiny_runs):
    """--profile (the second tiny run): two iterations traced, each named region in the trace (a range on the
    host) or in the compiled programs' metadata beside it (jax.named_scope); Python's side as a cProfile file.
    The first run, without --profile, wrote neither."""
    plain, profiled = tiny_runs[script]
    check_profiled(profiled, script, REGIONS, once_per_iteration=("rollout", "update"))
    assert not {"plugins", "trace.json.gz", "python.prof"} & {p.name for p in plain.iterdir()}
    # what analyze.py reads of it: one iteration, its calls into the framework, the time in its ops within it
    p = profiles.measure(profiled)
    jax = "torch" not in script  # a JAX script: its programs run XLA ops (torch.profiler sees no XLA op)
    assert (p["xla_ops"] > 0) == jax and p["dispatched"] > 0 and 0 < p["compiled_ms"] <= p["iteration_ms"]
    assert p["python_calls"] > 0
    assert len(p["spans"]["rollout"]) == len(p["spans"]["update"]) == 1


def test_analyze_reads_the_traces_into_its_table(tiny_runs, tmp_path):
    """bench.sh's profile preset, in small: two profiled runs packed (their traces cut to an iteration) and
    read back into the table and the chart, side by side."""
    import shutil
    import tarfile


    for script in ("ppo_linen.py", "ppo_torch.py"):
        shutil.copytree(tiny_runs[script][1], tmp_path / "profile" / "r1" / tiny_runs[script][1].name)
    assert analyze("archive", tmp_path / "profile", "--out", tmp_path / "p.tar.xz").returncode == 0
    with tarfile.open(tmp_path / "p.tar.xz") as tar:
        packed = {name.rsplit("/", 1)[-1] for name in tar.getnames()}
    assert {"trace.json", "python.prof"} <= packed and not {"trace.json.gz", "perfetto_trace.json.gz"} & packed
    proc = analyze(tmp_path / "p.tar.xz", "--out", tmp_path / "out")
    assert proc.returncode == 0, proc.stderr
    report = (tmp_path / "out" / "REPORT.md").read_text()
    table = [line for line in report.splitlines() if line.startswith("| CartPole-v1 | small |")]
    assert [line.split(" | ")[2] for line in table] == ["Flax Linen", "PyTorch, eager"]
    assert "(and 2 runs traced by --profile)" in report and (tmp_path / "out" / "profile_timeline.png").exists()


@pytest.mark.parametrize("script", SCRIPTS)
def test_sync_timing_writes_the_phases(script, tiny_runs):
    """(tests/test_guards.py proves the phases hold their work.)"""
    logged = scalars(tiny_runs[script][1])
    assert SYNC_TAGS <= set(logged) and all(v > 0 for tag in SYNC_TAGS for _, v in logged[tag])


@pytest.mark.parametrize("script", ONE_AGENT_SCRIPTS)  # every agent's: tests/test_agents.py
def test_save_then_load_and_evaluate_from_the_command_line(script, tiny_runs, tmp_path):
    trained, _ = tiny_runs[script]
    summary = read_json(trained / "summary.json")
    assert (trained / summary["saved_model"]).exists()
    assert len(summary["eval/episodic_returns"]) == 3
    loaded = run_ok(script, *TINY, "--num-iterations", "0", "--load-model", str(trained / summary["saved_model"]),
                    "--eval-episodes", "3", log_dir=tmp_path / "eval")
    again = read_json(loaded / "summary.json")
    # the same greedy policy on the same fresh envs: the same returns, only if the weights came back
    assert again["eval/episodic_returns"] == summary["eval/episodic_returns"]
    assert again["eval/episodic_return"] == pytest.approx(np.mean(summary["eval/episodic_returns"]))
    assert again["saved_model"] is None
    logged = scalars(loaded)
    assert "time/iteration" not in logged  # no iteration ran
    assert [value for _, value in logged["eval/episodic_return"]] == again["eval/episodic_returns"]


@pytest.mark.parametrize("script", ONE_AGENT_SCRIPTS)
def test_cnn_runs_on_images(script, tmp_path, monkeypatch):
    """--model cnn as a user runs it (its command line, through main() in this process), on MinAtar's images:
    it trains, writes the contract's tags, saves the CNN and evaluates it (the numbers: test_equivalence.py)."""
    args = ("--env-id", "Breakout-MinAtar", "--model", "cnn", *TINY)
    trained = ran_in_process(script, *args, "--save-model", "--eval-episodes", "2", log_dir=tmp_path / "train",
                             monkeypatch=monkeypatch)
    assert read_json(trained / "run.json")["args"]["model"] == "cnn" and TAGS <= set(scalars(trained))
    summary = read_json(trained / "summary.json")
    assert (trained / summary["saved_model"]).exists() and len(summary["eval/episodic_returns"]) == 2


@pytest.mark.parametrize("script", GYMNASIUM_SCRIPTS)
def test_cnn_runs_on_atari(script, tmp_path, monkeypatch):
    """--model cnn on Atari frames through EnvPool, as the README runs it (at a tiny batch, through main() in
    this process): the Nature CNN trains, saves and plays whole games greedily."""
    args = ("--env-id", "Breakout-v5", "--vectorization", "envpool", "--model", "cnn", "--num-envs", "2",
            "--num-steps", "128", "--num-minibatches", "2", "--update-epochs", "1", "--num-iterations", "2")  # games end
    trained = ran_in_process(script, *args, "--save-model", "--eval-episodes", "1", log_dir=tmp_path / "train",
                             monkeypatch=monkeypatch)
    info, summary = read_json(trained / "run.json"), read_json(trained / "summary.json")
    assert info["env"] == {"id": "Breakout-v5", "vectorization": "envpool", "autoreset": "NextStep"}
    assert TAGS <= set(scalars(trained)) and (trained / summary["saved_model"]).exists()
    assert len(summary["eval/episodic_returns"]) == 1


FLOAT32 = {"jax": "float32", "torch": "highest"}  # full float32 matmuls, in each framework's words
BAD_INPUTS = {
    "unknown env": (["--env-id", "NoSuchEnv-v0"], ["NoSuchEnv-v0", "CartPole-v1"]),
    "negative learning rate": (["--learning-rate", "-1"], ["learning_rate", "> 0", "-1"]),
    "log dir is a file": (["--log-dir", "README.md"], ["--log-dir", "README.md", "Not a directory"]),
    "non-Box observations": (["--env-id", "FrozenLake-misc"], ["FrozenLake-misc", "Box", "CartPole-v1"]),
    "needs a download": (["--env-id", "MNISTBandit-bsuite"], ["MNISTBandit-bsuite", "download"]),
    "no CPU twin": (["--env-id", "DeepSea-bsuite"], ["DeepSea-bsuite", "is not a Gymnasium env", "Breakout-MinAtar",
                                                    "the script without _gymnasium"]),
    "Craftax pixels": (["--env-id", "Craftax-Pixels-v1"], ["Craftax-Pixels-v1", "Craftax-Classic-Symbolic-v1",
                                                          "Craftax-Symbolic-v1", "pixel"]),
    "bad model": (["--model", "huge"], ["huge", "small", "medium", "large", "cnn"]),
    "CNN on flat observations": (["--model", "cnn"], ["--model cnn", "image", "CartPole-v1", "(4,)"]),
    "minibatches do not divide": (["--num-minibatches", "7"], ["num_minibatches", "7", "8192"]),
    "non-positive size": (["--num-envs", "0"], ["num_envs", "positive"]),
    "no torch twin": (["--torch-env", "--env-id", "Breakout-MinAtar"], ["--torch-env", "Breakout-MinAtar", "CartPole-v1",
                                                                       "Pendulum-v1"]),
    "torch env without jit": (["--torch-env", "--no-jit-env"], ["--no-jit-env", "--torch-env"]),
    "too few iterations to profile": (["--profile", "--num-iterations", "3"],
                                      ["--profile", "num_iterations", "4", "3"]),
}


def bad_input(script: str, case: str) -> tuple[list[str], list[str]]:
    """The arguments of a bad-input case and the words its error must say, for this script."""
    args, words = BAD_INPUTS[case]
    if args[0] == "--torch-env" and not hasattr(load(script).RunArgs, "torch_env"):
        pytest.skip("a script without the envs in torch")
    if case == "CNN on flat observations" and script in AGENT_SCRIPTS:  # refused whatever the env
        words = ["--model cnn", "agent scripts", script.replace("_agents", "")]
    if args[0] == "--env-id":  # the Gymnasium scripts refuse every id without a CPU twin alike
        if script not in GYMNASIUM_SCRIPTS and case == "no CPU twin":
            pytest.skip("a Gymnax env the Gymnax scripts run")
        if script in GYMNASIUM_SCRIPTS:
            words = [args[1], *BAD_INPUTS["no CPU twin"][1][1:]]
    return args, words


def check_refusal(code, stderr: str, words: list[str], log_dir):
    assert code == 2, stderr[-2000:]
    for word in words:
        assert word in stderr, f"{word!r} not in: {stderr[-2000:]}"
    assert "Traceback" not in stderr
    assert not log_dir.exists() or not any(log_dir.iterdir()), "a bad run left files behind"


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("case", BAD_INPUTS)
def test_bad_input(script, case, tmp_path, monkeypatch, capsys):
    """Each case through the script's own main(), in this process (a subprocess per case would
    cost the suite minutes; test_bad_input_in_a_fresh_process runs one case as a user does)."""
    args, words = bad_input(script, case)
    log_dir = tmp_path / "runs"
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr("sys.argv", [script, "--log-dir", str(log_dir), *args])  # a later --log-dir wins
    with pytest.raises(SystemExit) as exit_info:
        load(script).main()
    check_refusal(exit_info.value.code, capsys.readouterr().err, words, log_dir)


def imports(script: str) -> frozenset[str]:
    return frozenset(line for line in (ROOT / script).read_text().splitlines() if line.startswith(("import ", "from ")))


# a fresh process adds to test_bad_input what the script's imports print at start-up: one script per set of imports
FIRST_OF_EACH_IMPORTS = sorted({imports(s): s for s in reversed(SCRIPTS)}.values())


@pytest.mark.parametrize("script", FIRST_OF_EACH_IMPORTS)
def test_bad_input_in_a_fresh_process(script, tmp_path):
    args, words = bad_input(script, "unknown env")
    log_dir = tmp_path / "runs"
    proc = run(script, *args, log_dir=log_dir)
    check_refusal(proc.returncode, proc.stderr, words, log_dir)


# every numeric argument's range: (bad values, edge values that are fine)
RANGES = {
    "learning_rate": ([-1.0, 0.0, math.nan, math.inf], [1e-9]),
    "gamma": ([2.0, -0.1, math.nan], [0.0, 1.0]),
    "gae_lambda": ([1.5, -1.0], [0.0, 1.0]),
    "clip_coef": ([0.0, -0.2], [1e-3]),
    "max_grad_norm": ([0.0, -1.0], [1e-3]),
    "adam_eps": ([0.0, -1e-8], [1e-12]),
    "adam_betas": ([(0.9, 1.0), (-0.1, 0.999), (1.0, 0.5)], [(0.0, 0.0), (0.99, 0.9999)]),
    "ent_coef": ([-0.01], [0.0]),
    "vf_coef": ([-0.5], [0.0]),
    "num_envs": ([0, -4], [1]),
    "num_iterations": ([-1], [0, 1]),
    "eval_episodes": ([-1], [0, 3]),
    "seed": ([-1, 2**31, 2**40], [0, 2**31 - 1]),  # JAX's jitted key takes an int32; Gymnasium no negatives
}


@pytest.mark.parametrize("script", SCRIPTS)
def test_numeric_arguments_range_checked(script, capsys):
    """Each bad value: one line naming the argument, exit 2 (before anything is written: main()
    checks them first); values at the edges of each range pass."""
    m = load(script)
    base = m.RunArgs()
    if hasattr(base, "num_agents"):  # seed's top edge is the last agent's seed (test_agents checks the sum)
        base = dataclasses.replace(base, num_agents=1)
    for name, (bad, fine) in RANGES.items():
        for value in bad:
            with pytest.raises(SystemExit) as exit_info:
                m.check_args(dataclasses.replace(base, **{name: value}))
            err = capsys.readouterr().err
            assert exit_info.value.code == 2 and err.startswith(f"error: {name} must be") and err.count("\n") == 1, \
                (name, value, err)
        for value in fine:
            m.check_args(dataclasses.replace(base, **{name: value}))


@pytest.mark.parametrize("script", SCRIPTS)
def test_unwritable_log_dir(script, tmp_path, capsys):
    """A --log-dir we may not write gets the same one-line error, not a traceback."""
    m = load(script)
    read_only = tmp_path / "read-only"
    read_only.mkdir(mode=0o555)
    place = str(read_only / "runs")
    if os.access(read_only, os.W_OK):  # root writes anywhere, but sysfs refuses even root
        place = "/sys/benchback-test-runs"
        try:
            os.mkdir(place)
        except OSError:
            pass
        else:
            os.rmdir(place)
            pytest.skip("found no place this user may not write")
    args = dataclasses.replace(m.RunArgs(), log_dir=str(place))
    env_info = {"env": {}} if script in GYMNASIUM_SCRIPTS else {}  # their run.json also says which env ran
    with pytest.raises(SystemExit) as exit_info:
        m.make_run_dir(args, "test", "cpu", {}, **env_info)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.startswith("error: cannot create a run directory in --log-dir"), err
    assert not os.path.exists(place)


@pytest.mark.parametrize("script", SCRIPTS)
def test_matmul_precision_set_alike(script):
    """--matmul-precision sets every framework in the process alike, read back from each; in torch, cuDNN's
    convolutions too (JAX's setting covers its convolutions, torch's matmul setting does not)."""
    m = load(script)
    tf32 = {"jax": "tensorfloat32", "torch": "high"}
    try:
        for precision, names in (("tf32", tf32), ("float32", FLOAT32)):
            assert m.set_matmul_precision(precision) == {fw: names[fw] for fw in frameworks(script)}
            if "torch" in frameworks(script):
                assert m.torch.backends.cudnn.allow_tf32 == (precision == "tf32")
    finally:
        m.set_matmul_precision("float32")


@pytest.mark.parametrize("script", ["ppo_torch.py", "ppo_torch_compile.py", "ppo_torch_agents.py"])
def test_a_gpu_left_unused_is_said(script, tmp_path, monkeypatch, capsys):
    """The torch scripts follow JAX's device (DLPack hands arrays over on one device): where torch sees a GPU
    but JAX runs on the CPU (a CPU-only jaxlib on a GPU machine), the run says so at start-up, and only then."""
    module = load(script, fresh=True)

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop  # what is under test is said before training starts

    monkeypatch.setattr(module, "train", stop)
    monkeypatch.setattr("sys.argv", [script, *TINY, "--log-dir", str(tmp_path)])
    warning = "warning: torch sees a GPU, but JAX runs on the CPU"
    for gpu in (False, True):
        monkeypatch.setattr(module.torch.cuda, "is_available", lambda: gpu)
        with pytest.raises(Stop):
            module.main()
        assert (warning in capsys.readouterr().err) == gpu


def test_the_end_line_says_whether_the_study_target_was_reached(tmp_path):
    """A run ends by comparing its final return with the study's target for its algorithm, env and model
    (results/targets.json, which analyze.py writes): the harness's function, reading the committed file,
    saying so where the file has no target (tests/test_progress.py: a run of each algorithm)."""
    target = read_json(ROOT / "results" / "targets.json")["ppo"]["CartPole-v1"]["small"]
    against_target = load("ppo_linen.py").against_target
    assert against_target("CartPole-v1", "small", target["target"]).endswith(f"{target['target']:g}: reached: it learned")
    assert against_target("CartPole-v1", "small", target["target"] - 1).endswith(": not reached")
    assert against_target("CartPole-v1", "small", None).endswith(": not reached")  # no episode ended
    assert against_target("CartPole-v1", "large", 0.0) == (
        "; the study has no target for PPO on CartPole-v1 with the large model to judge it by")
    proc = run("ppo_linen.py", *TINY, log_dir=tmp_path)
    last = proc.stdout.strip().splitlines()[-1]
    assert (f"the study's target for CartPole-v1, small model ({target['share']:.0%} of the way to its best final "
            f"return in {target['steps']:,} env steps)") in last, last
    assert last.endswith(f"{target['target']:g}: not reached"), last  # 10 tiny iterations learn little
