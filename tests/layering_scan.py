"""A static scan of a source tree's imports: every import statement, relative, lazy or through importlib.

Used by test_layering.py on the real tree and on planted violations, so the
check is shown to fail where it must. Pure functions over a root directory.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

IMPORT_CALLS = {("importlib", "import_module"), (None, "__import__"), (None, "import_module")}


@dataclass(frozen=True)
class Import:
    """One import found in `module`: the absolute name it resolves to, where, and whether it is lazy."""

    module: str
    target: str
    line: int
    lazy: bool  # inside a function body: hidden from a module-level reading of the file


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


def _call_target(node: ast.Call) -> str | None:
    """The literal module name of importlib.import_module("x") / __import__("x"), '?' if not literal."""
    func = node.func
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
        key = (func.value.id, func.attr)
    elif isinstance(func, ast.Name):
        key = (None, func.id)
    else:
        return None
    if key not in IMPORT_CALLS:
        return None
    if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
        return node.args[0].value
    return "?"  # a computed name: the scan cannot tell what it loads, so the caller must refuse it


def scan_file(root: Path, path: Path) -> list[Import]:
    module = module_name(root, path)
    is_package = path.name == "__init__.py"
    found: list[Import] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend(Import(module, a.name, child.lineno, inner) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    base = _resolve_relative(module, is_package, child.level, child.module)
                found.append(Import(module, base, child.lineno, inner))
                found.extend(Import(module, f"{base}.{a.name}", child.lineno, inner) for a in child.names)
            elif isinstance(child, ast.Call):
                target = _call_target(child)
                if target is not None:
                    found.append(Import(module, target, child.lineno, inner))
            visit(child, inner)

    visit(ast.parse(path.read_text(), str(path)), False)
    return found


def scan_tree(root: Path, packages: list[str]) -> list[Import]:
    """Every import in the .py files of `packages` (dotted names of directories or modules under root)."""
    found: list[Import] = []
    for package in packages:
        base = root / package.replace(".", "/")
        files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
        for path in files:
            if path.is_file():
                found.extend(scan_file(root, path))
    return found


def owner(name: str, watched: list[str]) -> str | None:
    for pkg in sorted(watched, key=len, reverse=True):
        if name == pkg or name.startswith(pkg + "."):
            return pkg
    return None


def forbidden_imports(imports: list[Import], watched: list[str], allowed: dict[str, set[str]]) -> list[str]:
    """'module:line imports target' for each import that crosses to a package not allowed below its own."""
    bad = []
    for imp in imports:
        if imp.target == "?":
            bad.append(f"{imp.module}:{imp.line} imports a computed module name")
            continue
        mine, theirs = owner(imp.module, watched), owner(imp.target, watched)
        if mine is None or theirs is None or theirs == mine:
            continue
        if theirs not in allowed.get(mine, set()):
            bad.append(f"{imp.module}:{imp.line} imports {imp.target}")
    return bad


def lazy_imports(imports: list[Import], exempt: set[str]) -> list[str]:
    """'module:line target' for each import made inside a function, outside the exempt packages."""
    return [
        f"{i.module}:{i.line} {i.target}"
        for i in imports
        if i.lazy and not any(i.module == e or i.module.startswith(e + ".") for e in exempt)
    ]


def module_cycles(imports: list[Import], modules: set[str]) -> list[list[str]]:
    """Cycles in the graph of imports between `modules` (lazy imports included)."""
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for imp in imports:
        target = imp.target
        while target and target not in modules:
            target = target.rpartition(".")[0]
        if target and imp.module in graph and target != imp.module:
            # A package's own __init__ importing its submodules is not a cycle of layers.
            if not target.startswith(imp.module + "."):
                graph[imp.module].add(target)
    cycles, state, stack = [], {}, []

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
