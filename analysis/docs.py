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
