"""The import graph has no circle: read from the source (every import statement, those inside
functions included, those under `if TYPE_CHECKING:` left out), no module imported."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROOMS = ("workflows", "activities", "operations", "frontdoor", "commands", "pressroom", "devstack", "bench",
         "schema")
TOP = ("worker", "starter")


def modules() -> dict[str, Path]:
    found = {name: ROOT / f"{name}.py" for name in TOP}
    for room in ROOMS:
        for path in (ROOT / room).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def imports_of(path: Path, known: dict[str, Path]) -> set[str]:
    """The project's modules this file imports, by name (a name imported from a package that is a
    module of its own counts as that module)."""
    found: set[str] = set()
    stack: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
    while stack:
        node = stack.pop()
        if _type_checking(node):
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.update(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module
                         for alias in node.names)
        stack.extend(ast.iter_child_nodes(node))
    return {name for name in found if name in known}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(name: str) -> None:
        index[name] = low[name] = len(index)
        stack.append(name)
        on_stack.add(name)
        for other in graph[name]:
            if other not in index:
                visit(other)
                low[name] = min(low[name], low[other])
            elif other in on_stack:
                low[name] = min(low[name], index[other])
        if low[name] == index[name]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == name:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for name in sorted(graph):
        if name not in index:
            visit(name)
    return found


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(path, known) - {name} for name, path in known.items()}


def test_no_module_imports_itself_round_a_circle():
    assert circles(import_graph()) == []


def test_the_check_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


# The README's drawing ("The layers"): the rooms each room imports. bench/ and tests/ stand outside
# the product and may import any of it; nothing in the product imports them.
MAY_IMPORT = {
    "starter": {"commands", "pressroom"},
    "commands": {"frontdoor", "worker", "operations", "workflows", "activities", "devstack", "pressroom"},
    "frontdoor": {"operations", "pressroom"},
    "worker": {"operations", "workflows", "activities", "pressroom"},
    "operations": {"workflows", "activities", "pressroom"},
    "workflows": {"activities", "pressroom"},
    "activities": {"pressroom"},
    "devstack": {"pressroom"},
    "pressroom": set(),
    "schema": set(),
}


def room_arrows(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """Which rooms each product room imports (bench/ left out: it stands outside the product)."""
    arrows: dict[str, set[str]] = {room: set() for room in MAY_IMPORT}
    for name, others in graph.items():
        room = name.split(".")[0]
        if room in MAY_IMPORT:
            arrows[room].update(other.split(".")[0] for other in others if other.split(".")[0] != room)
    return arrows


def test_each_room_imports_exactly_the_rooms_below_it_in_the_drawing():
    # Exactly: an arrow the code no longer has leaves the drawing too.
    assert room_arrows(import_graph()) == MAY_IMPORT


def _drawing() -> list[str]:
    text = (ROOT / "README.md").read_text()
    layers = text[text.index("## The layers"):]
    return layers[layers.index("```\n") + 4:layers.index("\n```", layers.index("```\n") + 4)].splitlines()


def drawn_name(room: str) -> str:
    return f"{room}.py" if room in TOP else f"{room}/"


def floor_of(room: str, drawing: list[str]) -> int:
    """The line of the drawing where the room stands: its name opening a line or a box (after two
    spaces, a comma or an arrow), not mentioned in passing as in "registers workflows/"."""
    name = drawn_name(room)
    for number, line in enumerate(drawing):
        if re.search(rf"(^\s*|\s\s|, |► ){re.escape(name)}", line):
            return number
    raise AssertionError(f"{name} is not in the README's drawing")


def test_the_readme_drawing_has_every_arrow_point_down_or_along_a_drawn_arrow():
    drawing = _drawing()
    for room, others in MAY_IMPORT.items():
        if room == "schema":
            continue  # the migrations' package: SQL files, nothing imported
        for other in others:
            above, below = floor_of(room, drawing), floor_of(other, drawing)
            line = drawing[above]
            between = line[line.index(drawn_name(room)):line.index(drawn_name(other))] if below == above else ""
            # Same line: along a drawn arrow, or one box ("starter.py, commands/": the way in and its parts).
            assert below > above or "►" in between or between == f"{drawn_name(room)}, ", \
                f"the drawing has {other} above {room}, which imports it"


def test_the_drawing_check_finds_an_arrow_drawn_upward():
    drawing = ["   pressroom/     the ground", "   activities/    all I/O"]
    assert floor_of("activities", drawing) > floor_of("pressroom", drawing)
    assert floor_of("workflows", ["   worker.py  registers workflows/", "   workflows/  decisions"]) == 1
