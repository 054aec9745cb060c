"""The names docstrings and comments refer to resolve: every Sphinx-style reference
(:mod:`x`, :func:`x`, :class:`x`, :meth:`x`, :data:`x`, :attr:`x`, :exc:`x`) in orchestrator/ and
experiments/ names something that exists, so a rename or a split leaves no stale pointer behind.
A name resolves from the module's own namespace (what it imports or defines, and the members of
its classes: a method's docstring names its siblings plainly), else as an absolute dotted path,
else relative to the module's package."""

from __future__ import annotations

import importlib
import re

import pytest
from support import ROOT

ROLE = re.compile(r":(?:mod|func|class|meth|data|attr|exc):`~?([A-Za-z_][\w.]*)`")
# experiments/ imports torch and Lightning: checked where the training extra is installed.
PACKAGES = ("orchestrator", "experiments")


def references(package: str) -> list[tuple[str, int, str]]:
    found = []
    for path in sorted((ROOT / package).rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [(module, number, m.group(1)) for m in ROLE.finditer(line)]
    return found


def _walk(obj: object, parts: list[str]) -> bool:
    for part in parts:
        if not hasattr(obj, part):
            return False
        obj = getattr(obj, part)
    return True


def _absolute(name: str) -> bool:
    parts = name.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        return _walk(obj, parts[cut:])
    return False


def resolves(module: str, name: str) -> bool:
    mod = importlib.import_module(module)
    if _walk(mod, name.split(".")):
        return True
    classes = [obj for obj in vars(mod).values() if isinstance(obj, type) and obj.__module__ == module]
    if any(_walk(cls, name.split(".")) for cls in classes):
        return True
    package = module if hasattr(mod, "__path__") else module.rpartition(".")[0]
    return _absolute(name) or _absolute(f"{package}.{name}") or _absolute(f"{package.rpartition('.')[0]}.{name}")


@pytest.mark.parametrize("package", PACKAGES)
def test_every_reference_in_a_docstring_or_comment_resolves(package):
    if package == "experiments":
        pytest.importorskip("torch")
    stale = [f"{module}:{line}: {name}" for module, line, name in references(package) if not resolves(module, name)]
    assert not stale, "references to names that do not exist:\n  " + "\n  ".join(stale)


# A dotted name of this package in prose: `orchestrator.jobs.ledger`, or what `python -m pydoc X` is told
# to show. Help texts and pages point readers at modules; a rename leaves such a pointer stale.
DOTTED = re.compile(r"(?:pydoc\s+|`)(orchestrator(?:\.[A-Za-z_]\w*)+)")


def dotted_names() -> list[tuple[str, str]]:
    found = []
    files = [*sorted((ROOT / "orchestrator").rglob("*.py")), *sorted((ROOT / "docs").rglob("*.md")), ROOT / "README.md"]
    for path in files:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            found += [(f"{path.relative_to(ROOT)}:{number}", m.group(1).rstrip(".")) for m in DOTTED.finditer(line)]
    return found


def test_every_module_named_in_help_texts_and_docs_exists():
    """`orchestrator.X` is also how the pages name a setting of params.yaml's orchestrator section."""
    import dataclasses

    from orchestrator.config.params import Settings

    settings = {f"orchestrator.{field.name}" for field in dataclasses.fields(Settings)}
    stale = [f"{where}: {name}" for where, name in dotted_names() if name not in settings and not _absolute(name)]
    assert not stale, "dotted names of modules (or settings) that do not exist:\n  " + "\n  ".join(stale)
