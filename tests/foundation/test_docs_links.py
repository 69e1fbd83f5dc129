"""Every relative link in the README, docs/ and bench/README.md reaches a file that exists, and
its #anchor a heading of that file, as GitHub makes the anchors."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def anchor_of(heading: str) -> str:
    """GitHub's anchor: lower case, punctuation dropped (hyphens and underscores kept), spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {anchor_of(h) for h in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8")))}


def documents() -> list[Path]:
    return [ROOT / "README.md", ROOT / "bench" / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        if re.match(r"^[a-z]+:", target):
            continue  # an outside address: not this test's to reach
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target} (no such heading)")
    return broken


def test_the_anchor_is_githubs():
    assert anchor_of("Errors, rendering, waiting and `--json`") == "errors-rendering-waiting-and---json"
    assert anchor_of("Patches: when one may be retired") == "patches-when-one-may-be-retired"


def test_a_missing_heading_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# A\n\n[b](b.md#nowhere) [c](c.md) [self](#a)\n", encoding="utf-8")
    (tmp_path / "b.md").write_text("# Somewhere\n", encoding="utf-8")
    assert broken_links(tmp_path / "a.md") == ["b.md#nowhere (no such heading)", "c.md (no such file)"]


def test_every_link_of_the_docs_reaches_its_file_and_heading():
    broken = {str(path.relative_to(ROOT)): found for path in documents() if (found := broken_links(path))}
    assert broken == {}
