"""Files a staged job needs that its stage does not declare: what its command names, and what its
Python programs import from the project, refused with the dep lines that fix it."""

from __future__ import annotations

import dataclasses

import pytest

from orchestrator.config import params, profile
from orchestrator.config.profile_schema import Environment
from orchestrator.errors import PlanError
from orchestrator.pipeline.runargs import JobSpec
from orchestrator.scripts import imports, staged_deps
from orchestrator.scripts.plan import make_plan

SCRIPT = "experiments/scripts/evaluate.py"
CMD = ("python", SCRIPT, "--pipeline-params-path", "experiments/configs/eval.yaml", "--output-path", "data/out", "--retrains", "1")


def plan_for(workspace, *, cluster="lumi", image="lumi", inputs=(), outputs=(), item="bench@x", wdir="", form=None, command=CMD, **kw):
    loaded = kw.pop("loaded", None) or profile.load(cluster)
    settings = params.Settings(account="project_465001234", image=image, **kw)
    spec = JobSpec(command=command, nodes=1, gpus_per_node=1)
    return make_plan(spec, item, wdir, loaded, settings, str(workspace), form, inputs=inputs, outputs=outputs)


def files(root, *paths, text="x = 1\n"):
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)


def undeclared(*plans, cluster="lumi"):
    return staged_deps.undeclared(plans, profile.load(cluster).profile)


# --- what the command imports ------------------------------------------------------------------


def helper_project(root):
    files(root, "src/train.py", text="import json\nfrom utils import sigmoid\n")
    files(root, "src/utils.py", text="import math\n\ndef sigmoid(x):\n    return 1 / (1 + math.exp(-x))\n")


def test_an_undeclared_helper_module_names_the_file_and_the_fix(tmp_path):
    helper_project(tmp_path)
    (problem,) = undeclared(plan_for(tmp_path, command=("python", "src/train.py"), inputs=("src/train.py", "params.yaml")))
    assert problem == (
        "stage bench: on lumi the job runs from a copy of its stage's deps and outs on fast storage (storage.workdir_root), "
        "and it would lack src/utils.py (imported by src/train.py): add them to the stage's deps in dvc.yaml, "
        "e.g. `deps: [src/train.py, src/utils.py]`, or the folder that holds them: `deps: [src]`"
    )
    assert undeclared(plan_for(tmp_path, command=("python", "src/train.py"), inputs=("src",))) == []
    assert undeclared(plan_for(tmp_path, command=("python", "src/train.py"), inputs=("src/train.py", "src/utils.py"))) == []


def test_require_refuses_with_one_plan_error(tmp_path):
    helper_project(tmp_path)
    plan = plan_for(tmp_path, command=("python3", "-u", "src/train.py", "0.1"), inputs=("src/train.py",))
    with pytest.raises(PlanError) as caught:
        staged_deps.require([plan], profile.load("lumi").profile, "cannot submit to lumi")
    assert caught.value.exit_code == 2 and "src/utils.py (imported by src/train.py)" in caught.value.problems[0]


def test_a_module_run_with_dash_m_is_resolved_from_the_working_directory(tmp_path):
    files(tmp_path, "pkg/__init__.py", text='"""Docs only."""\n')
    files(tmp_path, "pkg/train.py", text="from . import helpers\nfrom .models.net import Net\nimport pkg.data as data\n")
    files(tmp_path, "pkg/helpers.py", "pkg/data.py", "pkg/models/net.py", "pkg/unused.py")
    files(tmp_path, "pkg/models/__init__.py", text="from .net import Net  # code: a copy without it imports otherwise\n")
    (problem,) = undeclared(plan_for(tmp_path, command=("python", "-m", "pkg.train"), inputs=("pkg/train.py",)))
    listed = problem.split("it would lack ")[1].split(":")[0]
    assert listed == (
        "pkg/data.py (imported by pkg/train.py), pkg/helpers.py (imported by pkg/train.py), "
        "pkg/models/__init__.py (imported by pkg/train.py), pkg/models/net.py (imported by pkg/train.py)"
    )  # not pkg/__init__.py: it holds no code, and the copy imports pkg as a namespace package the same
    assert undeclared(plan_for(tmp_path, command=("python", "-m", "pkg.train"), inputs=("pkg",))) == []


