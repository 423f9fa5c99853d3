"""The code says each thing once: read from the source tree, like the lint checks.

A helper written again in another module drifts from the first one — one copy fixed, the other
not, and two clients of the same upstream told different things. These checks find the copies a
reader could not tell apart (the same statements, whatever the names), and keep each protocol's
vocabulary — usage and finish reasons, both ways — in its one `vocabulary` module.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

from tests.conftest import ROOT

PROXY = ROOT / "proxy"
# The simulated upstream writes every wire format with code of its own on purpose: were it to use
# the proxy's helpers, a bug in one would cancel out in the tests instead of showing.
DELIBERATE_COPIES = (PROXY / "demo",)
PROTOCOL_PACKAGES = ("chat_completions", "messages", "responses")


def _modules() -> list[Path]:
    return [p for p in sorted(PROXY.rglob("*.py")) if not any(p.is_relative_to(d) for d in DELIBERATE_COPIES)]


class _Anonymous(ast.NodeTransformer):
    """Names and argument names erased, so that two copies differing only in them compare equal."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        return ast.copy_location(ast.Name(id="_", ctx=node.ctx), node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return ast.copy_location(ast.arg(arg="_"), node)


def _shape(node: ast.stmt) -> str | None:
    """What a top-level definition does, or None when it is too small to count as logic."""
    if isinstance(node, ast.FunctionDef):
        body = node.body
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
            body = body[1:]  # the docstring
        tree = _Anonymous().visit(ast.Module(body=body, type_ignores=[]))
        return "def " + ast.dump(tree) if sum(1 for _ in ast.walk(tree)) >= 12 else None
    if isinstance(node, ast.Assign | ast.AnnAssign) and isinstance(node.value, ast.Tuple | ast.List | ast.Dict):
        elements = node.value.keys if isinstance(node.value, ast.Dict) else node.value.elts
        return "table " + ast.dump(node.value) if len(elements) >= 3 else None
    return None


def test_no_helper_or_table_is_written_twice() -> None:
    places: dict[str, list[str]] = defaultdict(list)
    for path in _modules():
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body + [n for c in tree.body if isinstance(c, ast.ClassDef) for n in c.body]:
            shape = _shape(node)
            if shape is not None:
                name = getattr(node, "name", None) or ast.unparse(getattr(node, "targets", [node])[0])
                places[shape].append(f"{path.relative_to(ROOT)}:{node.lineno} {name.split(':')[0]}")
    copies = [" = ".join(where) for where in places.values() if len(where) > 1]
    assert not copies, "written twice (import the first instead):\n" + "\n".join(copies)


def test_each_protocol_keeps_its_vocabulary_in_one_module() -> None:
    """Usage and finish reasons, read from upstreams and written for clients: in `vocabulary`."""
    for package in PROTOCOL_PACKAGES:
        folder = PROXY / "protocols" / package
        assert (folder / "vocabulary.py").exists(), f"{package} has no vocabulary module"
        for path in sorted(folder.glob("*.py")):
            if path.name == "vocabulary.py":
                continue
            tree = ast.parse(path.read_text(), str(path))
            for node in tree.body:
                if isinstance(node, ast.FunctionDef):
                    names = [node.name]
                elif isinstance(node, ast.Assign):
                    names = [t.id for t in node.targets if isinstance(t, ast.Name)]
                else:
                    continue
                for name in names:
                    lowered = name.lower().lstrip("_")
                    misplaced = lowered.startswith(("usage_", "finish_", "stop_reason")) or "_finish" in lowered
                    assert not misplaced, f"{path.relative_to(ROOT)}: {name} belongs in {package}/vocabulary.py"
