"""The files run slowest first: under the README's `-n 2 --dist loadfile` a worker takes the next
file when it is nearly done with one, so the long files are shared out first and the short ones even
out the end (longest processing time first). SLOWEST is their order, by their worker-seconds in a
JUnit run of the whole suite; files not in it run after them. xdist's loadfile scheduler keeps the
collection's order of files instead of ordering them by their number of tests (its loadscopereorder,
on by default, turned off here). The learning runs, the slowest tests, are in two files so that the
two workers share them.

One persistent JAX compilation cache for the session, shared by both workers and every script
the tests start: the tests run the same tiny programs many times, in fresh processes and fresh
module copies, and each would otherwise compile them again. (test_compilation counts JAX's
backend-compile events, which a program loaded from the cache records too.)

OpenMP's threads sleep when idle (OMP_WAIT_POLICY=PASSIVE), unless the caller chose otherwise:
two workers share two cores, and torch's spinning threads then take the cores from each other
and from XLA's. On this 2-core VM, 30 iterations of ppo_torch.py and of ppo_torch_gymnasium.py
side by side took 2-3 min each with spinning threads and under 30 s with sleeping ones. Only the tests' speed depends on it:
no test times anything, and the benchmark (bench.sh) leaves the policy to its tuning preset.

Every Python process the tests start loads tests/lazy_imports/sitecustomize.py (the folder is put on
PYTHONPATH, inherited by the workers and the scripts they run): the seaborn that gymnax's Pong renderer
imports loads on first use, which no test makes, instead of at import (its docstring says what that saves)."""

import os
import shutil
import tempfile

SLOWEST = ("test_contract.py", "test_sac.py", "test_saving.py", "test_compilation.py", "test_evaluation.py",
           "test_equivalence.py", "test_agents.py", "test_dqn.py", "test_td3.py", "test_learning.py",
           "test_draws.py", "test_vectorization.py", "test_guards.py", "test_shared_paths.py", "test_bench.py",
           "test_rollout.py", "test_results.py",
           "test_analyze.py", "test_tune.py", "test_learning_more.py")
CACHE = "JAX_COMPILATION_CACHE_DIR"
LAZY_IMPORTS = os.path.join(os.path.dirname(__file__), "lazy_imports")


def pytest_configure(config):
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")  # before torch starts its thread pool: inherited by all
    # one worker process compiles the scripts' torch functions for many tests, shapes and module copies;
    # past dynamo's recompile limit (8 per function) it would fall back to eager, where the capturable
    # Adam of a compiled update cannot run on a CPU: a test would then fail by the order tests ran in
    import torch._dynamo

    torch._dynamo.config.recompile_limit = 64
    if hasattr(config.option, "loadscopereorder"):  # xdist is installed (the README's command uses it)
        config.option.loadscopereorder = False
    if LAZY_IMPORTS not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [LAZY_IMPORTS, os.environ.get("PYTHONPATH")]))
    if CACHE not in os.environ:  # set once, by the process that starts the workers: they inherit it
        os.environ[CACHE] = tempfile.mkdtemp(prefix="benchback-jax-cache-")
        os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
        config.made_cache = os.environ[CACHE]


def pytest_unconfigure(config):
    if made := getattr(config, "made_cache", None):
        shutil.rmtree(made, ignore_errors=True)
        del os.environ[CACHE]


def pytest_collection_modifyitems(items):
    order = {name: i for i, name in enumerate(SLOWEST)}  # a stable sort: a file's tests keep their order
    items.sort(key=lambda item: order.get(item.path.name, len(SLOWEST)))
