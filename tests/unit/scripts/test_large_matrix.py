"""A big matrix is resolved, parsed and planned without keeping per item what items share,
and gives exactly what the one-item paths give."""

from __future__ import annotations

import pytest

from orchestrator.errors import PipelineError
from orchestrator.pipeline import runargs, stages
from orchestrator.scripts import matrix
from orchestrator.scripts.workspace import Workspace
from orchestrator.util.runner import SubprocessRunner

TRICKY = [
    ["-N", "2", "--", "python", "x"],
    ["--partition", "--", "--", "python"],  # the first -- is the partition's value
    ["python", "train.py", "--", "a"],  # the command starts before the --
    ["--", "a", "--", "b"],
    ["-G2", "--bind", "/d", "--", "p", "-N", "3"],
    ["--nodes", "0", "--", "x"],
    ["--time", "1:00", "--"],
    ["--"],
    [],
]


def _outcome(parse, args):
    try:
        return parse(list(args))
    except PipelineError as exc:
        return exc.headline


@pytest.mark.parametrize("args", TRICKY)
def test_options_parsed_once_per_set_read_as_the_parser_reads_each_item(args):
    parse = stages._Parser()
    expected = _outcome(lambda a: runargs.parse_run_args(a, "bad `orchestrator run` arguments"), args)
    assert _outcome(parse, args) == expected
    assert _outcome(parse, args) == expected  # again, from what was kept of the first


def test_items_resolved_one_at_a_time_are_what_dvc_resolves_at_once(project):
    from dvc.dvcfile import ProjectFile
    from dvc.parsing import DataResolver
    from dvc.repo import Repo

    with Repo(str(project)) as repo:
        whole = DataResolver(repo, str(project), ProjectFile(repo, str(project / "dvc.yaml")).contents).resolve()["stages"]
    items = stages.resolve(project)
    assert [i.name for i in items] == list(whole) and len(items) > 3
    assert items == [stages._item(name, data) for name, data in whole.items()]
    assert stages.resolve_one(project, items[3].name) == items[3]


def test_plans_of_one_layout_share_what_they_have_in_common(project):
    rendered = matrix.render_matrix(project, "lumi", SubprocessRunner())
    a, b = [p for p in rendered.plans if p.nodes == 1 and p.tasks_per_node == 8][:2]
    assert a.item != b.item and a.job_name != b.job_name
    shared = [(x, y) for x, y in zip(a.scheduler_args, b.scheduler_args, strict=True) if x == y]
    assert len(shared) == len(a.scheduler_args) - 2 and all(x is y for x, y in shared)  # all but --job-name and --output
    assert all(x is y for x, y in zip(a.env, b.env, strict=True) if x == y)
    assert [x[0] for x, y in zip(a.env, b.env, strict=True) if x != y] == ["ORCH_ITEM", "ORCH_WORKDIR"]
    assert a.workspace is b.workspace and a.command[0] is b.command[0]


def test_workspace_root_is_resolved_once(project):
    ws = Workspace.open(project, "lumi", SubprocessRunner())
    assert ws.absolute_root is ws.absolute_root == str(project.resolve())
