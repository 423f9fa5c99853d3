"""The code says each thing once, in modules a reader can hold in mind: read from the source tree,
like the lint checks.

A helper written again in another module drifts from the first one — one copy fixed, the other
not, and two clients of the same upstream told different things. These checks find the copies a
reader could not tell apart (the same statements, whatever the names), and keep each protocol's
vocabulary — usage and finish reasons, both ways — in its one `vocabulary` module.

And the rules every later change keeps (docs/architecture.md §14): no module of proxy/ over 400 lines; no
protocol's name written as a literal outside proxy/protocols (the registry is the one list); no
import circle between any two modules of proxy/, imports made only for type checking included.
Each failure says how to fix it.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import grimp

from proxy.protocols import registry
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


MAX_LINES = 400
# Over the limit on this branch and split on a branch developed beside it: drop each entry when
# that branch is merged (the test below fails on an entry that no longer applies).
KNOWN_LONG: dict[str, str] = {}


def test_no_module_is_over_400_lines() -> None:
    long = {str(p.relative_to(ROOT)): n for p in sorted(PROXY.rglob("*.py"))
            if (n := len(p.read_text().splitlines())) > MAX_LINES}
    stale = [path for path in KNOWN_LONG if path not in long]
    assert not stale, f"no longer over {MAX_LINES} lines: remove {stale} from KNOWN_LONG in this test"
    over = [f"{path}: {n} lines" for path, n in long.items() if path not in KNOWN_LONG]
    assert not over, (
        f"modules over {MAX_LINES} lines:\n" + "\n".join(over) + "\nSplit each by concern: move a part that "
        "owns one thing (a class and its helpers, a table and what reads it) to a module of its own beside it, "
        "with a docstring saying what it owns; keep the old names importable where other packages use them, add "
        "the new module to setup.cfg's import contracts where its package is listed, and to docs/architecture.md "
        "§1.1.")


# Strings equal to a protocol's name that do not mean the protocol, each with what it means.
NOT_PROTOCOL_NAMES = {
    ("proxy/config/unsupported.py", "messages"): "the request body's `messages` field, which is never dropped",
}
# Protocol names written in modules a branch developed beside this one rewrites (the Responses
# endpoints move their protocol lookup behind the registry there): drop them at the merge.
KNOWN_PROTOCOL_LITERALS: set[tuple[str, str]] = set()
# Where protocol names belong: the protocols themselves (each package names itself, the registry
# lists them), and the demo upstream — not part of the service (setup.cfg: demo-beside-service), it
# plays the upstreams on the other side of the wire, one face per wire format, each of which names
# its own format as a real API does; a fourth protocol in the proxy needs nothing from it.
PROTOCOL_NAMES_LIVE_IN = (PROXY / "protocols", PROXY / "demo")


def test_no_protocol_name_is_written_outside_the_protocols() -> None:
    names = {p.name for p in registry.all_protocols()} | {a for p in registry.all_protocols() for a in p.aliases}
    found = set()
    for path in sorted(PROXY.rglob("*.py")):
        if any(path.is_relative_to(d) for d in PROTOCOL_NAMES_LIVE_IN):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                found.add((str(path.relative_to(ROOT)), node.value, node.lineno))
    places = {(path, name) for path, name, _ in found}
    stale = (KNOWN_PROTOCOL_LITERALS | set(NOT_PROTOCOL_NAMES)) - places
    assert not stale, f"no longer written there: remove {sorted(stale)} from this test's lists"
    literals = [f"{path}:{line} {name!r}" for path, name, line in sorted(found)
                if (path, name) not in KNOWN_PROTOCOL_LITERALS and (path, name) not in NOT_PROTOCOL_NAMES]
    assert not literals, (
        "protocol names written as literals outside proxy/protocols:\n" + "\n".join(literals) + "\nTake the "
        "name from the registry instead (proxy.protocols.registry: all_protocols(), for_path(), a Protocol's "
        "`.name`, or a name the caller passes in), so a fourth protocol changes nothing here. A string that only "
        "looks like a protocol's name (a request field such as `messages`) goes in NOT_PROTOCOL_NAMES in this "
        "test, saying what it means.")


# Import circles a branch developed beside this one removes (the attempt returns an outcome instead of
# calling back into the relay): drop each at the merge (the test fails on one that is gone).
KNOWN_CIRCLES: list[set[str]] = []


def _circles(graph: grimp.ImportGraph) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    circles: list[set[str]] = []
    for root in sorted(graph.modules):
        if root in index:
            continue
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            module, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[module] = min(low[module], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[module])
            if low[module] == index[module]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == module:
                        break
                if len(component) > 1:
                    circles.append(component)
    return circles


def test_no_import_circle_between_modules() -> None:
    # Type-checking imports count: a circle drawn only for the type checker still means neither
    # module can be read, or changed, without the other.
    graph = grimp.build_graph("proxy", cache_dir=None)
    circles = _circles(graph)
    stale = [known for known in KNOWN_CIRCLES if known not in circles]
    assert not stale, f"no longer a circle: remove {stale} from KNOWN_CIRCLES in this test"
    new = [sorted(c) for c in circles if c not in KNOWN_CIRCLES]
    assert not new, (
        "modules of proxy/ that import each other, directly or through others:\n"
        + "\n".join(" <-> ".join(c) for c in new) + "\nBreak each circle: move what both need to a module "
        "below both (or into the lower one), pass a value or a callback instead of importing the caller, or "
        "type the dependency with a Protocol declared on the lower side; an import inside a function or "
        "under TYPE_CHECKING still counts. `grimp` (installed with import-linter) shows the chain: "
        "graph.find_shortest_chain(importer, imported).")


STORE_OPENER = PROXY / "serving" / "state_backend.py"
# A store kept in the state file or Redis, by the names they go by: SQLite…, Redis…, Shared….
_SHARED_STORE = re.compile(r"(SQLite|Redis|Shared)[A-Z]\w*")


def test_every_shared_store_is_opened_in_one_place() -> None:
    """Memory, the state file or Redis is picked for every kind of store by one rule, in one module."""
    opened = []
    for path in sorted(PROXY.rglob("*.py")):
        if path == STORE_OPENER:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Call):
                continue
            name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
            called = ast.unparse(node.func)
            if _SHARED_STORE.fullmatch(name) or called == "StateFile.open":
                opened.append(f"{path.relative_to(ROOT)}:{node.lineno} {called}(…)")
    assert not opened, (
        "stores opened outside proxy/serving/state_backend.py:\n" + "\n".join(opened) + "\nOpen it there: "
        "a kind of store is one entry of KINDS (how it is made in memory, in the state file, in Redis) and "
        "one field of Stores; take it from `open_stores(config)` (the app's state carries what endpoints need).")


# Endpoints a branch developed beside this one rewrites (the Responses conversation state moves to
# a package of its own there): drop each at the merge (the test fails on one that no longer reads).
KNOWN_UNTYPED_STATE_READS: set[str] = set()


def test_endpoints_read_the_app_state_through_app_state() -> None:
    """`app.extensions[...]` is typed Any: one read of it, in proxy/blueprints/state.py, types it for all."""
    reading = set()
    for path in sorted(PROXY.rglob("*.py")):
        if path == PROXY / "blueprints" / "state.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute) \
                    and node.value.attr == "extensions":
                reading.add(str(path.relative_to(ROOT)))
    stale = KNOWN_UNTYPED_STATE_READS - reading
    assert not stale, f"no longer reading app.extensions: remove {sorted(stale)} from KNOWN_UNTYPED_STATE_READS"
    untyped = sorted(reading - KNOWN_UNTYPED_STATE_READS)
    assert not untyped, (
        "reading app.extensions[...] (typed Any) outside proxy/blueprints/state.py:\n" + "\n".join(untyped)
        + "\nRead the app's state with `app_state()` (or `app_state(app)` outside a request) from "
        "proxy.blueprints.state; a new part of the state is a field of `AppState`, filled in proxy.serving.app.")
