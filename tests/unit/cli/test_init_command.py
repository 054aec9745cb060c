"""`orchestrator init`: adds to an existing DVC project what it needs, never rewrites what is there."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import dvc_init, invoke

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
    # Comments only, so that an entry appended as its comment shows reads as that one image.
    images = root / "containers/images.yaml"
    assert all(not line.strip() or line.startswith("#") for line in images.read_text().splitlines())
    with images.open("a") as f:
        f.write("mine:\n  definition: localimage.def.j2\n  base: /images/base.sif\n")
    from orchestrator.util import yamlio

    assert list(yamlio.load_mapping(images)) == ["mine"]
    assert (root / "dvc.yaml").read_text() == DVC_YAML
    said = ["params.yaml: added the orchestrator section", ".gitignore: created with .orchestrator/", ".dvcignore: added .orchestrator/"]
    assert all(line in done.output for line in said), done.output


def uncommented(text: str, name: str) -> str:
    """init's images.yaml with its example ``name`` uncommented as its comment says: the `#   ` in front of
    the example's lines removed (its first line ``#   NAME:``, then the lines indented under it)."""
    lines = text.splitlines(keepends=True)
    start = lines.index(f"#   {name}:\n")
    end = start + 1
    while end < len(lines) and lines[end].startswith("#     "):
        end += 1
    return "".join(lines[:start] + [line.removeprefix("#   ") for line in lines[start:end]] + lines[end:])


@pytest.mark.parametrize("name", ["lumi", "ci"])
def test_each_example_of_init_s_images_yaml_uncommented_is_an_image_it_accepts(tmp_path, name):
    from orchestrator.containers import images
    from orchestrator.util import yamlio

    root = project(tmp_path)
    assert invoke("init", "--project", str(root)).exit_code == 0
    path = root / "containers/images.yaml"
    path.write_text(uncommented(path.read_text(), name))
    assert list(yamlio.load_mapping(path)) == [name]  # valid YAML: this one image, the other example still a comment
    assert images.select(root, name).values["definition"] == {"lumi": "localimage.def.j2", "ci": "ci.def.j2"}[name]


def test_the_cpu_example_of_init_s_images_yaml_is_the_repository_s_ci_image(tmp_path):
    """Uncommented, with this repository's train extra, it renders the same definition from the same inputs as the
    repository's own `ci` image: the same content hash, so the suite's CI-image build builds what a user's would."""
    from support import ROOT

    from orchestrator.containers import images, inputs

    root = project(tmp_path)
    assert invoke("init", "--project", str(root)).exit_code == 0
    path = root / "containers/images.yaml"
    path.write_text(uncommented(path.read_text(), "ci"))
    (root / "pyproject.toml").write_text((ROOT / "pyproject.toml").read_text())
    mine, ours = inputs.prepare(root, images.select(root, "ci")), inputs.prepare(ROOT, images.select(ROOT, "ci"))
    assert mine.image.template.read_text() == ours.image.template.read_text()  # the shipped template
    assert mine.hashed_definition == ours.hashed_definition
    assert [(i.identity, i.path, i.data) for i in mine.inputs] == [(i.identity, i.path, i.data) for i in ours.inputs]


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


