"""Issue 33, sweeps: what the command line and the disk give a sweep is data, checked before
it is acted on. A `-S FILE:...` names a file inside the project or nothing is written; a sweep
NAME read back (`--record`, `--next-wave`, `status --sweep`) is checked as a new one is; a
manifest is read as a small regular file of the shape `sweep` writes; a sweep is made whole
or not at all, and a point that cannot be planned is an error naming it, not "0 items"."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path

import pytest
from fakes import FakeSlurm
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import GIT_ENV, examples, invoke, sweep_project_on_testbed
from test_sweep import SlurmAndGit

from orchestrator.errors import ConfigError, OrchestratorError, PlanError
from orchestrator.jobs import sweep

QUIET = {"say": lambda _: None}


@pytest.fixture
def project(tmp_path, monkeypatch) -> Path:
    return sweep_project_on_testbed(tmp_path, monkeypatch)


def refused_before_anything(project: Path, slurm: FakeSlurm) -> None:
    """Nothing of the sweep is left: no manifest, no copy, no job."""
    assert slurm.runner.called("sbatch") == []
    assert not (project / sweep.SWEEPS_DIR).exists(), sorted(map(str, (project / sweep.SWEEPS_DIR).rglob("*")))


def git(project: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=project, check=True, capture_output=True, env={**os.environ, **GIT_ENV})


def finishes(call, seconds: float = 20):
    """``call()``'s result or exception, failing the test if it blocks (a FIFO read would)."""
    box: dict = {}

    def target() -> None:
        try:
            box["value"] = call()
        except BaseException as exc:  # handed to the test below
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"blocked for {seconds} s"
    if "error" in box:
        raise box["error"]
    return box.get("value")


# --- -S FILE: a file of the project, or nothing written ------------------------------------------


@pytest.fixture
def victim(project) -> Path:
    """A YAML file outside the project that a sweep must never rewrite, and a committed link to its folder."""
    outside = project.parent / "outside"
    outside.mkdir()
    (outside / "victim.yaml").write_text("sweep:\n  lr: 0.1\n")
    (project / "link").symlink_to(outside)
    (project / "linked.yaml").symlink_to(outside / "victim.yaml")
    git(project, "add", "link", "linked.yaml")
    git(project, "commit", "-q", "-m", "links")
    return outside / "victim.yaml"


@pytest.mark.parametrize(
    ("spec", "said"),
    [
        ("{victim}:sweep.lr=0.5,0.7", "not absolute, no '..'"),
        ("../../../../../../outside/victim.yaml:sweep.lr=0.5,0.7", "not absolute, no '..'"),
        ("../outside/victim.yaml:sweep.lr=0.5,0.7", "not absolute, no '..'"),
        ("link/victim.yaml:sweep.lr=0.5,0.7", "leads out of the project through a symbolic link"),
        ("linked.yaml:sweep.lr=0.5,0.7", "leads out of the project through a symbolic link"),
        (".dvc/config:core.x=1,2", "is in .dvc/"),
    ],
)
def test_a_params_file_outside_the_project_is_refused_before_anything_is_written(project, victim, spec, said):
    slurm = FakeSlurm()
    before = victim.read_text()
    with pytest.raises(ConfigError) as caught:
        sweep.submit(project, None, SlurmAndGit(slurm), [spec.format(victim=victim)], name="grid", **QUIET)
    assert said in caught.value.render() and "-S " in caught.value.headline
    assert victim.read_text() == before
    refused_before_anything(project, slurm)


# --- sweep names read back -----------------------------------------------------------------------


@pytest.fixture
def planted(tmp_path) -> Path:
    """A project folder, and beside it a manifest that `--record ../../../../x` would reach."""
    root = tmp_path / "p"
    root.mkdir()
    manifest = {"name": "x", "baseline": "0" * 40, "sets": [], "targets": [], "points": []}
    (tmp_path / "x.json").write_text(json.dumps(manifest))
    return root


