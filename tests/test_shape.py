"""The shape every script keeps (SPEC section 2): the algorithm first, then one marked section, the harness,
from the line `# %% harness` to the end of the file. The harness is one text in all 33 scripts (JAX and
torch alike), so that a diff of two scripts shows only the algorithm and the framework; nothing it defines is
defined again above it, and no run flag is an Args field above it. No script runs here: these read the files."""

import ast
import collections
import difflib

import pytest
from helpers import DQN_SCRIPTS, ROOT, SAC_SCRIPTS, SCRIPTS

ALL = sorted(SCRIPTS + DQN_SCRIPTS + sorted(p.name for p in ROOT.glob("td3_*.py")) + SAC_SCRIPTS)
FAMILIES = {"torch": [s for s in ALL if "torch" in s], "jax": [s for s in ALL if "torch" not in s]}
MARKER = "# %% harness\n"
LAST = 'if __name__ == "__main__":\n    signal.signal(signal.SIGTERM, stop_on)  # a scheduler\'s time limit: the run says where it stopped\n    main()\n'


def parts(script: str) -> tuple[str, str]:
    """(the reading part, the harness) of a script."""
    text = (ROOT / script).read_text()
    assert text.count(MARKER) == 1, f"{script}: {text.count(MARKER)} lines '# %% harness', one expected"
    reading, harness = text.split(MARKER)
    return reading, MARKER + harness


def defined(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def test_the_families_hold_every_script():
    assert len(ALL) == 36 and len(FAMILIES["jax"]) == 19 and len(FAMILIES["torch"]) == 17


@pytest.mark.parametrize("script", ALL)
def test_one_harness_section_last(script):
    """One marker; the harness ends the file with the call of main(), and defines nothing the reading part does."""
    reading, harness = parts(script)
    assert harness.endswith("\n\n\n" + LAST) and LAST not in reading
    assert not defined(reading) & defined(harness), f"{script}: defined twice: {defined(reading) & defined(harness)}"


def test_the_harness_is_one_text():
    first, *rest = ALL
    for script in rest:
        assert parts(script)[1] == parts(first)[1], f"{script}'s harness differs from {first}'s"


def fields(source: str, name: str) -> set[str]:
    """The fields of the dataclass `name` defined in source."""
    (cls,) = [node for node in ast.parse(source).body if isinstance(node, ast.ClassDef) and node.name == name]
    return {node.target.id for node in cls.body if isinstance(node, ast.AnnAssign)}


@pytest.mark.parametrize("script", ALL)
def test_the_run_flags_are_the_harness_s(script):
    """The benchmark's flags are RunArgs' (the harness's), not the algorithm's Args: its plain copy has none."""
    reading, harness = parts(script)
    run_flags = fields(harness, "RunArgs")
    assert len(run_flags) == 8 and not fields(reading, "Args") & run_flags, fields(reading, "Args") & run_flags


# each compiled CPU-env twin: (its eager twin, the eager Gymnax script, the compiled Gymnax script)
COMPILED_CPU_TWINS = {f"{a}_torch_compile_gymnasium.py": (f"{a}_torch_gymnasium.py", f"{a}_torch.py",
                                                          f"{a}_torch_compile.py") for a in ("dqn", "td3", "sac")}


def changes(before: str, after: str, algo: str) -> collections.Counter:
    """The lines a script's reading part removes (-) and adds (+) from another's, past the module docstring, each
    script's name made its Gymnax sibling's."""
    body = lambda script: parts(script)[0].split('"""\n\n# %% imports\n', 1)[1].replace(
        f"{algo}_torch_compile_gymnasium.py", f"{algo}_torch_compile.py").replace(
        f"{algo}_torch_gymnasium.py", f"{algo}_torch.py").splitlines()
    diff = difflib.ndiff(body(before), body(after))
    return collections.Counter(line for line in diff if line[:2] in ("- ", "+ ") and line[2:].strip())


@pytest.mark.parametrize("twin", sorted(COMPILED_CPU_TWINS))
def test_a_compiled_cpu_env_twin_is_its_eager_twin_with_the_compiled_scripts_changes(twin):
    """What compiling changes in a CPU-env twin is what it changes in the Gymnax script, line for line (but the
    variant's name and the progress bar's first label): the same compiled functions, TwinCritics, Adam and
    CUDA-graph steps, so the reference tests that hold the compiled Gymnax script hold these, and `diff` of the
    eager and the compiled twin reads as that of the Gymnax pair (less the torch env's lines). Planted: the
    twin's critics left unbatched, and a compiled-only change missing from the Gymnax script."""
    eager_twin, eager, compiled = COMPILED_CPU_TWINS[twin]
    algo = twin.split("_")[0]
    own = lambda line: f'"{algo}_torch_compile_gymnasium"' in line or f'"{algo}_torch_gymnasium"' in line or (
        "progress.add_task(" in line or line[2:].strip() == "total=num_iterations)")
    twin_changes = collections.Counter({k: n for k, n in changes(eager_twin, twin, algo).items() if not own(k)})
    extra = twin_changes - changes(eager, compiled, algo)
    assert not extra, f"{twin} changes {eager_twin} beyond what {compiled} changes in {eager}: {sorted(extra)}"
    # the compiled Gymnax script's own: its env's compiled step, its name and first label, and its action kept past
    # a CUDA graph's next replay (the twin's is copied to the host)
    gymnax_own = ("torch_env", "-torchenv", "env_step_fn", "compiled_step", "keep = partial", "action = act(",
                  'first = "iteration 0"', f'return "{algo}_torch_compile"', "the env's step compiled too")
    missing = {k for k in changes(eager, compiled, algo) if not any(w in k for w in gymnax_own)} - set(twin_changes)
    assert not missing, f"{twin} misses {compiled}'s changes: {sorted(missing)}"