def test_cluster_is_written_with_its_account_and_image_and_params_made_when_absent(tmp_path):
    root = project(tmp_path, params_text=None)
    done = invoke("init", "--project", str(root), "--cluster", "lumi", "--account", "project_465000123", "--image", "/project/p/team.sif")
    assert done.exit_code == 0, done.output
    text = (root / "params.yaml").read_text()
    assert text.startswith("# How `orchestrator run`") and "e.g. project_465000858" in text
    settings = params.load(root).settings
    assert (settings.cluster, settings.account, settings.image) == ("lumi", "project_465000123", "/project/p/team.sif")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ([], ["--account: your Slurm account on lumi (matching ", "e.g. project_465000858)", "--image: what the tasks run in"]),
        (["--account", "project_465000858", "--image", "x.sif"], ["--account 'project_465000858' is lumi's example account"]),
        (["--account", "project_465000123", "--image", "none"], ["--image: what the tasks run in (lumi runs every task in a singularity"]),
        (["--account", "abc", "--image", "x.sif"], ["--account 'abc' does not match lumi's pattern"]),
        (
            ["--account", "project_465000858", "--image", "dir/x.img"],
            ["'dir/x.img' is a path, but an image file must end in .sif"],
        ),
    ],
)
def test_a_cluster_init_would_write_values_its_profile_refuses_for_is_refused_naming_them(tmp_path, args, said):
    """Before: `init --cluster lumi` wrote account null and image none, which `render` on lumi refuses."""
    root = project(tmp_path)
    before = snapshot(root)
    done = invoke("init", "--project", str(root), "--cluster", "lumi", *args)
    assert done.exit_code == 2 and "cluster lumi: init would write values its profile refuses" in done.output, done.output
    assert all(line in done.output for line in said) and "nothing was changed" in done.output and "Traceback" not in done.output
    assert snapshot(root) == before


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
        (lambda root: (root / ".dvcignore").symlink_to("/dev/zero"), ".dvcignore is a symbolic link to /dev/zero, outside the project"),
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


UNWRAPPED = """\
# the team's pipeline
stages:
  prepare:
    cmd: python prep.py  # on the login node is fine
    outs:
      - data/clean
  train:
    matrix:
      lr: [0.1, 0.2]
    cmd: >-
      python train.py
      --lr ${item.lr}
      --out results/${item.lr}
    deps:
      - data/clean  # keep me
    metrics:
      - results/${item.lr}/metrics.json:
          cache: false
  plot:
    cmd: python plot.py > plot.txt
"""


def test_init_says_of_each_stage_whether_it_is_orchestrated_and_how_to_make_it(tmp_path):
    """Before: init never said that a stage's cmd must start with `orchestrator run --`."""
    root = project(tmp_path, **{"dvc.yaml": UNWRAPPED})
    done = invoke("init", "--project", str(root))
    assert done.exit_code == 0, done.output
    assert (
        "stage train: runs on this machine as DVC runs it; to run it as a job, its cmd must start with `orchestrator run --`" in done.output
    )
    assert "`orchestrator init --wrap train` does it" in done.output
    assert "stage plot: runs on this machine as DVC runs it; init cannot wrap it: its cmd has shell syntax" in done.output
    assert (root / "dvc.yaml").read_text() == UNWRAPPED


def test_wrap_rewrites_only_the_stages_named_keeping_the_rest_of_dvc_yaml(tmp_path):
    root = project(tmp_path, **{"dvc.yaml": UNWRAPPED})
    (root / "dvc.yaml").chmod(0o640)
    done = invoke("init", "--project", str(root), "--wrap", "train")
    assert done.exit_code == 0, done.output
    assert (
        "dvc.yaml: wrapped train in `orchestrator run --`" in done.output and "stage train: runs through `orchestrator run`" in done.output
    )
    text = (root / "dvc.yaml").read_text()
    expected = (
        UNWRAPPED.replace("    cmd: >-\n", "    cmd: >-\n      orchestrator run --\n")
        .replace("# keep me\n", "# keep me\n    params: [orchestrator.cluster]\n")  # a result of one cluster is stale on another
        .replace(
            "          cache: false\n",
            "          cache: false\n          persist: true\n    outs:\n      - results/${item.lr}/provenance.json:\n"
            "          cache: false\n          persist: true\n",
        )
    )
    assert text == expected  # comments, the folded command's lines, the other stages: as they were
    assert (root / "dvc.yaml").stat().st_mode & 0o777 == 0o640
    again = invoke("init", "--project", str(root), "--wrap-all")
    assert again.exit_code == 0 and "dvc.yaml: wrapped prepare in" in again.output
    lines = (root / "dvc.yaml").read_text().splitlines()
    at = next(i for i, line in enumerate(lines) if line.startswith("    cmd: orchestrator run -- python prep.py"))
    assert lines[at + 1 : at + 3] == ["    params: [orchestrator.cluster]", "    outs:"]  # after the cmd where there are no deps
    assert "      - data/clean:\n          persist: true\n" in (root / "dvc.yaml").read_text()
    before = snapshot(root)
    third = invoke("init", "--project", str(root), "--wrap-all")
    assert third.exit_code == 0 and "nothing to do" in third.output and snapshot(root) == before


