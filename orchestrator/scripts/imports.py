"""What a Python program imports from its project: the files a copy of the project must hold
for the program to start.

Static: each source is parsed (:mod:`ast`), never run, and each import is resolved as the
interpreter resolves it, by :class:`importlib.machinery.PathFinder` over the folders the
job's ``sys.path`` will hold (the script's folder, the working directory, PYTHONPATH). Only
those folders inside the project are searched: a name found in none of them comes from the
standard library or an installed package, which no copy of the project needs. Imports in
function bodies and ``try`` blocks count (they run, or may), and so does
``importlib.import_module("literal")``; an import whose name is computed at run time cannot
be known, nor can the data files a program opens.

Each file is parsed once and each program's closure walked once per search path
(:class:`Imports` keeps both), so a matrix of 1,000 items of one script walks it once.
"""

from __future__ import annotations

import ast
import importlib.machinery
import os
import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

# A name the interpreter finds before sys.path (compiled in, or frozen into it): a project
# file of that name (a `time.py` beside the script) is never what the import gets.
_BEFORE_PATH = (importlib.machinery.BuiltinImporter, importlib.machinery.FrozenImporter)
_PYTHON_OPTIONS_WITH_VALUE = ("-W", "-X", "--check-hash-based-pycs")


@dataclass(frozen=True)
class Program:
    """What a command runs with Python: a script (its path, relative to the project) or a
    module (``python -m NAME``)."""

    kind: Literal["script", "module"]
    name: str


@dataclass(frozen=True)
class Needed:
    """A project file a program imports: its path relative to the project, and the file
    (script or module) whose import brings it in."""

    path: str
    by: str


def programs(command: Sequence[str], is_script: Iterable[str]) -> list[Program]:
    """The programs ``command`` runs with Python: ``python [options] -m NAME`` (or
    ``torchrun ... -m NAME``), and every word among ``is_script`` (the words that are ``.py``
    files of the project, as paths relative to it: ``python train.py``, ``torchrun
    train.py`` and ``accelerate launch train.py`` alike)."""
    found = [Program("script", path) for path in dict.fromkeys(is_script)]
    for i, word in enumerate(command):
        if _is_launcher(word) and (module := _module_after(command[i + 1 :])):
            found.append(Program("module", module))
    return found


def _is_launcher(word: str) -> bool:
    name = posixpath.basename(word)
    return name.startswith("python") or name == "torchrun"


def _module_after(words: Sequence[str]) -> str | None:
    """The module of ``-m NAME`` among a launcher's options, before its first argument."""
    i = 0
    while i < len(words):
        word = words[i]
        if word == "-m" or word == "--module":
            return words[i + 1] if i + 1 < len(words) else None
        if word.startswith("-m") and not word.startswith("--"):
            return word[2:]
        if word in _PYTHON_OPTIONS_WITH_VALUE:
            i += 2
            continue
        if not word.startswith("-") or word in ("-", "-c"):
            return None  # a script, stdin or a command string: no module
        i += 1
    return None


