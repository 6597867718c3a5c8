"""Size caps that keep the code easy to hold in one's head (issue: the planner by method).

No function over 80 lines in `plan/` and `reconcile/`, where the decisions are made, and no
module of the package over 1,000 lines. A split that merges packages to pass does not count; the
import contracts in pyproject.toml keep the layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "provisioner"
MAX_FUNCTION_LINES = {"plan": 80, "reconcile": 80}
MAX_MODULE_LINES = 1000


def _functions(path: Path, root: Path = PACKAGE.parent) -> list[tuple[str, int]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        (f"{path.relative_to(root)}:{node.lineno} {node.name}",
         (node.end_lineno or node.lineno) - node.lineno + 1)
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
    ]  # fmt: skip


def test_no_long_function_where_decisions_are_made() -> None:
    too_long = [
        f"{where}: {lines} lines (max {cap})"
        for package, cap in MAX_FUNCTION_LINES.items()
        for path in sorted((PACKAGE / package).rglob("*.py"))
        for where, lines in _functions(path)
        if lines > cap
    ]
    assert too_long == []


def test_no_module_over_the_cap() -> None:
    too_big = [
        f"{path.relative_to(PACKAGE.parent)}: {n} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert too_big == []


def test_the_size_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(85))
    (tmp_path / "long.py").write_text(f"def long():\n{body}\n")
    assert _functions(tmp_path / "long.py", tmp_path) == [("long.py:1 long", 86)]