@pytest.mark.parametrize(
    ("params_line", "after"),
    [
        ("    params: [train]\n", "    params: [train, orchestrator.cluster]\n"),  # added to the stage's own list, in its style
        ("    params:\n      - train\n", "    params:\n      - train\n      - orchestrator.cluster\n"),
        ("    params: [orchestrator]\n", "    params: [orchestrator]\n"),  # the whole section: declared already
        ("    params: [orchestrator.cluster]\n", "    params: [orchestrator.cluster]\n"),
        ("    params:\n      - params.yaml:\n", "    params:\n      - params.yaml:\n"),  # all of params.yaml
        ("    params:\n      - params.yaml: [orchestrator]\n", "    params:\n      - params.yaml: [orchestrator]\n"),
        ("    params:\n      - other.yaml: [orchestrator.cluster]\n", None),  # another file's key: not ours
    ],
)
def test_wrap_declares_orchestrator_cluster_unless_the_stage_does(tmp_path, params_line, after):
    """A result made on one cluster must be stale after `orchestrator use OTHER`: the wrapped stage depends on the cluster."""
    dvc_yaml = "stages:\n  train:\n    cmd: python train.py\n" + params_line
    root = project(tmp_path, **{"dvc.yaml": dvc_yaml})
    done = invoke("init", "--project", str(root), "--wrap", "train")
    assert done.exit_code == 0, done.output
    text = (root / "dvc.yaml").read_text()
    if after is None:
        after = params_line + "      - orchestrator.cluster\n"
    assert text == "stages:\n  train:\n    cmd: orchestrator run -- python train.py\n" + after
    assert ("orchestrator.cluster among the params of train" in done.output) == (after != params_line), done.output


def test_wrap_leaves_the_cluster_out_where_params_yaml_has_a_section_without_it(tmp_path):
    """DVC refuses a stage whose declared param params.yaml lacks; init keeps a section of the user's own as it is."""
    root = project(tmp_path, "orchestrator:\n  account: null\n")
    done = invoke("init", "--project", str(root), "--wrap", "train")
    assert done.exit_code == 0, done.output
    assert (root / "dvc.yaml").read_text() == "stages:\n  train:\n    cmd: orchestrator run -- python train.py\n"


def test_wrap_of_a_stage_wrapped_already_does_not_declare_the_cluster(tmp_path):
    """Only a cmd wrapped now gets it: a stage wrapped by hand may leave it out on purpose (the same data on every cluster)."""
    dvc_yaml = "stages:\n  prepare:\n    cmd: orchestrator run -- python prep.py\n    outs:\n      - data\n"
    root = project(tmp_path, **{"dvc.yaml": dvc_yaml})
    done = invoke("init", "--project", str(root), "--wrap", "prepare")
    assert done.exit_code == 0, done.output
    assert "orchestrator.cluster" not in (root / "dvc.yaml").read_text() and "persist: true" in (root / "dvc.yaml").read_text()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--wrap", "trian"], "--wrap trian: no such stage in dvc.yaml"),
        (["--wrap", "train", "--wrap", "plot"], "stage plot: its cmd has shell syntax"),
    ],
)
def test_wrap_refusals_write_nothing(tmp_path, args, message):
    root = project(tmp_path, **{"dvc.yaml": UNWRAPPED})
    before = snapshot(root)
    done = invoke("init", "--project", str(root), *args)
    assert done.exit_code == 2 and message in done.output and "nothing was changed" in done.output, done.output
    assert snapshot(root) == before


def test_wrap_refuses_a_dvc_yaml_it_cannot_rewrite_without_changing_its_layout(tmp_path):
    mixed = UNWRAPPED.replace("      - data/clean\n", "    - data/clean\n")  # two sequence indentations in one file
    root = project(tmp_path, **{"dvc.yaml": mixed})
    before = snapshot(root)
    done = invoke("init", "--project", str(root), "--wrap", "train")
    assert done.exit_code == 2 and "cannot rewrite it without changing its layout" in done.output and "wrap them by hand" in done.output
    assert snapshot(root) == before


