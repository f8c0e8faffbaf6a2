"""README.md and docs/ keep their promises: links resolve, the README answers first and stays
short, no measured figure stands outside a generated block, no comparison in prose lacks a claim
analyze.py computed and found true, and the tables that describe the project (tests, variants,
presets) list all of it."""

import dataclasses
import itertools
import re
import typing

import pytest
from analysis import docs
from helpers import ROOT, SCRIPTS, load
from test_bench import fake_cleanrl, planned

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FIGURE = re.compile(r"\b\d+(?:\.\d+)?(?:x|×| s\b| ms\b| µs\b|%)")  # a measured figure: a ratio, a time, a share
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """What is written by hand: the text without its generated blocks and fenced code."""
    text = docs.BLOCK.sub("", text)
    return re.sub(r"```.*?```", "", text, flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page) -> set[str]:
    return {slug(line.lstrip("#")) for line in page.read_text().splitlines() if line.startswith("#")}


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists() and ROOT in resolved.parents, f"{page.name}: link to {target} leads nowhere"
        if anchor:
            assert anchor in anchors(resolved), f"{page.name}: link to {target}: no such heading"


def test_readme_answers_first_and_stays_short():
    lines = (ROOT / "README.md").read_text().splitlines()
    words = len(" ".join(line for line in lines if not line.startswith("|")).split())  # tables are generated
    assert words <= 1600, f"README.md has {words} words: a newcomer's README has about 1,500"
    first_screen, text = "\n".join(lines[:60]), "\n".join(lines)
    for block in ("answer", "decision"):
        assert f"<!-- BEGIN analyze.py {block} -->" in first_screen, f"README's {block} block is not in the first 60 lines"
    assert text.index("analyze.py answer") < text.index("analyze.py decision") < text.index("analyze.py headline"), (
        "README opens with the answer, then the decision table, then the rest")
    assert "<!-- BEGIN analyze.py gpu-headline -->" in first_screen and "have not run on a GPU" in first_screen, (
        "the caveat (what ran on a GPU, and what has not) is not in the first 60 lines")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_measured_figure_outside_generated_blocks(page):
    hits = FIGURE.findall(prose(page.read_text()))
    assert not hits, f"{page.name}: figures typed by hand outside the generated blocks: {hits[:5]}"


CLAIMS = docs.claims_of((ROOT / "docs" / "results.md").read_text())  # the claims block analyze.py writes


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_comparison_in_prose_has_a_claim_that_holds(page):
    assert CLAIMS, "docs/results.md has no claims block: run analyze.py with --docs"
    problems = docs.unclaimed(page.read_text(), CLAIMS)
    assert not problems, f"{page.name}: " + "\n".join(problems[:5])


CLAIMED = {"gap-narrows": (True, ("narrow",)), "gap-wider": (False, ("wider",))}


@pytest.mark.parametrize("text, wrong", [
    ("The gap narrows as the model grows.", "'narrows' with no claim"),
    ("The gap narrows as the model grows. <!-- claim: gap-narrows -->", None),
    ("The gap narrows <!-- claim: gap-narrows -->, and torch is faster.", "'faster' with no claim"),
    ("On a GPU the gap is wider. <!-- claim: gap-wider -->", "does not hold"),
    ("The gap narrows. <!-- claim: gap-shrinks -->", "unknown claim 'gap-shrinks'"),
    ("- The gap narrows. <!-- claim: gap-narrows -->\n- Linen is faster.", "'faster' with no claim"),
    ("<!-- BEGIN analyze.py x -->\nLinen is faster.\n<!-- END analyze.py x -->", None),
    ("Ratios above 1: A takes longer; within each repeat, in a shuffled order.", None),
    ("Words such as `faster` and markers such as `<!-- claim: NAME -->` in code are not prose.", None),
])
def test_a_comparative_word_needs_a_claim_that_holds_and_licenses_it(text, wrong):
    problems = docs.unclaimed(text, CLAIMED)
    assert (wrong is None and not problems) or (wrong and any(wrong in p for p in problems)), problems


def test_every_test_file_is_in_the_proof_table():
    method = (ROOT / "docs" / "method.md").read_text()
    for test in sorted((ROOT / "tests").glob("test_*.py")):
        assert f"| `{test.name}` |" in method, f"docs/method.md's test table lacks {test.name}"


def variants(script) -> set[str]:
    """Every variant name the script's toggles (the fields beyond the shared ones) can give."""
    m = load(script)
    shared = {f.name for f in dataclasses.fields(load("ppo_linen.py").RunArgs)} - {"jit"}
    toggles = [f for f in dataclasses.fields(m.RunArgs) if f.name not in shared  # choices, not counts (num_agents)
               and (f.type is bool or typing.get_origin(f.type) is typing.Literal)]
    choices = [[True, False] if f.type is bool else list(typing.get_args(f.type)) for f in toggles]
    return {m.variant_name(dataclasses.replace(m.RunArgs(), **dict(zip([f.name for f in toggles], values))))
            for values in itertools.product(*choices)}


SUFFIXES = ("-nojitenv", "-nojit", "-grads", "-grads+policy", "-update", "-update+policy", "-torchenv",  # what toggles
            "-async", "-vector", "-envpool", "-default", "-reduce-overhead", "-max-autotune", "-none")     # append


def listed(name: str, row: str) -> bool:
    """The row names the variant, or a toggle the row says appends a suffix to any of its variants."""
    return f"`{name}`" in row or any(name.endswith(suffix) and f"`{suffix}`" in row
                                     and listed(name.removesuffix(suffix), row) for suffix in SUFFIXES)


@pytest.mark.parametrize("script", SCRIPTS)
def test_every_variant_is_in_the_scripts_table(script):
    (row,) = [line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith(f"| `{script}` |")]
    for name in variants(script):
        assert listed(name, row), f"README's script table does not name {script}'s variant {name}"


def test_preset_table_counts_what_bench_plans(tmp_path):
    text = (ROOT / "docs" / "benchmark.md").read_text()
    rows = dict(re.findall(r"^\| `([\w-]+)` \| (\d+) \|", text, flags=re.M))
    assert set(rows) == {"warmup", "exp1", "exp2", "exp3", "cpuenv", "envscale", "agents", "expensive", "torchenv",
                         "cpucompile", "tuning", "continuous", "continuous-learning", "pixels", "pixels-learning", "gpu",
                         "gpuscale", "dqn", "dqn-learning", "offpolicy", "offpolicy-learning", "offpolicy-cleanrl",
                         "tunesweep", "profile", "hosts", "sweep", "quick"}
    cleanrl = ["--cleanrl", fake_cleanrl(tmp_path)]  # offpolicy-cleanrl runs CleanRL's own scripts: its checkout
    for preset, count in rows.items():
        found = len(planned(preset, *cleanrl * (preset == "offpolicy-cleanrl")))
        assert found == int(count), f"docs/benchmark.md: {preset} plans {found} runs"
    seeds = re.search(r"benchback-rl's three experiments \((\d+) runs\)", text)
    assert int(seeds[1]) == sum(int(rows[e]) for e in ("exp1", "exp2", "exp3"))
