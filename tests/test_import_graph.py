"""The import graph of ``src/emelex``: no circles, no reaching into another package's
private modules.

Imports are read statically with :mod:`ast` (imports inside functions count; imports under
``if TYPE_CHECKING:`` do not, since they never run), so the test needs no import side
effects and sees every edge a code path could take.
"""

from __future__ import annotations

import ast
import itertools
import pathlib
from collections.abc import Iterator
from typing import Final

import emelex

SRC = pathlib.Path(emelex.__file__).resolve().parent
ROOT = "emelex"

#: Circles other branches of issue 12 are breaking now; the merge empties this. Each entry
#: is the sorted set of modules of one strongly connected component.
KNOWN_CIRCLES: frozenset[frozenset[str]] = frozenset()

#: Modules that import a private module of another package: none. Each package exports
#: what others need from its facade (issue 12, item 5).
PRIVATE_IMPORTS: frozenset[tuple[str, str]] = frozenset()


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(test: ast.expr) -> bool:
    if isinstance(test, ast.Name):
        return test.id == "TYPE_CHECKING"
    return isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node except the bodies of ``if TYPE_CHECKING:`` blocks (their ``else``
    branches do run)."""
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _resolve(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    base = module.split(".")
    if not is_package:
        base.pop()
    for _ in range(node.level - 1):
        base.pop()
    return ".".join(base + ([node.module] if node.module else []))


def _imports(
    path: pathlib.Path, module: str, modules: frozenset[str], *, typing: bool = False
) -> Iterator[tuple[str, int]]:
    """The emelex modules ``module`` imports at run time (``typing``: for type checking
    too), with line numbers. ``from package import name`` counts as importing
    ``package.name`` when that is a module."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree) if typing else _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == ROOT:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            target = _resolve(module, is_package, node)
            if target.split(".")[0] != ROOT:
                continue
            for alias in node.names:
                full = f"{target}.{alias.name}"
                yield (full if full in modules else target), node.lineno


def _graph(*, typing: bool = False) -> dict[str, dict[str, int]]:
    paths = {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}
    modules = frozenset(paths)
    graph: dict[str, dict[str, int]] = {}
    for module, path in paths.items():
        edges: dict[str, int] = {}
        for target, line in _imports(path, module, modules, typing=typing):
            # Importing a.b.c runs a/__init__ and a/b/__init__ first: count the target only
            # (the facades are edges of their own), and never self-edges.
            if target in modules and target != module:
                edges.setdefault(target, line)
        graph[module] = edges
    return graph


