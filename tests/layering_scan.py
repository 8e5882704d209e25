"""A static scan of a source tree's imports: every import statement, relative, lazy or through importlib.

Used by test_layering.py on the real tree and on planted violations, so the
check is shown to fail where it must. Pure functions over a root directory;
the rules that judge what is found live in layering_rules.py.

Besides import statements and calls of importlib.import_module / __import__
(resolved when the name is a literal), the scan records every *indirect*
route to a module it cannot follow: the import machinery itself (importlib
other than importlib.resources, imp, runpy, pkgutil, zipimport, builtins),
the names of import functions used as values or strings (so
`getattr(importlib, "import_module")(...)` is seen), and exec, eval and
compile of source text.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

IMPORT_FUNCTIONS = frozenset({"import_module", "__import__"})
MACHINERY = frozenset({"importlib", "imp", "runpy", "pkgutil", "zipimport", "builtins"})
MACHINERY_ALLOWED = frozenset({"importlib.resources"})  # package data, not modules
SOURCE_RUNNERS = frozenset({"exec", "eval", "compile"})


@dataclass(frozen=True)
class Import:
    """One import found in `module`: the absolute name it resolves to, where, and whether it is lazy.

    `target` is "?" for a computed name; `indirect` says how an import the
    scan cannot follow was made ("" for an import statement or a literal call).
    """

    module: str
    target: str
    line: int
    lazy: bool  # inside a function body: hidden from a module-level reading of the file
    indirect: str = ""


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve_relative(module: str, is_package: bool, level: int, name: str | None) -> str:
    base = module.split(".") if is_package else module.split(".")[:-1]
    if level - 1 > len(base):
        return name or ""
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([name] if name else []))


def _called_name(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return None


def _literal_call(node: ast.Call) -> str | None:
    """The module importlib.import_module("x") / __import__("x") names: "x", or "?" when computed."""
    if _called_name(node.func) not in IMPORT_FUNCTIONS:
        return None
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return "?"


def _indirect(node: ast.AST, parent: ast.AST | None) -> str:
    """How `node` reaches a module the scan cannot name, or "" when it does not."""
    called = isinstance(parent, ast.Call) and parent.func is node
    if isinstance(node, ast.Name | ast.Attribute):
        name = node.id if isinstance(node, ast.Name) else node.attr
        if name in IMPORT_FUNCTIONS and not called:
            return f"{name} used as a value"
        if isinstance(node, ast.Name) and name in SOURCE_RUNNERS and called:
            return f"{name}() of source text"
    if isinstance(node, ast.Constant) and node.value in IMPORT_FUNCTIONS | {"exec", "eval"}:
        return f"the name {node.value!r} as a string"
    return ""


def _statement_imports(module: str, is_package: bool, node: ast.AST) -> list[tuple[str, str]]:
    """(target, indirect) for an import statement; the machinery modules are marked indirect."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = _resolve_relative(module, is_package, node.level, node.module) if node.level else node.module or ""
        names = [base] + [f"{base}.{a.name}" for a in node.names]
    else:
        return []
    found = []
    for name in names:
        machinery = name.split(".")[0] in MACHINERY and not any(
            name == m or name.startswith(m + ".") for m in MACHINERY_ALLOWED
        )
        # `from importlib import resources` names importlib itself too: only its members count.
        if machinery and isinstance(node, ast.ImportFrom) and name == names[0] and len(names) > 1:
            machinery = False
        found.append((name, "import machinery" if machinery else ""))
    return found


def scan_file(root: Path, path: Path) -> list[Import]:
    module = module_name(root, path)
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            line = getattr(child, "lineno", getattr(node, "lineno", 0))
            for target, how in _statement_imports(module, is_package, child):
                found.append(Import(module, target, line, inner, how))
            if isinstance(child, ast.Call) and (target := _literal_call(child)) is not None:
                found.append(Import(module, target, line, inner, "computed module name" if target == "?" else ""))
            how = _indirect(child, node)
            if how:
                found.append(Import(module, "?", line, inner, how))
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def package_files(root: Path, package: str) -> list[Path]:
    base = root / package.replace(".", "/")
    return sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]


def scan_tree(root: Path, packages: list[str]) -> list[Import]:
    """Every import in the .py files of `packages` (dotted names of directories or modules under root)."""
    found: list[Import] = []
    for package in packages:
        for path in package_files(root, package):
            if path.is_file():
                found.extend(scan_file(root, path))
    return found


def tree_modules(root: Path, packages: list[str]) -> set[str]:
    return {module_name(root, p) for package in packages for p in package_files(root, package) if p.is_file()}


def is_third_party(target: str, ours: set[str]) -> bool:
    top = target.split(".")[0]
    return bool(top) and top not in ours and top not in sys.stdlib_module_names


def resolve(target: str, modules: set[str]) -> str | None:
    """The module of ours that `target` names (an attribute or submodule is cut back to its module), or None."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target or None


def module_cycles(imports: list[Import], modules: set[str]) -> list[list[str]]:
    """Cycles in the graph of imports between `modules` (lazy imports included)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        target = resolve(imp.target, modules)
        if target and imp.module in graph and target != imp.module:
            # A package's own __init__ importing its submodules is not a cycle of layers.
            if not target.startswith(imp.module + "."):
                graph[imp.module].add(target)
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                cycles.append(stack[stack.index(nxt) :] + [nxt])
            elif nxt not in state:
                walk(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return cycles
