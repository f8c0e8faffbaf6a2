"""The script a user copies: any benchback script without the benchmark's harness.

    python plain.py ppo_nnx.py > my_ppo.py      # then: python my_ppo.py --env-id Acrobot-v1

What comes off: the section from `# %% harness` to the end (the checks of the arguments, the run's record,
timing, --profile, --track, summary.json, saving and evaluation), and in the part above it every statement
whose first line ends with the comment `# harness` (a `with` keeps its body). A statement whose first line
ends with `# plain: CODE`, or a comment line `# plain: CODE`, becomes CODE. What stays: the algorithm, its
arguments, its TensorBoard logging (a plain `Writer` into runs/) and the harness's few helpers the algorithm
still calls (`fail`, say). Definitions and imports nothing uses any more are dropped.
"""

import ast
import builtins
import io
import re
import symtable
import sys
import tokenize

MARKER = "# %% harness\n"
HARNESS = re.compile(r"#\s*harness\b")
PLAIN = re.compile(r"#\s*plain:\s?(.*)$")


def comments(source: str) -> dict[int, tuple[str, bool]]:
    """Each line's comment, and whether it is the whole line."""
    found = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            found[tok.start[0]] = (tok.string, not tok.line[:tok.start[1]].strip())
    return found


def statements(body: list) -> list:
    """Every statement in a body, nested ones included, outer first."""
    out = []
    for node in body:
        out.append(node)
        for field in ("body", "orelse", "finalbody", "handlers"):
            out += statements(getattr(node, field, []))
    return out


def strip_marked(source: str) -> str:
    """The statements marked `# harness` taken out, those marked `# plain: CODE` replaced."""
    lines, notes, tree = source.splitlines(), comments(source), ast.parse(source)
    drop, dedent, replace = set(), [0] * (len(lines) + 2), {}
    for node in statements(tree.body):
        note = notes.get(node.lineno, ("", False))[0]
        start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
        if HARNESS.match(note) and isinstance(node, ast.With):  # the body stays, one level out
            drop.update(range(start, node.body[0].lineno))
            for line in range(node.body[0].lineno, node.end_lineno + 1):
                dedent[line] += node.body[0].col_offset - node.col_offset
        elif HARNESS.match(note):
            drop.update(range(start, node.end_lineno + 1))
        elif match := PLAIN.match(note):
            drop.update(range(start + 1, node.end_lineno + 1))
            replace[start] = " " * node.col_offset + match.group(1)
    for parent in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        for field, doc in zip(parent.body, parent.body[1:]):  # a dropped field's docstring goes with it
            if field.lineno in drop and isinstance(doc, ast.Expr) and isinstance(doc.value, ast.Constant):
                drop.update(range(doc.lineno, doc.end_lineno + 1))
    out = []
    for number, line in enumerate(lines, 1):
        note, whole = notes.get(number, ("", False))
        if number in drop:
            continue
        if whole and (match := PLAIN.match(note)):
            line = line[:len(line) - len(line.lstrip())] + match.group(1)
        line = replace.get(number, line)
        cut = dedent[number]  # (a line indented less, inside a string, stays as it is)
        out.append(line[cut:] if not line[:cut].strip() and len(line) - len(line.lstrip()) >= min(cut, len(line)) else line)
    return "\n".join(out) + "\n"


def bound(node) -> set[str]:
    """The names a top-level statement defines."""
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return {node.name}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return set()


def used(nodes) -> set[str]:
    """The global names these top-level statements refer to (in any function or class inside them)."""
    names = set()
    for node in nodes:
        tables = [symtable.symtable(ast.unparse(node), "<plain>", "exec")]
        for table in tables:
            tables += table.get_children()
            names |= {s.get_name() for s in table.get_symbols()
                      if s.is_referenced() and (table is tables[0] or s.is_global())}
    return names


def lines_of(node, text_lines: list[str]) -> range:
    """A top-level statement's lines (from 1), its decorators and the comment lines right above it included."""
    start = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    while start > 1 and text_lines[start - 2].startswith("#") and not text_lines[start - 2].startswith("# %%"):
        start -= 1
    return range(start, node.end_lineno + 1)


def plain(source: str) -> str:
    """The plain script of a benchback script's source."""
    if source.count(MARKER) != 1:
        raise ValueError("not a benchback script: no single line '# %% harness'")
    reading, harness = source.split(MARKER)
    reading = strip_marked(reading.replace('if __name__ == "__main__":\n    main()\n', ""))
    body, helpers = ast.parse(reading).body, ast.parse(harness).body
    helpers = [node for node in helpers if not isinstance(node, ast.If)]  # not its call of main()
    uses = {id(node): used([node]) for node in body + helpers}  # each statement's global names, worked out once
    uses_of = lambda nodes: set().union(*(uses[id(node)] for node in nodes))
    # the harness's definitions the reading part still calls, and theirs in turn
    added = []
    while missing := uses_of(body + added) - set().union(*map(bound, body + added)) - set(dir(builtins)):
        found = [node for node in helpers if bound(node) & missing]
        if not found:
            raise ValueError(f"undefined in the plain script: {', '.join(sorted(missing))}")
        added += found
    # then what nothing uses any more (an import, a definition the harness alone called), until none is left
    kept = body + added
    while unused := [node for node in kept if bound(node) and "main" not in bound(node)
                     and not bound(node) & uses_of(other for other in kept if other is not node)]:
        kept = [node for node in kept if node not in unused]
    reading_lines, harness_lines = reading.splitlines(), harness.splitlines()
    dropped = {line for node in body if bound(node) and node not in kept for line in lines_of(node, reading_lines)}
    imports = [line for node in added if node in kept and isinstance(node, (ast.Import, ast.ImportFrom))
               for line in harness_lines[node.lineno - 1:node.end_lineno]]
    definitions = ["\n\n" + "\n".join(harness_lines[r.start - 1:r.stop - 1]) for node in added
                   if node in kept and not isinstance(node, (ast.Import, ast.ImportFrom))
                   for r in [lines_of(node, harness_lines)]]
    last_import = max(node.end_lineno for node in body if isinstance(node, (ast.Import, ast.ImportFrom)))
    out = []
    for number, line in enumerate(reading_lines, 1):
        if number not in dropped:
            out.append(line)
        if number == last_import:
            out += imports
    text = "\n".join(out).rstrip() + "\n" + "".join(definitions) + '\n\n\nif __name__ == "__main__":\n    main()\n'
    text = re.sub(r"\n\n\n+(?=import |from )", "\n\n", text)  # where a dropped line stood among the imports
    return re.sub(r"\n{4,}", "\n\n\n", text)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] in ("-h", "--help"):
        print(__doc__.strip())
        sys.exit(0 if len(sys.argv) == 2 else 2)
    try:
        with open(sys.argv[1]) as f:
            print(plain(f.read()), end="")
    except (OSError, ValueError) as e:
        print(f"error: {sys.argv[1]}: {e.strerror if isinstance(e, OSError) else e}", file=sys.stderr)
        sys.exit(2)
