"""The package's layering, checked on its source: no import cycles, imports only point down.

docs/architecture.md draws the layers. Every ``import`` counts, also one inside a function (a
lazy import is still a dependency); only ``if TYPE_CHECKING:`` blocks are exempt, since they
never run. A module may import its own layer or a lower one.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "multiturn_envs"

LAYERS: dict[str, int] = {
    "errors": 0,
    "version": 0,
    "safejson": 0,
    "step_gate": 0,
    "untrusted": 0,
    "output_files": 0,
    "extras": 0,
    "deprecation": 0,
    "spaces": 1,
    "core": 1,
    "tools": 1,
    "rewards": 1,
    "wrappers": 2,
    "sandbox": 2,
    "episode": 2,
    "envs": 3,
    "registration": 4,
    "env_args": 4,
    "policies": 5,
    "harness": 6,
    "rl": 7,
    "adapters": 7,
    "server": 7,
    "testing": 8,
    "cli": 9,
}
"""Top-level module or subpackage -> layer (``multiturn_envs/__init__`` is the API surface)."""


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(path: Path) -> list[tuple[str, list[str], int]]:
    """``(module, names, line)`` of every import in ``path`` that can run."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: list[tuple[str, list[str], int]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.append((alias.name, [], node.lineno))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            found.append((module, [a.name for a in node.names], node.lineno))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in ROOT.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for target, names, _ in _imports(path):
            if not target.startswith("multiturn_envs"):
                continue
            # ``from pkg import sub`` imports the submodule ``pkg.sub`` when there is one
            subs = [f"{target}.{n}" for n in names if f"{target}.{n}" in modules]
            graph[name].update(subs or [target] if target in modules else subs)
    return graph


def _layer(module: str) -> int | None:
    parts = module.split(".")
    return LAYERS.get(parts[1]) if len(parts) > 1 else None


def test_there_is_no_import_cycle() -> None:
    graph = _graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append([*stack[stack.index(nxt) :], nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    assert cycles == []


def test_every_module_belongs_to_a_layer() -> None:
    unknown = sorted({m.split(".")[1] for m in _graph() if "." in m} - set(LAYERS))
    assert unknown == [], f"add {unknown} to LAYERS and docs/architecture.md"


@pytest.mark.parametrize("path", sorted(ROOT.rglob("*.py")), ids=lambda p: _module_name(p))
def test_imports_point_down_and_names_are_public(path: Path) -> None:
    name = _module_name(path)
    own = _layer(name)
    bad: list[str] = []
    for target, names, line in _imports(path):
        if not target.startswith("multiturn_envs."):
            continue
        theirs = _layer(target)
        if own is not None and theirs is not None and theirs > own:
            bad.append(f"line {line}: layer {own} imports {target} (layer {theirs})")
        if target != name:
            private = [n for n in names if n.startswith("_") and not n.endswith("__")]
            if private:
                bad.append(f"line {line}: private {private} from {target}")
    assert bad == []


FACADES = sorted(
    _module_name(p)
    for p in ROOT.rglob("__init__.py")
    if "__all__" in p.read_text(encoding="utf-8") and p.parent != ROOT
)
"""Every package ``__init__`` that declares ``__all__``: its stable API."""


@pytest.mark.parametrize("package", FACADES)
def test_a_facade_lists_each_public_name_once_and_every_name_resolves(package: str) -> None:
    import importlib

    module = importlib.import_module(package)
    names: list[str] = list(module.__all__)
    assert len(names) == len(set(names)), f"{package}.__all__ repeats a name"
    assert [n for n in names if n.startswith("_")] == [], f"{package}.__all__ has private names"
    missing = [n for n in names if not hasattr(module, n)]
    assert missing == [], f"{package}.__all__ names what it does not have"


def _source(package: str) -> str:
    return (ROOT.parent / package.replace(".", "/") / "__init__.py").read_text("utf-8")


def _star_facades() -> list[str]:
    """The facades made of their modules' ``__all__`` (``from .mod import *``)."""
    return [f for f in FACADES if "import *" in _source(f)]


@pytest.mark.parametrize("package", _star_facades())
def test_a_facade_name_has_one_home_the_module_that_defines_it(package: str) -> None:
    """The facade is the union of its modules' ``__all__``; a module lists only what it
    defines (no re-export chains), so each public name is written once, where it lives."""
    import importlib
    import inspect

    module = importlib.import_module(package)
    foreign: list[str] = []
    for sub in vars(module).values():
        if not inspect.ismodule(sub) or not sub.__name__.startswith(f"{package}."):
            continue
        if hasattr(sub, "__path__"):  # a subpackage is a facade of its own, checked as one
            continue
        for name in getattr(sub, "__all__", ()):
            value = getattr(sub, name)
            home = getattr(value, "__module__", sub.__name__)
            if (inspect.isclass(value) or inspect.isfunction(value)) and home != sub.__name__:
                foreign.append(f"{sub.__name__}.{name} is defined in {home}")
    assert foreign == []
    listed = [
        n
        for sub in re.findall(r"^__all__ \+= (\w+)\.__all__$", _source(package), re.M)
        for n in getattr(module, sub).__all__
    ]
    assert listed and module.__all__ == listed
