"""results/ is what its raw data say: analyze.py, run on the committed archive, writes REPORT.md
again, table for table."""

import shutil

import pytest
from helpers import ROOT
from test_analyze import analyze

ARCHIVE = "results/study.tar.xz"  # as README's command names it, relative to the project root


@pytest.mark.skipif(not (ROOT / ARCHIVE).exists(), reason=f"{ARCHIVE} is not committed yet")
def test_report_regenerates_from_committed_data(tmp_path):
    # the env-complexity and env-alone caches are results too: the report reads them, never re-measures
    for cache in ("envtime.json", "envscale.json"):
        if (ROOT / "results" / cache).exists():
            shutil.copy(ROOT / "results" / cache, tmp_path / cache)
    proc = analyze(ARCHIVE, "--out", tmp_path)
    assert proc.returncode == 0, proc.stderr
    committed = (ROOT / "results" / "REPORT.md").read_text().splitlines()
    regenerated = (tmp_path / "REPORT.md").read_text().splitlines()
    changed = [(i + 1, a, b) for i, (a, b) in enumerate(zip(committed, regenerated)) if a != b]
    assert not changed and len(committed) == len(regenerated), (
        f"results/REPORT.md differs from what {ARCHIVE} gives, first at line {changed[:1]}")
    for chart in (line.split("](")[1][:-1] for line in regenerated if line.startswith("![")):
        assert (ROOT / "results" / chart).exists(), f"REPORT.md shows {chart}, which results/ lacks"