def test_imports_inside_functions_and_import_module_count(tmp_path):
    files(tmp_path, "train.py", text="import importlib\ndef main():\n    import late\n    importlib.import_module('plugin')\n")
    files(tmp_path, "late.py", "plugin.py")
    (problem,) = undeclared(plan_for(tmp_path, command=("python", "train.py"), inputs=("train.py",)))
    assert "late.py (imported by train.py), plugin.py (imported by train.py)" in problem


def test_what_the_project_does_not_hold_is_not_asked_for(tmp_path):
    # The standard library, installed packages, a name the interpreter has built in (a time.py
    # beside the script is never what `import time` gets), a module that does not exist, a file
    # that does not parse.
    files(tmp_path, "train.py", text="import os, numpy, time, nowhere\ntry:\n    import optional\nexcept ImportError:\n    pass\n")
    files(tmp_path, "time.py")
    files(tmp_path, "broken.py", text="def (:\n")
    assert undeclared(plan_for(tmp_path, command=("python", "train.py"), inputs=("train.py",))) == []
    assert undeclared(plan_for(tmp_path, command=("python", "broken.py"), inputs=("broken.py",))) == []


def test_the_search_path_is_the_jobs(tmp_path):
    # A script's folder is first on sys.path: src/utils.py is `utils` for src/train.py, and
    # `src.utils` only where the container puts the run dir on PYTHONPATH (scripts.container_exec).
    files(tmp_path, "src/train.py", text="from src.utils import f\n")
    files(tmp_path, "src/utils.py")
    on_host = plan_for(tmp_path, cluster="testbed", image="none", command=("python", "src/train.py"), inputs=("src/train.py",))
    assert on_host.container is None and undeclared(on_host, cluster="testbed") == []  # fails on the cluster as here
    in_container = plan_for(tmp_path, command=("python", "src/train.py"), inputs=("src/train.py",))
    assert in_container.container is not None and "src/utils.py (imported by src/train.py)" in undeclared(in_container)[0]
    # The profile's own PYTHONPATH: the staged copy's folders, relative ones from the run dir.
    files(tmp_path, "lib/extra.py")
    files(tmp_path, "src/train.py", text="import extra\n")
    loaded = profile.load("testbed")
    for entry in ("${ORCH_STAGE}/lib", "lib", f"{tmp_path}/lib"):
        env = Environment(variables={"PYTHONPATH": f"/opt/site:{entry}"})
        with_path = dataclasses.replace(loaded, profile=dataclasses.replace(loaded.profile, environment=env))
        plan = plan_for(tmp_path, loaded=with_path, image="none", command=("python", "src/train.py"), inputs=("src/train.py",))
        (problem,) = staged_deps.undeclared([plan], with_path.profile)
        assert "lib/extra.py (imported by src/train.py)" in problem, entry


def test_a_matrix_of_one_script_walks_its_imports_once(tmp_path, monkeypatch):
    helper_project(tmp_path)
    parsed = []
    real = imports.Imports._imports
    monkeypatch.setattr(imports.Imports, "_imports", lambda self, file: parsed.append(file) or real(self, file))
    command = ("python", "src/train.py")
    plans = [plan_for(tmp_path, item=f"bench@{i}", command=(*command, str(i)), inputs=("src/train.py",)) for i in range(300)]
    (problem,) = undeclared(*plans)
    assert problem.startswith("stage bench (all 300 items): ")
    assert sorted(parsed) == [str(tmp_path / "src/train.py"), str(tmp_path / "src/utils.py")]


def test_programs_a_command_runs_with_python():
    programs = imports.programs
    assert programs(("python", "-u", "-X", "dev", "-m", "pkg.mod", "--lr", "1"), ()) == [imports.Program("module", "pkg.mod")]
    assert programs(("/usr/bin/python3.11", "-mpkg"), ()) == [imports.Program("module", "pkg")]
    assert programs(("torchrun", "--nproc-per-node", "2", "train.py"), ("train.py",)) == [imports.Program("script", "train.py")]
    assert programs(("python", "-c", "import x", "-m", "y"), ()) == []
    assert programs(("python", "train.py", "-m", "y"), ("train.py",)) == [imports.Program("script", "train.py")]


