"""No run of six or more identical lines stands twice in the product code: a piece written again is
folded into one helper where it belongs. Lines are compared with their white space folded; blank
lines, comments, lone brackets and import statements (lists of names, not logic) are passed over."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("workflows", "activities", "operations", "frontdoor", "commands", "pressroom")
TOP = ("worker.py", "starter.py")
RUN = 6
_THIN = re.compile(r"[\s()\[\]{},:;]*")


def product_files() -> list[Path]:
    return sorted([*(path for room in PRODUCT for path in (ROOT / room).rglob("*.py")), *(ROOT / name for name in TOP)])


def counted_lines(text: str) -> list[tuple[int, str]]:
    """(line number, the line with its white space folded) of each line that counts."""
    imports = {number for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.Import, ast.ImportFrom))
               for number in range(node.lineno, (node.end_lineno or node.lineno) + 1)}
    kept = []
    for number, line in enumerate(text.splitlines(), 1):
        folded = " ".join(line.split())
        if number in imports or folded.startswith("#") or _THIN.fullmatch(folded):
            continue
        kept.append((number, folded))
    return kept


def repeats(texts: dict[str, str], run: int = RUN) -> list[str]:
    """Each run of `run` counted lines that stands in two places (in one file, places that overlap
    are one place), as `file:line ~ file:line`."""
    places: dict[tuple[str, ...], list[tuple[str, int, int]]] = defaultdict(list)
    for name, text in texts.items():
        kept = counted_lines(text)
        for start in range(len(kept) - run + 1):
            places[tuple(line for _, line in kept[start:start + run])].append((name, start, kept[start][0]))
    found = []
    for (name, start, line), *others in places.values():
        again = next(((other, at) for other, index, at in others if other != name or index - start >= run), None)
        if again:
            found.append(f"{name}:{line} ~ {again[0]}:{again[1]}")
    return sorted(found)


def test_no_run_of_six_lines_stands_twice_in_the_product():
    texts = {str(path.relative_to(ROOT)): path.read_text() for path in product_files()}
    assert repeats(texts) == []


def test_the_check_finds_a_repeat_and_passes_over_imports():
    body = "\n".join(f"    value_{n} = compute({n})" for n in range(6))
    first = f"import os\n\ndef a():\n{body}\n    return 1\n"
    second = f"from x import (\n    a,\n    b,\n    c,\n    d,\n    e,\n    f,\n)\n\ndef b():\n{body}\n"
    assert repeats({"one.py": first, "two.py": second}) == ["one.py:4 ~ two.py:11"]
    imports = "from x import (\n" + "".join(f"    name_{n},\n" for n in range(8)) + ")\n"
    assert repeats({"one.py": imports, "two.py": imports}) == []
    same = "\n".join(["x = 1"] * 8) + "\n"  # one run that overlaps itself is one place
    assert repeats({"one.py": same}) == []
    assert repeats({"one.py": same + "y = 2\n" + same}) == ["one.py:1 ~ one.py:10"]