@pytest.mark.parametrize("name", ["../../../../x", "a/b", "", "-x", ".hidden", "x" * 90, "x\n"])
def test_a_sweep_name_read_back_is_checked_as_a_new_one_is(planted, name):
    for call in (
        lambda: sweep.Sweep.load(planted, name),
        lambda: sweep.record_points(planted, None, SlurmAndGit(FakeSlurm()), name, **QUIET),
        lambda: sweep.next_wave(planted, None, SlurmAndGit(FakeSlurm()), name, 1000.0, **QUIET),
    ):
        with pytest.raises(ConfigError) as caught:
            call()
        assert "sweep name" in caught.value.headline and "letters, digits" in caught.value.headline


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "--record", "../../../../x"],
        ["sweep", "--name", "../../../../x", "--next-wave", "1000.0"],
        ["status", "--sweep", "../../../../x"],
    ],
)
def test_a_sweep_name_out_of_the_project_is_one_message_exit_2(planted, argv):
    done = invoke(*argv, "--project", str(planted))
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert done.output.count("error:") == 1 and "sweep name '../../../../x'" in done.output, done.output


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "-1"])
def test_next_wave_takes_a_finite_time_that_has_passed(project, value):
    done = invoke("sweep", "--name", "grid", "--next-wave", value, "--project", str(project))
    assert done.exit_code == 2 and "Traceback" not in done.output and "--next-wave" in done.output, done.output
    assert not (project / sweep.SWEEPS_DIR).exists()


# --- manifests read from the disk ----------------------------------------------------------------


def manifest(root: Path, name: str = "grid") -> Path:
    path = sweep.Sweep.path(root, name)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path


def good(sweep_name: str = "grid", **point) -> dict:
    """A manifest as `sweep` writes it, of one point (``point``: that point's fields changed)."""
    name = sweep_name
    p = {"name": f"{name}-0", "overrides": {"params.yaml": ["sweep.lr=0.1"]}, "folder": f"{sweep.SWEEPS_DIR}/{name}/0", "saved": False}
    return {"name": name, "baseline": "0" * 40, "sets": ["sweep.lr=0.1"], "targets": [], "points": [{**p, **point}]}


@pytest.mark.parametrize(
    ("content", "said"),
    [
        ('"x"', "the manifest is str, not an object"),
        ("1", "the manifest is int, not an object"),
        ("null", "the manifest is NoneType, not an object"),
        ("{cut short", "it is not JSON"),
        (json.dumps({**good(), "points": "x"}), "'points' is 'x', not a list"),
        (json.dumps({**good(), "sets": [1]}), "'sets' is [1], not a list of strings"),
        (json.dumps(good(saved="yes")), "'saved' is 'yes', not true or false"),
        (json.dumps(good(overrides={"params.yaml": "sweep.lr=0.1"})), "'overrides' is"),
        (json.dumps(good(extra=1)), "point 0 has an unknown field 'extra'"),
        (json.dumps(good(folder="../../../../elsewhere")), "point 0's folder '../../../../elsewhere' is not a folder of this sweep"),
        (json.dumps(good(name="other-0")), "point 0's name 'other-0' is not grid-0"),
        (json.dumps(good(overrides={"/etc/x.yaml": ["a=1"]})), "point 0's params file '/etc/x.yaml' is not a path inside the project"),
        (json.dumps(good("other")), "it names sweep 'other', not 'grid'"),
        (json.dumps({**good(), "baseline": "--upload-pack=x"}), "its baseline '--upload-pack=x' is not a commit's hash"),
    ],
)
def test_a_damaged_manifest_is_one_message_naming_the_file(tmp_path, content, said):
    path = manifest(tmp_path)
    path.write_text(content)
    with pytest.raises(OrchestratorError) as caught:
        sweep.record_points(tmp_path, None, SlurmAndGit(FakeSlurm()), "grid", **QUIET)  # what the recording job runs
    assert caught.value.headline == f"the manifest of sweep 'grid' ({path}) is damaged"
    assert said in caught.value.render()


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "huge", "folder"])
def test_a_manifest_that_is_no_regular_file_is_refused_unread(tmp_path, kind):
    path = manifest(tmp_path)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "huge":
        with path.open("wb") as f:
            f.truncate(64 << 20)  # sparse: nothing written
    else:
        path.mkdir()
    with pytest.raises(OrchestratorError) as caught:
        finishes(lambda: sweep.Sweep.load(tmp_path, "grid"))
    assert caught.value.headline == f"the manifest of sweep 'grid' ({path}) is damaged"


