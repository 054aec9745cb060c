"""The package's layers: every import points down, never up or across.

The core (util, slurm, config, pipeline, scripts) is what ``render`` needs and
what a dry run in CI exercises; it must never pull in jobs, containers,
analysis, the testbed or the CLI. Lazy imports inside functions count too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import orchestrator

PACKAGE = Path(orchestrator.__file__).parent
CORE = ("util", "slurm", "config", "pipeline", "scripts")
# What each subsystem may import besides itself and the package's base (errors, __version__).
ALLOWED: dict[str, set[str]] = {
    "util": set(),
    "slurm": {"util"},
    "config": {"util", "slurm"},
    "pipeline": {"util", "slurm", "config"},
    "scripts": {"util", "slurm", "config", "pipeline"},
    "analysis": {*CORE},
    "jobs": {*CORE, "analysis"},
    "containers": {*CORE},
    "testbed": {"util"},
    "remote": {*CORE},
    "cli": {*CORE, "analysis", "jobs", "containers", "testbed", "remote"},
}
BASE = {"errors", "__version__"}


def subsystem(path: Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def imported(path: Path) -> list[tuple[int, str]]:
    """(line, first component under orchestrator.) of every import of the package, lazy ones included."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "orchestrator":
            parts = node.module.split(".")
            if len(parts) > 1:
                found.append((node.lineno, parts[1]))
            else:  # from orchestrator import x
                found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level:
            raise AssertionError(f"{path}:{node.lineno}: relative import; the layers are checked on absolute ones")
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name.split(".")[1]) for a in node.names if a.name.startswith("orchestrator.")]
    return found


def test_every_import_points_down_the_layers():
    modules = sorted(PACKAGE.rglob("*.py"))
    assert len(modules) > 40
    wrong = []
    for path in modules:
        own = subsystem(path)
        if own == "__main__":  # `python -m orchestrator` is the CLI
            continue
        allowed = ALLOWED.get(own)
        for line, target in imported(path):
            if target in BASE or target == own:
                continue
            if allowed is None:  # the base modules import nothing of the package
                wrong.append(f"{path.relative_to(PACKAGE)}:{line}: base module imports {target}")
            elif target not in allowed:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line}: {own} imports {target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_every_subsystem_is_a_package_that_says_what_it_owns():
    packages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert packages == set(ALLOWED), "a package without a layer (add it to ALLOWED), or a layer without a package"
    assert {p.name for p in PACKAGE.glob("*.py")} == {"__init__.py", "__main__.py", "errors.py"}, "modules belong in a subsystem"
    for name in ALLOWED:
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text()))
        assert doc and "import" in doc.lower(), f"orchestrator/{name}/__init__.py must say what it owns and what it may import"


def test_the_checker_sees_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from orchestrator.jobs import ledger\n    import orchestrator.cli.plan\n")
    assert [t for _, t in imported(bad)] == ["jobs", "cli"]
