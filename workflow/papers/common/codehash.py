"""The version of the code a stage runs, for Snakemake's rerun triggers.

Every rule runs the same script (workflow/scripts/call.py), so Snakemake's own `code` trigger cannot
see an edit to a paper's module. The Snakefile therefore gives each rule a parameter ``code``: a hash
of what the rule's function (``params.call``) can execute, found statically:

* in the function's own module, the top-level definitions (functions, classes, constants) that the
  function reaches by name, transitively -- an edit elsewhere in that module does not count;
* every module of ``papers`` or ``kernels`` those definitions use (through ``import`` / ``from ...
  import``), as whole files, and the modules those import in turn.

So an edit reruns the stages whose code it touches and what follows them, and nothing else; a copy
of the checkout (new timestamps, same code) reruns nothing. Dynamic imports are not followed.
"""
from __future__ import annotations

import ast
import functools
import hashlib
from pathlib import Path

OURS = ("papers", "kernels")


# Where our packages live, found from this file (no import, so hashing runs nothing): papers in
# workflow/, kernels at the repository's root.
ROOTS = (("papers", Path(__file__).resolve().parents[2]), ("kernels", Path(__file__).resolve().parents[3]))


@functools.lru_cache(maxsize=None)
def _module_file(name: str, roots=ROOTS) -> Path | None:
    """The source file of our module `name` (a .py file or a package's __init__.py), or None."""
    root = dict(roots).get(name.split(".")[0])
    if root is None:
        return None
    base = root.joinpath(*name.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _parse(path: Path) -> tuple[str, ast.Module]:
    return _parse_cached(path, path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _parse_cached(path: Path, mtime_ns: int) -> tuple[str, ast.Module]:
    text = path.read_text()
    return text, ast.parse(text)


def _is_ours(name: str) -> bool:
    return name.split(".")[0] in OURS


def _imports(tree: ast.Module, module: str, roots=ROOTS) -> dict[str, str]:
    """{local name: our module it refers to} for the module's imports of papers / kernels."""
    names = {}
    is_package = _module_file(module, roots) is not None and _module_file(module, roots).name == "__init__.py"
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if _is_ours(a.name):
                    names[(a.asname or a.name).split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative import
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            if not _is_ours(base):
                continue
            for a in node.names:
                sub = f"{base}.{a.name}"
                names[a.asname or a.name] = sub if _module_file(sub, roots) else base
    return names


def _top_level(tree: ast.Module) -> dict[str, ast.AST]:
    defs = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            defs[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        defs[n.id] = node
    return defs


@functools.lru_cache(maxsize=None)
def _imports_cached(module: str, roots, mtime_ns: int) -> tuple[tuple[str, str], ...]:
    _, tree = _parse(_module_file(module, roots))
    return tuple(sorted(_imports(tree, module, roots).items()))


def _imports_of(module: str, roots=ROOTS) -> dict[str, str]:
    return dict(_imports_cached(module, roots, _module_file(module, roots).stat().st_mtime_ns))


@functools.lru_cache(maxsize=None)
def _top_level_cached(path: Path, mtime_ns: int) -> dict:
    return _top_level(_parse(path)[1])


def _module_imports(module: str, roots, mtime_ns: int) -> tuple[str, ...]:
    return tuple(sorted(set(_imports_of(module, roots).values())))


def _whole_module_closure(module: str, seen: set[str], roots=ROOTS) -> None:
    path = _module_file(module, roots)
    if module in seen or path is None:
        return
    seen.add(module)
    for target in _module_imports(module, roots, path.stat().st_mtime_ns):
        _whole_module_closure(target, seen, roots)


def code_version(call: str, roots=ROOTS) -> str:
    """A short hash of what ``"papers.<slug>.<module>:<function>"`` can run (see the module doc).

    `roots`: ((package, folder that holds it), ...); the default is this checkout (tests pass a copy).
    """
    module, _, func = call.partition(":")
    path = _module_file(module, roots)
    if path is None:
        raise ValueError(f"code_version: no module {module!r} (params.call = {call!r})")
    text, tree = _parse(path)
    lines = text.splitlines()
    defs, imported = _top_level_cached(path, path.stat().st_mtime_ns), _imports_of(module, roots)
    if func not in defs:
        raise ValueError(f"code_version: {path} defines no {func!r} (params.call = {call!r})")
    reached, todo, modules = set(), [func], set()
    while todo:
        name = todo.pop()
        if name in reached:
            continue
        reached.add(name)
        for n in ast.walk(defs[name]):
            ident = n.id if isinstance(n, ast.Name) else None
            if ident in defs and ident not in reached:
                todo.append(ident)
            elif ident in imported:
                modules.add(imported[ident])
    closure: set[str] = set()
    for m in modules:
        _whole_module_closure(m, closure, roots)
    h = hashlib.sha256()
    for name in sorted(reached):
        node = defs[name]  # its source lines, decorators included (get_source_segment is slow)
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        h.update("\n".join(lines[first - 1: node.end_lineno]).encode())
    for m in sorted(closure - {module}):
        h.update(m.encode() + _module_file(m, roots).read_bytes())
    return h.hexdigest()[:16]
