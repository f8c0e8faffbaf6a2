"""The shape every script keeps (SPEC section 2): the algorithm first, then one marked section, the harness,
from the line `# %% harness` to the end of the file. The harness is one text in all 33 scripts (JAX and
torch alike), so that a diff of two scripts shows only the algorithm and the framework; nothing it defines is
defined again above it, and no run flag is an Args field above it. No script runs here: these read the files."""

import ast

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
    assert len(ALL) == 33 and len(FAMILIES["jax"]) == 19 and len(FAMILIES["torch"]) == 14


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
