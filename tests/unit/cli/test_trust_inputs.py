"""Issue 33: values from the command line and files from the disk or a revision are checked
where they enter; each bad one is one message naming it, exit 2, nothing written, no traceback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from support import GIT_ENV, fabricate, invoke, with_git
from test_input_errors import one_item, user_error

# --- numbers: finite and in range --------------------------------------------------------------------


@pytest.mark.parametrize("option", ["--to", "--pue", "--carbon-intensity"])
@pytest.mark.parametrize("value", ["nan", "inf", "1e400"])
def test_report_numbers_must_be_finite(tmp_path, option, value):
    project = fabricate(tmp_path / "p")
    output = user_error(invoke("report", "--project", str(project), "--no-accounting", option, value), option, "is not a finite number")
    assert output.count("Error") == 1 and not (project / "reports").exists()


# --- a revision whose pipeline DVC cannot read -------------------------------------------------------


def commit(project: Path, message: str) -> None:
    git = ["git", "-c", "commit.gpgsign=false", "commit", "-q", "-a", "-m", message]
    subprocess.run(git, cwd=project, check=True, env={**os.environ, **GIT_ENV})


@pytest.fixture(scope="module")
def revisions(tmp_path_factory) -> Path:
    """A project with tags: `good`, `broken-params` (params.yaml not YAML) and `list-lock` (dvc.lock a list)."""
    project = with_git(fabricate(tmp_path_factory.mktemp("revisions") / "p"), "good")
    tag = ["git", "tag"]
    subprocess.run([*tag, "good"], cwd=project, check=True)
    good_params = (project / "params.yaml").read_text()
    (project / "params.yaml").write_text(good_params + "broken: [unclosed\n")
    commit(project, "broken params")
    subprocess.run([*tag, "broken-params"], cwd=project, check=True)
    (project / "params.yaml").write_text(good_params)
    (project / "dvc.lock").write_text("[1, 2]\n")
    subprocess.run(["git", "add", "dvc.lock"], cwd=project, check=True)
    commit(project, "a lock that is not a mapping")
    subprocess.run([*tag, "list-lock"], cwd=project, check=True)
    (project / "dvc.lock").unlink()
    commit(project, "no lock")
    return project


@pytest.mark.parametrize(
    ("rev", "fragments"),
    [
        ("broken-params", ["'params.yaml', YAML file structure is corrupted", "at line"]),
        ("list-lock", ["dvc.lock: the top level: expected a dictionary"]),
    ],
)
def test_a_revision_whose_pipeline_dvc_cannot_read_is_named_with_its_file(revisions, rev, fragments):
    """DVC's file system says "no such file" for every path of such a revision: the report
    said the revision had no dvc.yaml, and profile-diff that it had no operators.json."""
    output = user_error(invoke("report", "--project", str(revisions), "--no-accounting", "--rev", rev), rev, *fragments)
    assert "no dvc.yaml" not in output and not (revisions / "reports").exists()
    operators = "results/benchmark/pydoc-topics/tiny/1x1/profile/operators.json"
    output = user_error(invoke("profile-diff", "--project", str(revisions), f"{rev}:{operators}", f"good:{operators}"), rev, *fragments)
    assert "has no" not in output


# --- params.yaml that DVC could not resolve in any memory -------------------------------------------


def test_render_refuses_a_billion_laughs_params_file(tmp_path):
    """Nine lines whose aliases stand for a billion values: DVC's resolution ran out of memory."""
    project = one_item(tmp_path / "p")
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    with (project / "params.yaml").open("a") as f:
        f.write("\n".join(lines) + "\n")
    user_error(invoke("render", "--project", str(project)), "params.yaml is refused", "aliases (*name) expand it past 1,000,000 values")
    assert not (project / ".orchestrator/scripts").exists()
