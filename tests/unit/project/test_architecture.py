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
    "project": {*CORE, "containers"},
    "cli": {*CORE, "analysis", "jobs", "containers", "testbed", "remote", "project"},
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


# --- cycles between modules, inside a package too ------------------------------------------------


def module_name(path: Path, package: Path) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def top_level_imports(path: Path, known: set[str]) -> set[str]:
    """The package's modules that PATH imports when it is imported: statements of the module's own body
    (under an `if` or `try` there too). Imports inside a function or class body are lazy: they run when
    called, after both modules are loaded, so they cannot make an import cycle and are left out; so are
    `if TYPE_CHECKING:` blocks, which never run."""
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    visit(node.body)
                visit(node.orelse)
            elif isinstance(node, ast.Try):
                for block in (node.body, node.orelse, node.finalbody, *(h.body for h in node.handlers)):
                    visit(block)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.startswith("orchestrator"):
                for alias in node.names:  # `from pkg import module` imports that module; `from module import name` the module
                    found.add(f"{node.module}.{alias.name}" if f"{node.module}.{alias.name}" in known else node.module)
            elif isinstance(node, ast.Import):
                found.update(a.name for a in node.names if a.name.startswith("orchestrator"))

    visit(ast.parse(path.read_text(), str(path)).body)
    return found & known


def import_cycles(package: Path) -> list[list[str]]:
    """Every import cycle among the modules under PACKAGE (Tarjan's strongly connected components)."""
    paths = {module_name(p, package): p for p in sorted(package.rglob("*.py"))}
    graph = {name: sorted(top_level_imports(path, set(paths)) - {name}) for name, path in paths.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def strong(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while (w := stack.pop()) != v:
                component.append(w)
            if component:
                cycles.append(sorted([v, *component]))

    for v in graph:
        if v not in index:
            strong(v)
    return cycles


def test_no_import_cycle_between_modules_even_inside_a_package():
    assert import_cycles(PACKAGE) == []


def test_the_cycle_finder_sees_a_cycle_inside_a_package(tmp_path):
    pkg = tmp_path / "orchestrator" / "cli"
    pkg.mkdir(parents=True)
    (tmp_path / "orchestrator" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from orchestrator.cli import b\n")
    (pkg / "b.py").write_text("from orchestrator.cli.a import x\n")
    (pkg / "c.py").write_text("def f():\n    from orchestrator.cli import a\n")  # lazy: no cycle with a
    assert import_cycles(tmp_path / "orchestrator") == [["orchestrator.cli.a", "orchestrator.cli.b"]]
