"""results/ and the docs are what the raw data say: analyze.py, run on the committed archive,
writes REPORT.md again line for line, and every generated block of README.md and docs/ again
exactly, so a figure edited by hand, or one left stale by a new study, fails here."""

import shutil

import pytest
from analysis import docs
from helpers import ROOT, analyze

ARCHIVE = "results/study.tar.xz"  # as the docs' command names it, relative to the project root
# the CPU study's, the GPU's, the traces, the tuning sweep's, each further host type's (bench.sh hosts)
ARCHIVES = [ARCHIVE, "results/gpu/runs.tar.xz", "results/profiles.tar.xz", "results/tunesweep.tar.xz",
            "results/hosts.tar.xz"]
DOCS = ["README.md", "docs"]
REGENERATE = f"python analyze.py {' '.join(ARCHIVES)} --out results --docs {' '.join(DOCS)}"
pytestmark = pytest.mark.skipif(not (ROOT / ARCHIVE).exists(), reason=f"{ARCHIVE} is not committed yet")


@pytest.fixture(scope="module")
def regenerated(tmp_path_factory):
    """The report and the docs as the committed archive gives them, in a scratch folder."""
    out = tmp_path_factory.mktemp("regenerated")
    # the env-complexity cache is a result too: the report reads it, never re-measures
    for result in ("envtime.json", "conv.json"):  # and the convolution benchmark's sessions
        shutil.copy(ROOT / "results" / result, out / result)
    shutil.copy(ROOT / "README.md", out / "README.md")
    shutil.copytree(ROOT / "docs", out / "docs")
    proc = analyze(*ARCHIVES, "--out", out, "--docs", out / "README.md", out / "docs")
    assert proc.returncode == 0, proc.stderr
    return out


def test_report_regenerates_from_committed_data(regenerated):
    committed = (ROOT / "results" / "REPORT.md").read_text().splitlines()
    fresh = (regenerated / "REPORT.md").read_text().splitlines()
    changed = [(i + 1, a, b) for i, (a, b) in enumerate(zip(committed, fresh)) if a != b]
    assert not changed and len(committed) == len(fresh), (
        f"results/REPORT.md differs from what {' and '.join(ARCHIVES)} give, first at line {changed[:1]}: run `{REGENERATE}`")
    for chart in (line.split("](")[1][:-1] for line in fresh if line.startswith("![")):
        assert (ROOT / "results" / chart).exists(), f"REPORT.md shows {chart}, which results/ lacks"


def test_every_generated_block_regenerates(regenerated):
    pages = docs.markdown_files([ROOT / d for d in DOCS])
    assert docs.blocks_in((ROOT / "README.md").read_text()), "README.md shows no generated block"
    for page in pages:
        name = page.relative_to(ROOT)
        committed = docs.blocks_in(page.read_text(), str(name))
        fresh = docs.blocks_in((regenerated / name).read_text(), str(name))
        stale = [block for block, body in committed.items() if fresh[block] != body]
        assert not stale, (f"{name}: generated block {', '.join(stale)} is not what {' and '.join(ARCHIVES)} give "
                           f"(edited by hand, or stale): run `{REGENERATE}`")


def test_the_targets_a_run_compares_with_regenerate(regenerated):
    """results/targets.json, which every script's end line reads, is what the committed archive gives."""
    assert (ROOT / "results" / "targets.json").read_text() == (regenerated / "targets.json").read_text(), (
        f"results/targets.json is not what {' and '.join(ARCHIVES)} give: run `{REGENERATE}`")


def test_the_scripts_defaults_are_the_fastest_measured(regenerated):
    """What docs/results.md's tuning found fastest is what the scripts run when nothing is set:
    torch_compile's scope, and XLA's threading (the JAX scripts and the torch scripts that host it)."""
    import torch
    from helpers import GYMNAX_SCRIPTS, load

    table = docs.blocks_in((regenerated / "docs" / "results.md").read_text())["tuning-defaults"]
    fastest = {cells[0]: cells[2] for cells in (
        [c.strip() for c in line.strip("|").split("|")] for line in table.splitlines() if line.startswith("|"))}
    compiled = load("ppo_torch_compile.py")
    scope = compiled.resolved(compiled.RunArgs(), torch.device("cpu")).compile_scope
    assert fastest["torch_compile"] == f"torch_compile-{scope} (xla-n)", (
        f"ppo_torch_compile.py compiles {scope} on a CPU; the tuning found {fastest['torch_compile']} fastest")
    single_thread = "--xla_cpu_multi_thread_eigen=false"
    for framework, scripts in (("linen", [s for s in GYMNAX_SCRIPTS if "torch" not in s]),
                               ("torch", [s for s in GYMNAX_SCRIPTS if "torch" in s])):
        wanted = fastest[framework].endswith("(xla-1)")
        for script in scripts:
            assert (single_thread in (ROOT / script).read_text()) == wanted, (
                f"{script} {'does not set' if wanted else 'sets'} {single_thread}, "
                f"but the tuning found {fastest[framework]} fastest")
