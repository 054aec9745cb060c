"""Every shipped stage that runs a module of experiments/ declares, as DVC deps, every file of
experiments/ that module imports (transitively), as `render --check` finds them for a staged job
(orchestrator.scripts.staged_deps). A job that stages its inputs on fast storage
copies its deps and nothing else, so an undeclared module is missing there ("No module named
..."); and a change to it would not make the stage stale."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from support import ROOT

from orchestrator.scripts import imports

PACKAGE = "experiments"


def closure(module: str) -> set[Path]:
    """The project files ``python -m module`` imports, as the staging check finds them
    (orchestrator.scripts.imports: the working directory first on sys.path)."""
    found = imports.Imports(str(ROOT)).closure(imports.Program("module", module), [""])
    return {ROOT / needed.path for needed in found}


def stages() -> list[tuple[str, str, list[str]]]:
    """(stage, module its cmd runs, deps) of every dvc.yaml stage running `python -m experiments....`."""
    found = []
    for name, stage in yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"].items():
        match = re.search(r"python -m (experiments(?:\.\w+)+)", stage["cmd"])
        if match:
            found.append((name, match.group(1), [d for d in stage.get("deps", []) if isinstance(d, str)]))
    return found


def test_the_shipped_pipeline_has_stages_running_experiments():
    assert {name for name, _, _ in stages()} >= {"benchmark", "lm", "lm-tokenizer", "lm-shard"}


@pytest.mark.parametrize(("stage", "module", "deps"), stages(), ids=[s[0] for s in stages()])
def test_a_stage_declares_every_module_it_imports(stage, module, deps):
    declared = [ROOT / d for d in deps]
    # A package's __init__.py without code is not asked for: a staged copy without it imports
    # the folder as a namespace package, the same (the next test keeps them free of code).
    needed = closure(module)
    assert needed, f"stage {stage} runs {module}, which imports nothing of the project: the closure was not found"
    missing = sorted(str(p.relative_to(ROOT)) for p in needed if not any(p == d or d in p.parents for d in declared))
    assert not missing, f"stage {stage} runs {module}, which imports {missing}: not in its deps"


def test_the_packages_init_files_hold_no_code():
    for init in (ROOT / PACKAGE).rglob("__init__.py"):
        body = ast.parse(init.read_text()).body
        docs_only = all(
            (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)) or (isinstance(n, ast.ImportFrom) and n.module == "__future__")
            for n in body
        )
        assert docs_only, f"{init.relative_to(ROOT)} runs code: a staged copy without it would import differently"