def _components(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found: list[list[str]] = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """One concrete circle inside ``component``, for the failure message."""
    members = set(component)
    start = component[0]
    # Breadth-first search back to start gives the shortest circle through it.
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following: list[str] = []
        for node in frontier:
            for child in sorted(graph[node]):
                if child not in members:
                    continue
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return component


def _describe(graph: dict[str, dict[str, int]], circle: list[str]) -> str:
    steps = [
        f"{module} (line {graph[module][target]}) -> {target}"
        for module, target in itertools.pairwise(circle)
    ]
    return "\n    ".join(steps)


#: Sub-packages that are rooms of one package, not packages of their own: their private
#: modules belong to the package around them (the service's rooms import each other's).
ROOMS: Final = {
    "emelex.service.ops": "emelex.service",
    "emelex.service.transport": "emelex.service",
    "emelex.service.workspace": "emelex.service",
}


def _private_imports(graph: dict[str, dict[str, int]]) -> set[tuple[str, str]]:
    """(importer, private module) pairs where the private module belongs to a package
    other than the importer's own package (or one of its sub-packages)."""
    found: set[tuple[str, str]] = set()
    for module, edges in graph.items():
        for target in edges:
            parts = target.split(".")
            private = next((i for i, part in enumerate(parts) if part.startswith("_")), None)
            if private is None:
                continue
            owner = ".".join(parts[:private])  # the package the private module lives in
            owner = ROOMS.get(owner, owner)
            if module != owner and not module.startswith(owner + "."):
                found.add((module, target))
    return found


def test_the_graph_sees_the_package() -> None:
    graph = _graph()
    assert "emelex.app._engine" in graph
    assert "emelex.agent" in graph["emelex.app._engine"] or any(
        target.startswith("emelex.agent") for target in graph["emelex.app._engine"]
    )


def test_no_import_circles() -> None:
    graph = _graph()
    circles = [c for c in _components(graph) if frozenset(c) not in KNOWN_CIRCLES]
    message = "\n".join(
        f"import circle among {len(c)} modules:\n    {_describe(graph, _cycle(graph, c))}"
        for c in circles
    )
    assert not circles, message


def test_no_import_circles_counting_type_checking_imports() -> None:
    """A circle hidden behind ``if TYPE_CHECKING:`` is still two modules that each need
    the other to be understood: the service's rooms are layered without one."""
    graph = _graph(typing=True)
    layered = ("emelex.service", "emelex.store")
    circles = [c for c in _components(graph) if c[0].startswith(layered)]
    message = "\n".join(
        f"import circle among {len(c)} modules:\n    {_describe(graph, _cycle(graph, c))}"
        for c in circles
    )
    assert not circles, message


def test_known_circles_still_exist() -> None:
    """The allowlist is exact: once a circle is broken its entry must go."""
    components = {frozenset(c) for c in _components(_graph())}
    assert KNOWN_CIRCLES - components == set(), "broken circles still listed in KNOWN_CIRCLES"


def test_no_private_imports_across_packages() -> None:
    found = _private_imports(_graph())
    new = sorted(found - PRIVATE_IMPORTS)
    assert not new, "private modules imported from another package:\n" + "\n".join(
        f"    {module} imports {target}" for module, target in new
    )
    gone = sorted(PRIVATE_IMPORTS - found)
    assert not gone, f"no longer occurring, remove from PRIVATE_IMPORTS: {gone}"


def _graph_of(sources: dict[str, str], tmp_path: pathlib.Path) -> dict[str, dict[str, int]]:
    paths: dict[str, pathlib.Path] = {}
    for name, text in sources.items():
        path = tmp_path / (name.replace(".", "/") + ".py")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        paths[name.removesuffix(".__init__")] = path
    modules = frozenset(paths)
    return {
        module: {t: line for t, line in _imports(path, module, modules) if t != module}
        for module, path in paths.items()
    }


def test_the_walker_finds_circles_and_skips_type_checking(tmp_path: pathlib.Path) -> None:
    graph = _graph_of(
        {
            "emelex.__init__": "",
            "emelex.a": "def f():\n    from emelex import b\n",
            "emelex.b": "import emelex.c\n",
            "emelex.c": "from . import a\n",
            "emelex.d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
            "    from emelex import a\nelse:\n    import os\n",
        },
        tmp_path,
    )
    assert graph["emelex.d"] == {}
    components = _components(graph)
    assert components == [["emelex.a", "emelex.b", "emelex.c"]]
    assert _cycle(graph, components[0]) == ["emelex.a", "emelex.b", "emelex.c", "emelex.a"]
    assert "emelex.a (line 2) -> emelex.b" in _describe(graph, _cycle(graph, components[0]))


def test_the_walker_finds_private_imports(tmp_path: pathlib.Path) -> None:
    graph = _graph_of(
        {
            "emelex.__init__": "",
            "emelex.x.__init__": "from emelex.x._y import Y\n",
            "emelex.x._y": "Y = 1\n",
            "emelex.x.sub._z": "from .._y import Y\n",
            "emelex.w._v": "from emelex.x._y import Y\n",
        },
        tmp_path,
    )
    assert _private_imports(graph) == {("emelex.w._v", "emelex.x._y")}


#: Public names that start with an underscore (named tuples' own API).
PUBLIC_UNDERSCORE = frozenset({"_make", "_replace", "_asdict", "_fields"})


def _private_reads(path: pathlib.Path) -> Iterator[tuple[str, int]]:
    """``obj._name`` reads in ``path`` of private names the module does not define
    itself (as a function, class, attribute it assigns or class field)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    own: set[str] = set(PUBLIC_UNDERSCORE)
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            own.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            own.add(node.id)
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            own.add(node.target.id)
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
            and node.attr not in own
        ):
            yield node.attr, node.lineno


def test_the_service_and_store_read_no_other_modules_private_names() -> None:
    """Rooms talk through public names and narrow capabilities: a read of another
    module's private attribute (``host._sessions``) is a hidden edge the import graph
    cannot see."""
    found = []
    for package in ("service", "store"):
        for path in sorted((SRC / package).rglob("*.py")):
            for name, line in _private_reads(path):
                found.append(f"{path.relative_to(SRC)}:{line} reads {name}")
    assert not found, "\n".join(found)


def test_the_private_read_finder_sees_reads_of_foreign_names(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "class A:\n    def __init__(self):\n        self._own = 1\n"
        "    def f(self, other, host):\n        return other._own + host._sessions\n",
        encoding="utf-8",
    )
    assert list(_private_reads(path)) == [("_sessions", 5)]


def test_the_two_stores_share_modules_instead_of_each_other() -> None:
    """SQLite and PostgreSQL share decoding (``store/_decode.py``), the log values and the
    search blocks; neither reaches into the other."""
    graph = _graph(typing=True)
    sqlite, postgres = "emelex.store._sqlite", "emelex.store.postgres._store"
    assert sqlite not in graph[postgres] and postgres not in graph[sqlite]
    assert "emelex.store._decode" in graph[postgres] and "emelex.store._decode" in graph[sqlite]