# --- what the command names --------------------------------------------------------------------


def test_an_undeclared_file_the_command_names_is_refused_with_the_dep_line(tmp_path):
    files(tmp_path, SCRIPT)
    (problem,) = undeclared(plan_for(tmp_path))
    assert problem.startswith("stage bench: on lumi the job runs from a copy of its stage's deps and outs on fast storage")
    assert f"it would lack {SCRIPT} (named by the command):" in problem
    assert f"e.g. `deps: [{SCRIPT}]`, or the folder that holds them: `deps: [experiments/scripts]`" in problem


def test_a_file_or_a_folder_above_it_declared_is_enough(tmp_path):
    files(tmp_path, SCRIPT, "experiments/configs/eval.yaml")
    (both,) = undeclared(plan_for(tmp_path))
    assert f"lack experiments/configs/eval.yaml (named by the command), {SCRIPT} (named by the command):" in both
    assert undeclared(plan_for(tmp_path, inputs=("experiments",))) == []
    (left,) = undeclared(plan_for(tmp_path, inputs=(SCRIPT,)))
    assert "it would lack experiments/configs/eval.yaml (named by the command):" in left
    # A folder some deps are inside is partly in the copy: which part the command reads is not known.
    assert undeclared(plan_for(tmp_path, inputs=(SCRIPT, "experiments/configs/eval.yaml"))) == []
    # Outputs are staged in too; inputs read in place count as declared.
    files(tmp_path, "data/out")
    assert undeclared(plan_for(tmp_path, inputs=("experiments",), outputs=("data/out",))) == []
    in_place = plan_for(tmp_path, inputs=("experiments",), outputs=("data/out",), read_in_place=("experiments",))
    assert in_place.staging.in_place == ("experiments",) and undeclared(in_place) == []


def test_only_words_that_are_existing_relative_paths_inside_the_project(tmp_path):
    files(tmp_path / "project", "data/out")
    (tmp_path / "outside.txt").write_text("x")
    command = ("python", "-m", "json.tool", "--data", "missing/file", "/etc/hostname", "../outside.txt", ".", "--x=data/out")
    assert undeclared(plan_for(tmp_path / "project", command=command)) == []


def test_words_are_paths_from_the_stages_wdir_and_deps_are_written_from_it(tmp_path):
    files(tmp_path, "sub/train.py", "top.py")
    plan = plan_for(tmp_path, wdir="sub", command=("python", "train.py", "../top.py"), inputs=("sub/train.py",))
    (problem,) = undeclared(plan)
    assert "it would lack top.py (named by the command)" in problem and "e.g. `deps: [train.py, ../top.py]`" in problem


def test_only_staged_jobs_are_looked_at(tmp_path):
    files(tmp_path, SCRIPT)
    assert undeclared(plan_for(tmp_path, form="srun")) == []  # runs in the workspace itself
    assert undeclared(plan_for(tmp_path, inputs=None)) == []  # an ad-hoc job: deps unknown
    assert undeclared(plan_for(tmp_path, cluster="local", image="none"), cluster="local") == []  # no staging here
    assert undeclared(plan_for(tmp_path, cluster="testbed", image="none"), cluster="testbed") != []  # a Slurm with staging
    local_staged = plan_for(tmp_path, cluster="local", image="none", stage_locally=True)
    (problem,) = undeclared(local_staged, cluster="local")
    assert problem.startswith("stage bench: with orchestrator.stage_locally the job runs from a copy of its stage's deps and outs")


def test_one_problem_per_stage_and_missing_files_naming_the_stage_or_its_items(tmp_path):
    files(tmp_path, SCRIPT, "a.yaml")
    plans = [plan_for(tmp_path, item=f"bench@{i}") for i in range(5)] + [plan_for(tmp_path, item="other@0")]
    plans += [plan_for(tmp_path, item=f"third@{i}", command=("python", "a.yaml" if i == 2 else "b.yaml")) for i in range(3)]
    first, second, third = undeclared(*plans)
    assert first.startswith("stage bench (all 5 items): on lumi")
    assert second.startswith("stage other: on lumi")
    assert third.startswith("third@2: on lumi")  # not every item of the stage names it