class Imports:
    """The project files Python programs import, from one project folder; parses and walks
    are remembered for every later program."""

    def __init__(self, root: str) -> None:
        self.root = os.path.realpath(root)
        self._parsed: dict[str, tuple[tuple[str, tuple[str, ...], int], ...]] = {}
        self._closures: dict[tuple[Program, tuple[str, ...]], tuple[Needed, ...]] = {}

    def closure(self, program: Program, search: Sequence[str]) -> tuple[Needed, ...]:
        """The project files ``program`` imports, directly or through others, resolved over
        ``search`` (folders relative to the project, in sys.path's order); the script itself
        is not among them."""
        key = (program, tuple(search))
        if key not in self._closures:
            self._closures[key] = self._walk(program, [os.path.join(self.root, s) for s in search])
        return self._closures[key]

    # --- the walk -------------------------------------------------------------------------

    def _walk(self, program: Program, path: list[str]) -> tuple[Needed, ...]:
        found: dict[str, str] = {}  # file -> the file whose import brought it in
        seen: set[str] = set()
        todo: list[tuple[str, str, str]] = []  # (file, its module's name, its package)
        if program.kind == "script":
            todo.append((os.path.join(self.root, program.name), "__main__", ""))
        else:
            for name in (program.name, f"{program.name}.__main__"):  # a package runs as its __main__
                self._resolve(name, path, program.name, found, todo)
        while todo:
            file, module, package = todo.pop()
            if file in seen:
                continue
            seen.add(file)
            by = self._relative(file) or file
            for name, fromlist, level in self._imports(file):
                absolute = _absolute(name, level, package)
                if absolute is None:
                    continue
                if self._resolve(absolute, path, by, found, todo):
                    for sub in fromlist:  # `from pkg import module`: a submodule, or just a name in pkg
                        self._resolve(f"{absolute}.{sub}", path, by, found, todo)
        needed = {f: by for f, by in found.items() if not _docs_only_init(f, found)}
        return tuple(Needed(rel, by) for f, by in sorted(needed.items()) if (rel := self._relative(f)) is not None)

    def _resolve(self, name: str, path: list[str], by: str, found: dict[str, str], todo: list[tuple[str, str, str]]) -> bool:
        """Find ``name`` and its packages as the job's interpreter would; each project file
        found is recorded and queued. Whether all of it was found in the project."""
        parts = name.split(".")
        if any(finder.find_spec(parts[0]) is not None for finder in _BEFORE_PATH):
            return False
        locations: list[str] | None = path
        for i in range(len(parts)):
            if locations is None:  # a module, not a package: `parts[i]` is a name in it
                return False
            full = ".".join(parts[: i + 1])
            try:
                spec = importlib.machinery.PathFinder.find_spec(full, locations)
            except (ImportError, ValueError):
                return False
            if spec is None:
                return False
            locations = list(spec.submodule_search_locations) if spec.submodule_search_locations is not None else None
            if spec.has_location and spec.origin and self._relative(spec.origin) is not None:
                found.setdefault(spec.origin, by)
                if spec.origin.endswith(".py"):
                    package = full if locations is not None else full.rpartition(".")[0]
                    todo.append((spec.origin, full, package))
        return True

    def _imports(self, file: str) -> tuple[tuple[str, tuple[str, ...], int], ...]:
        """(module, names from it, level) of every import in ``file``; nothing for a file that
        does not parse (it fails on the cluster as it fails here: not this check's to tell)."""
        if file not in self._parsed:
            try:
                with open(file, "rb") as f:
                    tree = ast.parse(f.read(), file)
            except (OSError, SyntaxError, ValueError):
                tree = ast.Module(body=[], type_ignores=[])
            self._parsed[file] = tuple(_imports_in(tree))
        return self._parsed[file]

    def _relative(self, file: str) -> str | None:
        """``file`` relative to the project; None outside it."""
        rel = os.path.relpath(os.path.realpath(file), self.root)
        return None if rel == ".." or rel.startswith("../") else rel.replace(os.sep, "/")


def _imports_in(tree: ast.AST) -> Iterable[tuple[str, tuple[str, ...], int]]:
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, (), 0
        elif isinstance(node, ast.ImportFrom):
            yield node.module or "", tuple(a.name for a in node.names if a.name != "*"), node.level
        elif isinstance(node, ast.Call) and _is_import_call(node.func) and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and not first.value.startswith("."):
                yield first.value, (), 0


def _is_import_call(func: ast.expr) -> bool:
    """``importlib.import_module(...)``, ``import_module(...)`` or ``__import__(...)``."""
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("import_module", "__import__")


def _absolute(name: str, level: int, package: str) -> str | None:
    """The absolute name of ``from <level dots><name> import``; None where the relative
    import has no package to be relative to (it fails the same everywhere)."""
    if not level:
        return name or None
    parts = package.split(".") if package else []
    if level - 1 > len(parts) or not package:
        return None
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{name}" if name else base


def _docs_only_init(file: str, found: dict[str, str]) -> bool:
    """An ``__init__.py`` that holds no code, of a folder from which other files are needed:
    a copy without it imports that folder as a namespace package, the same (what this check
    asks for is what the job cannot start without, not what a tidy copy would hold)."""
    if os.path.basename(file) != "__init__.py":
        return False
    folder = os.path.dirname(file) + os.sep
    if not any(other.startswith(folder) and other != file for other in found):
        return False
    try:
        with open(file, "rb") as f:
            body = ast.parse(f.read(), file).body
    except (OSError, SyntaxError, ValueError):
        return False
    return all(
        (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) or (isinstance(n, ast.ImportFrom) and n.module == "__future__")
        for n in body
    )