def test_the_recording_job_ends_as_one_message_on_a_damaged_manifest(tmp_path):
    manifest(tmp_path).write_text('"x"')
    done = invoke("sweep", "--record", "grid", "--project", str(tmp_path))
    assert done.exit_code == 2 and "Traceback" not in done.output and "is damaged" in done.output, done.output


# --- whole or not at all -------------------------------------------------------------------------


def test_a_param_that_does_not_exist_is_refused_before_the_copies_are_made(project):
    slurm = FakeSlurm()
    with pytest.raises(ConfigError) as caught:
        sweep.submit(project, None, SlurmAndGit(slurm), ["sweep.nope=1,2"], name="grid", **QUIET)
    said = caught.value.render()
    assert "cannot be applied to 2 of its 2 points" in said and "grid-0 (and 1 more): params.yaml: Could not override 'sweep.nope'" in said
    assert "leading '+'" in said
    refused_before_anything(project, slurm)


def test_a_copy_left_without_its_values_gets_them_before_it_is_submitted(project):
    # What a run stopped between `git worktree add` and the params left behind.
    copy = project / sweep.SWEEPS_DIR / "grid/0"
    git(project, "worktree", "add", "--detach", str(copy), "HEAD")
    assert "lr: 0.1" in (copy / "params.yaml").read_text()
    slurm = FakeSlurm()
    made, jobs, _ = sweep.submit(project, None, SlurmAndGit(slurm), ["sweep.lr=0.5,0.7"], name="grid", **QUIET)
    assert "lr: 0.5" in (copy / "params.yaml").read_text() and "lr: 0.7" in (project / made.points[1].folder / "params.yaml").read_text()
    assert all(len(js) == 1 for js in jobs.values())


def test_values_that_leave_the_pipeline_unresolvable_name_the_point_and_leave_nothing(project):
    slurm = FakeSlurm()
    with pytest.raises(PlanError) as caught:
        sweep.submit(project, None, SlurmAndGit(slurm), ["sweep=1,2"], name="grid", **QUIET)  # ${sweep.lr} is gone
    said = caught.value.render()
    assert "sweep grid: its points cannot all be submitted; nothing was submitted" in said
    assert "grid-0: DVC cannot work out what is stale" in said and "Could not find 'sweep.lr'" in said and "grid-1: " in said
    refused_before_anything(project, slurm)


@pytest.mark.parametrize("targets", [(), ("work",)])
def test_a_point_whose_command_cannot_be_planned_is_an_error_not_zero_items(project, targets):
    slurm = FakeSlurm()
    with pytest.raises(PlanError) as caught:
        sweep.submit(project, None, SlurmAndGit(slurm), ["sweep.lr=0.1,'$(id)'"], targets, name="grid", **QUIET)
    said = caught.value.render()
    assert "grid-1: work@0: its cmd has shell syntax" in said and "grid-0" not in said
    refused_before_anything(project, slurm)


def test_submit_of_an_item_its_params_make_unplannable_is_an_error_not_nothing_to_submit(project):
    # The same silent skip as a sweep's point had: submit said "nothing to submit", exit 0 (issue 33).
    (project / "params.yaml").write_text((project / "params.yaml").read_text().replace("lr: 0.1", "lr: $(id)"))
    done = invoke("submit", "--project", str(project))
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert "nothing was submitted" in done.output and "work@0: its cmd has shell syntax" in done.output, done.output


