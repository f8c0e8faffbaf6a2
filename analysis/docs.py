"""The generated blocks of README.md and docs/: between <!-- BEGIN analyze.py NAME --> and
<!-- END analyze.py NAME -->, analyze.py writes what it computed under NAME; the prose around
them is written by hand and carries no measured number."""

import re
from pathlib import Path

BLOCK = re.compile(r"<!-- BEGIN analyze\.py (?P<name>[\w-]+) -->\n(?P<body>.*?)"
                   r"<!-- END analyze\.py (?P<end>[\w-]+) -->", re.S)


def blocks_in(text: str, where: str = "") -> dict[str, str]:
    """{name: body} of every block in a Markdown text; ValueError on a mismatched END."""
    found = {}
    for m in BLOCK.finditer(text):
        if m["end"] != m["name"]:
            raise ValueError(f"{where}: block {m['name']!r} ends with END {m['end']!r}")
        found[m["name"]] = m["body"]
    return found


def fill(text: str, generated: dict[str, str], where: str = "") -> str:
    """The text with every block's body replaced by what analyze.py generated under its name."""
    unknown = sorted(set(blocks_in(text, where)) - set(generated))
    if unknown:
        raise ValueError(f"{where}: analyze.py generated no block named {', '.join(unknown)} (from these runs)")
    return BLOCK.sub(lambda m: f"<!-- BEGIN analyze.py {m['name']} -->\n{generated[m['name']]}"
                               f"<!-- END analyze.py {m['name']} -->", text)


def markdown_files(paths) -> list[Path]:
    """The given Markdown files, and every *.md in the given folders."""
    files = []
    for p in map(Path, paths):
        files += sorted(p.glob("*.md")) if p.is_dir() else [p]
    return files


def write(paths, generated: dict[str, str]) -> list[Path]:
    """Rewrites the blocks of each file in place; returns the files that changed."""
    changed = []
    for path in markdown_files(paths):
        text = path.read_text()
        new = fill(text, generated, str(path))
        if new != text:
            path.write_text(new)
            changed.append(path)
    return changed


def stale(path: Path, generated: dict[str, str]) -> list[str]:
    """The names of the blocks in a file whose body is not what analyze.py generates."""
    return [name for name, body in blocks_in(path.read_text(), str(path)).items() if generated.get(name) != body]


# Words that compare one thing's speed (or trend) with another's. Prose may use one only where a
# `<!-- claim: NAME -->` in the same paragraph or list item names a claim analyze.py computed that
# holds and licenses the word (the "claims" block); tests/test_docs.py enforces it.
COMPARATIVE = re.compile(r"\b(?:fast(?:er|est)|slow(?:er|est)|quicker|sooner|narrow(?:s|ed|ing|er)|widen(?:s|ed|ing)?"
                         r"|wider|catch(?:es)? up|caught up|keeps? pace|(?:is|are|was|were|stays?) level"
                         r"|level(?:s|led|ling)? (?:off|with)|on par|within (?:[\w.–-]+ ){0,3}of\b|outperform\w*"
                         r"|beats?|beaten|cheaper|costlier|better|worse|(?:falls?|fell|falling) (?:far )?behind|as (?:fast|slow|quick) as"
                         r"|ahead of (?!time)|smaller|larger|shrink\w*)\b", re.I)
CLAIM = re.compile(r"<!-- claim: ([\w\-, ]+) -->")
CLAIM_ROW = re.compile(r"^\| `([\w-]+)` \| ([^|]*) \| (yes|no) \|", re.M)


def units(text: str) -> list[str]:
    """The prose written by hand, one unit per paragraph, list item or heading: no generated
    blocks, no fenced code, no tables."""
    text = re.sub(r"```.*?```", "", BLOCK.sub("", text), flags=re.S)
    found = []
    for paragraph in re.split(r"\n\s*\n", text):
        lines = [ln for ln in paragraph.splitlines() if not ln.lstrip("> ").startswith("|")]
        item = []
        for ln in lines:
            if re.match(r"\s*(?:>\s*)?(?:[-*] |\d+\. |#)", ln) and item:
                found.append("\n".join(item))
                item = []
            item.append(ln)
        if item:
            found.append("\n".join(item))
    return [u for u in found if u.strip()]


def claims_of(text: str) -> dict[str, tuple[bool, tuple[str, ...]]]:
    """{name: (holds, words)} from the claims block of a Markdown text."""
    body = blocks_in(text).get("claims", "")
    return {n: (holds == "yes", tuple(w.strip() for w in words.split(",") if w.strip()))
            for n, words, holds in CLAIM_ROW.findall(body)}


def unclaimed(text: str, claims: dict) -> list[str]:
    """Each comparative word of the text's prose that no holding claim of its unit licenses, and
    each claim a unit names that is unknown or does not hold."""
    problems = []
    for unit in units(text):
        unit = re.sub(r"`[^`]*`", "", unit)  # code is not prose, nor a claim marker written as code
        named = [n.strip() for m in CLAIM.findall(unit) for n in m.split(",") if n.strip()]
        for n in named:
            if n not in claims:
                problems.append(f"unknown claim {n!r} in: {unit[:80]!r}")
            elif not claims[n][0]:
                problems.append(f"claim {n!r} does not hold (the claims block) in: {unit[:80]!r}")
        words = [w for n in named if n in claims for w in claims[n][1]]
        for hit in COMPARATIVE.findall(CLAIM.sub("", unit)):
            if not any(w.lower() in hit.lower() for w in words):
                problems.append(f"{hit!r} with no claim behind it in: {unit[:80]!r}")
    return problems