def test_render_check_passes_on_what_init_wrote_for_a_cluster(tmp_path):
    """init's own output must plan: before, `init --cluster lumi` wrote account null and image none."""
    root = project(tmp_path, **{"dvc.yaml": UNWRAPPED})
    dvc_init(root, scm=False)
    args = ["--cluster", "lumi", "--account", "project_465000123", "--image", "/project/project_465000123/team.sif"]
    assert invoke("init", "--project", str(root), *args, "--wrap", "train").exit_code == 0
    done = invoke("render", "--project", str(root), "--check", "--no-shellcheck")
    assert done.exit_code == 0, done.output
    assert "2 script(s) for lumi and checked" in done.output


def test_wrap_keeps_leading_assignments_working_and_render_check_refuses_them_bare(tmp_path):
    """`FOO=1 python3 x.py` is a common way to write a stage: DVC's shell sets FOO. After
    `orchestrator run --` the words are a program and its arguments, so init puts `env` first;
    a cmd wrapped by hand without it is refused by `render --check`, naming the fix."""
    root = project(tmp_path, **{"dvc.yaml": "stages:\n  train:\n    cmd: FOO=1 BAR='a b' python train.py\n"})
    dvc_init(root, scm=False)
    done = invoke("init", "--project", str(root), "--wrap", "train")
    assert done.exit_code == 0, done.output
    assert "    cmd: orchestrator run -- env FOO=1 BAR='a b' python train.py\n" in (root / "dvc.yaml").read_text()
    checked = invoke("render", "--project", str(root), "--check", "--no-shellcheck")
    assert checked.exit_code == 0, checked.output
    (root / "dvc.yaml").write_text((root / "dvc.yaml").read_text().replace("-- env FOO=1", "-- FOO=1"))
    refused = invoke("render", "--project", str(root), "--check", "--no-shellcheck")
    assert refused.exit_code == 2 and "its command starts with FOO=..., a shell assignment" in refused.output, refused.output
    assert "orchestrator run -- env FOO=1 ..." in refused.output


LINKED = ["params.yaml", ".gitignore", ".dvcignore", "dvc.yaml"]


@pytest.mark.parametrize("name", LINKED)
@pytest.mark.parametrize("where", ["outside", "dangling", "inside"])
def test_one_policy_for_links_in_the_files_the_tool_edits(tmp_path, name, where):
    """params.yaml, dvc.yaml, .gitignore and .dvcignore may be links: one leading inside the
    project is followed (its file edited, the link kept); one leading out of it, or nowhere,
    is refused with nothing written anywhere (init appended through it and made a dangling
    link's file; `use` replaced it with a file)."""
    (tmp_path / "p").mkdir()
    root = project(tmp_path / "p", **{"dvc.yaml": "stages:\n  train:\n    cmd: python train.py\n    outs: [m]\n"})
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    original = (root / name).read_text() if (root / name).exists() else "# theirs\n"
    if where == "outside":
        target = outside / name
        target.write_text(original)
    elif where == "dangling":
        target = root / "shared" / name  # a folder that is not there
    else:
        target = root / "shared" / name
        target.parent.mkdir()
        target.write_text(original)
    (root / name).unlink(missing_ok=True)
    (root / name).symlink_to(target)
    args = ["--wrap", "train"] if name == "dvc.yaml" else []
    before, elsewhere = snapshot(root), snapshot(outside)
    done = invoke("init", "--project", str(root), *args)
    if where == "inside":
        assert done.exit_code == 0, done.output
        assert (root / name).is_symlink() and target.read_text() != original  # edited where the link leads
        return
    if name == "dvc.yaml" and where == "dangling":
        assert done.exit_code == 2 and "has no dvc.yaml" in done.output, done.output  # no pipeline to wrap
    else:
        assert done.exit_code == 2 and f"{root / name} is a symbolic link to " in done.output, done.output
        assert ("outside the project" if where == "outside" else "which is not a file") in done.output
    assert snapshot(root) == before and snapshot(outside) == elsewhere and not (root / "shared").exists()