def test_the_sweep_command_exits_2_naming_the_point_that_cannot_be_planned(project):
    done = invoke("sweep", "-S", "sweep.lr='$(id)'", "--name", "grid", "--project", str(project))
    assert done.exit_code == 2 and "Traceback" not in done.output, done.output
    assert "grid-0: work@0: its cmd has shell syntax" in done.output and "0 points" not in done.output, done.output


# --- property-based: any -S spec, any name ------------------------------------------------------


@pytest.fixture(scope="module")
def scratch_project(tmp_path_factory) -> Path:
    """A committed git project with params files, a link out, a link to itself and a FIFO;
    beside it a folder whose files no spec may touch."""
    top = tmp_path_factory.mktemp("specs")
    outside = top / "outside"
    outside.mkdir()
    (outside / "victim.yaml").write_text("sweep:\n  lr: 0.1\n")
    root = top / "p"
    (root / "conf").mkdir(parents=True)
    (root / "params.yaml").write_text("sweep:\n  lr: 0.1\n  seed: 0\n")
    (root / "conf/train.yaml").write_text("opt: adam\nlr: 0.1\n")
    (root / "out").symlink_to(outside)
    (root / "self").symlink_to(".")
    os.mkfifo(root / "pipe.yaml")
    env = {**os.environ, **GIT_ENV}
    for argv in (["git", "init", "-q"], ["git", "add", "params.yaml", "conf", "out", "self"], ["git", "commit", "-q", "-m", "x"]):
        subprocess.run(argv, cwd=root, check=True, capture_output=True, env=env)
    return root


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file() and not p.is_symlink() and ".git" not in p.parts}


PIECES = ["..", ".", "", "conf", "out", "self", "params.yaml", "train.yaml", "victim.yaml", "pipe.yaml", ".git", ".dvc", "x\0y"]
paths = st.one_of(
    st.lists(st.sampled_from(PIECES), max_size=6).map("/".join),
    st.lists(st.sampled_from(PIECES), max_size=6).map(lambda parts: "/" + "/".join(parts)),
    st.text(max_size=20),
)
overrides = st.one_of(
    st.sampled_from(["sweep.lr=0.1,0.2", "lr=0.5", "opt=choice(adam,sgd)", "nope=1", "+new=1", "sweep=1,2", "=1", "a=b=c", "~sweep"]),
    st.text(max_size=16),
)
specs = st.one_of(overrides, st.builds(lambda f, o: f"{f}:{o}", paths, overrides))
FUZZ = settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture]
)


@FUZZ
@given(sets=st.lists(specs, min_size=1, max_size=3))
def test_any_s_spec_is_a_file_inside_the_project_or_one_error(scratch_project, sets):
    from orchestrator.util.runner import SubprocessRunner

    root = scratch_project
    before_out, before_in = snapshot(root.parent / "outside"), snapshot(root)
    try:
        made = finishes(lambda: sweep.define(root, SubprocessRunner(), sets, name="s"))
        values = finishes(lambda: sweep.point_params(root, made.points[:20]))
    except OrchestratorError as exc:
        assert exc.render()  # one message, no traceback
    else:
        for point in made.points[:20]:
            for given_ in point.overrides:
                place = (root / sweep.params_file(root, given_)).resolve()
                assert place.is_relative_to(root.resolve()) and place.is_file()
            assert set(values[point.name]) <= {sweep.params_file(root, f) for f in point.overrides}
    assert snapshot(root.parent / "outside") == before_out and snapshot(root) == before_in  # written nowhere


@FUZZ
@given(name=st.one_of(st.text(max_size=100), st.sampled_from(["..", "../x", "x/..", "./x", "x.json", "-n", "a" * 81, "a" * 82])))
def test_any_sweep_name_is_a_file_of_the_sweeps_folder_or_one_error(planted, name):
    try:
        path = sweep.Sweep.path(planted, name)
    except ConfigError as exc:
        assert "sweep name" in exc.headline
        return
    assert path.parent == planted / sweep.SWEEPS_DIR and path.name == f"{name}.json" and "/" not in name
    with pytest.raises(OrchestratorError, match="no sweep named"):
        sweep.Sweep.load(planted, name)
