"""`orchestrator init`: adds to an existing DVC project what it needs, never rewrites what is there."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import invoke

from orchestrator.config import params

DVC_YAML = "stages:\n  train:\n    cmd: python train.py\n"
USER_PARAMS = "# the team's params, formatted their way\ntrain:   {lr: 0.1}   # keep me\nseeds: [1,2]"  # no final newline


def project(tmp_path: Path, params_text: str | None = USER_PARAMS, **more: str) -> Path:
    (tmp_path / "dvc.yaml").write_text(DVC_YAML)
    if params_text is not None:
        (tmp_path / "params.yaml").write_text(params_text)
    for name, text in more.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_init_appends_what_is_missing_and_keeps_the_users_text(tmp_path):
    root = project(tmp_path, **{".dvcignore": "# DVC's own comment\n"})
    done = invoke("init", "--project", str(root))
    assert done.exit_code == 0, done.output
    text = (root / "params.yaml").read_text()
    assert text.startswith(USER_PARAMS + "\n\n# How `orchestrator run` runs this project's stages")
    loaded = params.load(root)
    assert loaded.data["train"] == {"lr": 0.1} and loaded.data["seeds"] == [1, 2]
    assert (loaded.settings.cluster, loaded.settings.account, loaded.settings.image) == ("local", None, "none")
    dvcignore = (root / ".dvcignore").read_text()
    assert dvcignore.startswith("# DVC's own comment\n") and ".orchestrator/" in dvcignore.splitlines()
    assert ".orchestrator/" in (root / ".gitignore").read_text().splitlines()
    assert (root / "containers/images.yaml").read_text().rstrip().endswith("{}")
    assert (root / "dvc.yaml").read_text() == DVC_YAML
    said = ["params.yaml: added the orchestrator section", ".gitignore: created with .orchestrator/", ".dvcignore: added .orchestrator/"]
    assert all(line in done.output for line in said), done.output


def test_a_second_run_changes_nothing_and_says_so(tmp_path):
    root = project(tmp_path)
    assert invoke("init", "--project", str(root)).exit_code == 0
    before = snapshot(root)
    again = invoke("init", "--project", str(root))
    assert again.exit_code == 0 and "nothing to do: this project is set up already" in again.output
    assert snapshot(root) == before


def test_what_the_project_has_already_is_left_alone(tmp_path):
    mine = "orchestrator:\n  cluster: lumi   # ours\n  account: project_465000858\n"
    root = project(tmp_path, mine, **{".gitignore": "/.orchestrator\n*.pyc", ".dvcignore": ".orchestrator/**\n"})
    (root / "containers").mkdir()
    (root / "containers/images.yaml").write_text("mine: {definition: x.def.j2}\n")
    before = snapshot(root)
    done = invoke("init", "--project", str(root), "--cluster", "testbed")
    assert done.exit_code == 0, done.output
    assert snapshot(root) == before
    assert "has an orchestrator section already (cluster lumi), left as it is; --cluster testbed not written" in done.output


def test_cluster_is_written_with_its_account_example_and_params_made_when_absent(tmp_path):
    root = project(tmp_path, params_text=None)
    assert invoke("init", "--project", str(root), "--cluster", "lumi").exit_code == 0
    text = (root / "params.yaml").read_text()
    assert text.startswith("# How `orchestrator run`") and "e.g. project_465000858" in text
    assert params.load(root).settings.cluster == "lumi"


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        ({}, "has no dvc.yaml: `orchestrator init` adds to an existing DVC project"),
        ({"dvc.yaml": DVC_YAML, "params.yaml": "{train: {lr: 0.1}}\n"}, "cannot append the orchestrator section to it as text"),
        ({"dvc.yaml": DVC_YAML, "params.yaml": "- a list\n"}, "expected a mapping at the top level"),
        ({"dvc.yaml": DVC_YAML, "params.yaml": "a: [\n"}, "is not valid YAML"),
    ],
)
def test_refusals_are_one_message_exit_2_and_write_nothing(tmp_path, setup, message):
    for name, text in setup.items():
        (tmp_path / name).write_text(text)
    before = snapshot(tmp_path)
    done = invoke("init", "--project", str(tmp_path))
    assert done.exit_code == 2 and message in done.output and "Traceback" not in done.output
    assert snapshot(tmp_path) == before


def _latin1_params(root: Path) -> None:
    (root / "params.yaml").write_bytes("train: {lr: 0.1}\nnote: café\n".encode("latin-1"))


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (_latin1_params, "params.yaml is not a text file (not UTF-8 at byte 26)"),
        (lambda root: (root / ".gitignore").mkdir(), ".gitignore is a folder, not a file"),
        (lambda root: (root / ".dvcignore").symlink_to("/dev/zero"), ".dvcignore is not a regular file (a character device)"),
        (lambda root: (root / "containers").write_text("x"), "containers is not a folder"),
    ],
)
def test_a_file_init_cannot_add_to_is_refused_before_anything_is_written(tmp_path, setup, message):
    """Each is found before params.yaml, the first file init adds to, is changed."""
    root = project(tmp_path, params_text=None if setup is _latin1_params else USER_PARAMS)
    setup(root)
    before = snapshot(root)
    done = invoke("init", "--project", str(root))
    assert done.exit_code == 2 and message in done.output and "Traceback" not in done.output, done.output
    assert done.exception is None or isinstance(done.exception, SystemExit)
    assert snapshot(root) == before


def test_an_unknown_cluster_lists_the_profiles_and_writes_nothing(tmp_path):
    root = project(tmp_path)
    before = snapshot(root)
    done = invoke("init", "--project", str(root), "--cluster", "lumii")
    assert done.exit_code == 2 and "unknown cluster 'lumii'" in done.output and "built-in profiles: " in done.output
    assert snapshot(root) == before


def test_init_is_listed_in_the_help():
    done = invoke("--help")
    assert done.exit_code == 0 and "init " in done.output and "Add what an existing DVC project needs" in done.output
