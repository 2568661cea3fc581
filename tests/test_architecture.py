"""The package's import graph, read from the source: layers point down, and no import cycles between modules.

Every `import` in `hf_es/` is parsed with `ast`, lazy ones (inside functions, under `if TYPE_CHECKING:`) included, and
both rules use all of them: a lazy import from a higher layer is still a dependency on it, and a lazy import is the
usual way a cycle is hidden rather than removed. `hf_es/__init__.py` is exempt (lazy public re-exports); modules
inside the package never import through it.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hf_es"

# The layers (docs/ARCHITECTURE.md "Layers" states the same table; test_docs_state_the_same_layers compares them). A
# module may import its own layer or a lower one. Keys are the top-level modules and packages of hf_es.
LAYERS: dict[str, int] = {
    "_io": 0,
    "_plotting": 0,
    "es": 0,
    "metrics": 0,
    "hub": 1,
    "models": 1,
    "prompts": 1,
    "cli": 1,
    "scoring": 1,
    "rewards": 2,
    "data": 2,
    "tasks": 3,
    "generation": 3,
    "evaluation": 4,
    "analysis": 4,
    "model_card": 5,
    "trainer": 6,
    "grpo": 7,
    "recipes": 7,
    "reproduce": 8,
}


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. "hf_es.trainer.saving"
    target: str  # imported hf_es module, e.g. "hf_es.trainer.checkpointing"
    line: int
    at_import_time: bool  # runs when `source` is imported (False inside a function or a TYPE_CHECKING block)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _import_nodes(tree: ast.Module):
    """Yields (node, at_import_time) for every import statement in the module."""
    stack = [(node, True) for node in tree.body]
    while stack:
        node, eager = stack.pop()
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, eager
            continue
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            eager = False
        elif isinstance(node, ast.If) and _is_type_checking(node):
            stack += [(child, False) for child in node.body] + [(child, eager) for child in node.orelse]
            continue
        stack += [(child, eager) for child in ast.iter_child_nodes(node)]


def _resolve(name: str, modules: dict[str, Path]) -> str | None:
    """The longest prefix of a dotted name that is a module of the package (None for other packages)."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in modules:
            return ".".join(parts[:end])
    return None


def package_imports() -> list[Import]:
    """Every import of an hf_es module by an hf_es module."""
    modules = _modules()
    found = []
    for source, path in modules.items():
        package = source if path.name == "__init__.py" else source.rpartition(".")[0]
        for node, eager in _import_nodes(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(anchor + ([node.module] if node.module else []))
                # `from pkg import name`: the submodule pkg.name when there is one, else pkg itself.
                names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
            for name in dict.fromkeys(names):
                target = _resolve(name, modules)
                if target is not None and target != source:
                    found.append(Import(source, target, node.lineno, eager))
    return found


def _top_level(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def _where(imp: Import) -> str:
    lazy = "" if imp.at_import_time else " (lazy)"
    return f"{imp.source} -> {imp.target} (line {imp.line}){lazy}"


def test_every_module_is_in_a_layer():
    unplaced = sorted({_top_level(m) for m in _modules() if m != "hf_es"} - set(LAYERS))
    assert not unplaced, f"hf_es modules in no layer (add them to LAYERS and docs/ARCHITECTURE.md): {unplaced}"


def test_imports_never_point_up_a_layer():
    upward, through_init = [], []
    for imp in package_imports():
        if imp.source == "hf_es":
            continue  # hf_es/__init__.py: lazy public re-exports, exempt
        if imp.target == "hf_es":
            through_init.append(_where(imp))
            continue
        source, target = LAYERS.get(_top_level(imp.source)), LAYERS.get(_top_level(imp.target))
        if source is not None and target is not None and target > source:
            upward.append(f"L{source} {_where(imp)} L{target}")
    assert not through_init, "imports through hf_es/__init__ (import the defining module):\n" + "\n".join(through_init)
    assert not upward, "imports from a lower layer into a higher one:\n" + "\n".join(upward)


def import_cycles(imports: list[Import]) -> list[list[str]]:
    """The groups of modules that import each other, lazily or not (strongly connected components, size > 1)."""
    graph: dict[str, set[str]] = {}
    for imp in imports:
        if "hf_es" not in (imp.source, imp.target):
            graph.setdefault(imp.source, set()).add(imp.target)

    def reachable(start: str) -> set[str]:
        seen, stack = set(), [start]
        while stack:
            for nxt in graph.get(stack.pop(), ()):
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append(nxt)
        return seen

    reach = {module: reachable(module) for module in graph}
    cycles = {
        frozenset(m for m in reach if m == module or (m in reach[module] and module in reach[m])) for module in reach
    }
    return sorted(sorted(group) for group in cycles if len(group) > 1)


def test_no_import_cycles():
    imports = package_imports()
    cycles = import_cycles(imports)
    lines = []
    for group in cycles:
        edges = [_where(imp) for imp in imports if imp.source in group and imp.target in group]
        lines.append(" <-> ".join(group) + ":\n    " + "\n    ".join(edges))
    assert not cycles, "import cycles between modules:\n" + "\n".join(lines)


def test_cycle_finder_finds_a_planted_cycle():
    imports = [Import("hf_es.a", "hf_es.b", 1, True), Import("hf_es.b", "hf_es.c", 1, True)]
    assert import_cycles(imports) == []
    assert import_cycles(imports + [Import("hf_es.c", "hf_es.a", 1, True)]) == [["hf_es.a", "hf_es.b", "hf_es.c"]]
    # Closed by a lazy import: still a cycle.
    assert import_cycles(imports + [Import("hf_es.c", "hf_es.a", 1, False)]) == [["hf_es.a", "hf_es.b", "hf_es.c"]]


def test_lazy_and_relative_imports_are_read():
    imports = {(imp.source, imp.target): imp for imp in package_imports()}
    # A lazy import (inside a function) and a relative one, both known to exist today.
    assert any(not imp.at_import_time for imp in imports.values())
    assert ("hf_es.model_card.card", "hf_es.model_card.sections") in imports


def _docs_layers() -> dict[str, int]:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    match = re.search(r"^#+ Layers\b.*?$(.*?)(?=^#+ |\Z)", text, flags=re.M | re.S)
    if match is None:
        pytest.fail("docs/ARCHITECTURE.md has no 'Layers' section stating the L0..L8 table")
    stated, layer = {}, None
    for line in match.group(1).splitlines():
        tag = re.search(r"\bL(\d)\b", line)
        layer = int(tag.group(1)) if tag else layer  # a layer's list may wrap onto the next lines
        for name in re.findall(r"hf_es/([A-Za-z_]+)", line):
            if layer is not None and not name.startswith("__"):  # hf_es/__init__.py is exempt
                stated[name] = layer
    return stated


def test_docs_state_the_same_layers():
    assert _docs_layers() == LAYERS
