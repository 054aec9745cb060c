"""`orchestrator container list | exec | shell | clean` through click's runner
(orchestrator/cli/container_verbs.py, orchestrator/containers/session.py). Images are built with a fake runtime; `exec` runs its
real script (bash) against a fake `apptainer` on PATH that records its argv, environment and
working folder. Real images: tests/integration/apptainer/test_container_verbs.py."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from fakes import FakeRunner, ok
from support import ACCOUNT, invoke

from orchestrator.cli import container_verbs
from orchestrator.containers import build, session
from orchestrator.util.runner import Completed

FAKE_RUNTIME = """\
#!/bin/sh
{ printf '%s\\n' "$@"; echo '--env--'; env; echo '--pwd--'; pwd; } > "$RECORD"
exit "${FAKE_RC:-0}"
"""


def fake_build(project: Path, name: str = "tiny") -> build.BuildResult:
    def apptainer(argv):
        if argv[1] != "--version":
            Path(argv[-2]).write_bytes(b"SIF image bytes")
        return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")

    return build.build(project, name, FakeRunner(answers={"apptainer": apptainer, "git": ok("", rc=128)}, installed={"apptainer"}))


@pytest.fixture
def built(tiny) -> Path:
    """The tiny project on the local profile, image `tiny` built (`site` is not)."""
    (tiny / "params.yaml").write_text(f"orchestrator:\n  cluster: local\n  account: {ACCOUNT}\n")
    fake_build(tiny)
    return tiny


class Recorded:
    def __init__(self, path: Path) -> None:
        text = path.read_text()
        args, rest = text.split("--env--\n", 1)
        env, pwd = rest.rsplit("--pwd--\n", 1)
        self.argv = args.splitlines()
        self.env = dict(line.split("=", 1) for line in env.splitlines() if "=" in line)
        self.cwd = pwd.strip()


@pytest.fixture
def runtime(tmp_path, monkeypatch):
    """A fake `apptainer` (and `singularity`) first on PATH; what it saw, once it ran."""
    bin_dir = tmp_path / "fake-bin"
    bin_dir.mkdir()
    for name in ("apptainer", "singularity"):
        (bin_dir / name).write_text(FAKE_RUNTIME)
        (bin_dir / name).chmod(0o755)
    record = tmp_path / "record.txt"
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("RECORD", str(record))
    return lambda: Recorded(record)


def files_of(project: Path) -> list[str]:
    return sorted(str(p.relative_to(project)) for p in project.rglob("*"))


def one_error(result, *fragments: str) -> str:
    """Exit 2, no traceback, one line (`error: ...`) holding every fragment."""
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), result.output
    for fragment in fragments:
        assert fragment in lines[0], result.output
    return lines[0]


# --- list -------------------------------------------------------------------------------------


def test_list_table(built):
    result = invoke("container", "list", "--project", str(built))
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line for line in result.output.splitlines()[1:]}
    assert set(rows) == {"site", "tiny"}
    stamp = json.loads(build.stamp_path(built / build.IMAGES_DIR / "tiny.sif").read_text())
    assert "up to date" in rows["tiny"] and "never pushed" in rows["tiny"] and "15 B" in rows["tiny"]
    assert stamp["digest"].removeprefix("sha256:")[:12] in rows["tiny"] and stamp["content_hash"].split(":")[-1][:12] in rows["tiny"]
    assert "invalid: image 'site': the base image" in rows["site"]


def test_list_json_after_a_change(built):
    (built / "pkg" / "mod.py").write_text("x = 3\n")
    result = invoke("container", "list", "--project", str(built), "--json")
    assert result.exit_code == 0, result.output
    found = {e["name"]: e for e in json.loads(result.output)}
    assert (found["tiny"]["state"], found["tiny"]["reason"], found["tiny"]["built"]) == ("stale", "changed: pkg/mod.py", True)
    assert found["tiny"]["size_bytes"] == 15 and found["tiny"]["pushes"] == [] and found["tiny"]["last_push_is_this_image"] is None
    assert (found["site"]["state"], found["site"]["built"]) == ("invalid", False)


def test_list_shows_the_last_push(built):
    sif = built / build.IMAGES_DIR / "tiny.sif"
    digest = json.loads(build.stamp_path(sif).read_text())["digest"].removeprefix("sha256:")
    Path(f"{sif}.pushes.json").write_text(json.dumps({"lumi:/project/p/tiny.sif": {"sha256": digest, "at": "2025-01-01T00:00:00+00:00"}}))
    result = invoke("container", "list", "--project", str(built))
    assert "lumi:/project/p/tiny.sif, " in result.output and " d ago" in result.output and "older build" not in result.output


# --- exec and shell ------------------------------------------------------------------------------


def test_exec_runs_in_the_image_with_a_jobs_binds_pwd_and_hygiene(built, runtime, monkeypatch):
    monkeypatch.setenv("APPTAINER_BIND", "/leaked/path")  # as a python inside a SIF leaves it
    monkeypatch.setenv("FAKE_RC", "7")
    monkeypatch.chdir(built / "pkg")
    result = invoke("container", "exec", "--project", str(built), "tiny", "--", "python", "-c", "print('a b; $HOME')")
    assert result.exit_code == 7, result.output  # the command's exit status
    seen = runtime()
    root = str(built.resolve())
    sif = str((built / build.IMAGES_DIR / "tiny.sif").resolve())
    assert seen.argv[:5] == ["exec", "--bind", root, "--pwd", f"{root}/pkg"]  # the workspace, the current folder in it
    assert seen.argv[-4:] == [sif, "python", "-c", "print('a b; $HOME')"]  # quoted through bash, unchanged
    flags = dict(zip(seen.argv[5:-4:2], seen.argv[6:-4:2], strict=True))
    assert set(flags) <= {"--env"}  # the plan's own flags (the run dir's code on PYTHONPATH), nothing else
    assert flags.get("--env", f"PYTHONPATH={root}/pkg").startswith(f"PYTHONPATH={root}/pkg")
    assert "APPTAINER_BIND" not in seen.env  # cleared, as in a job
    assert seen.env["ORCH_ITEM"] == "container-exec" and seen.env["ORCH_PROFILE"] == "local" and seen.env["OMP_NUM_THREADS"]
    assert seen.cwd == root  # the runtime starts in the workspace, the command in --pwd


def test_exec_from_outside_the_project_runs_in_its_root_with_extra_binds(built, runtime, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("container", "exec", "--project", str(built), "--bind", "/data/corpus", "tiny", "true")  # `--` may be left out
    assert result.exit_code == 0, result.output
    argv = runtime().argv
    assert argv[argv.index("--pwd") + 1] == str(built.resolve()) and "/data/corpus" in argv


def test_exec_on_a_slurm_profile_gets_its_fast_storage(built, runtime, monkeypatch):
    user = f"orch-test-{os.getpid()}"  # the testbed's fast storage is /tmp/orchestrator-testbed/${USER}
    monkeypatch.setenv("USER", user)
    try:
        result = invoke("container", "exec", "--project", str(built), "--cluster", "testbed", "tiny", "--", "true")
        assert result.exit_code == 0, result.output
        seen = runtime()
        workdir = seen.env["ORCH_WORKDIR"]
        assert workdir.startswith(f"/tmp/orchestrator-testbed/{user}/container-exec.") and Path(workdir, "tmp").is_dir()
        assert seen.argv[seen.argv.index(workdir) - 1] == "--bind" and seen.env["TMPDIR"] == f"{workdir}/tmp"
    finally:
        shutil.rmtree(f"/tmp/orchestrator-testbed/{user}", ignore_errors=True)


def test_a_profile_runtime_and_its_setup_are_used(built, monkeypatch):
    from orchestrator.scripts.workspace import Workspace

    monkeypatch.delenv("SLURM_JOB_ACCOUNT", raising=False)
    runner = FakeRunner(installed={"singularity"})
    ws = Workspace.open(built, "lumi", runner)
    sif = built / build.IMAGES_DIR / "tiny.sif"
    plan = session.session_plan(ws, sif, ["python", "-V"], [], runner)
    script = session.session_script(plan, "exec", session.outside_a_job(ws.profile.profile, ACCOUNT, {}))
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0
    assert "exec singularity exec" in script and '--bind "/pfs"' in script and "bash -c '$WITH_CONDA; exec \"$@\"' orch-task" in script
    assert f"export SLURM_JOB_ACCOUNT={ACCOUNT}" in script and "export SLURM_NODEID=0" in script  # outside a job
    assert "scontrol" not in script and "trap ''" not in script and "RANK=" not in script  # what needs a Slurm step is left out
    assert script.rstrip().endswith("orch_task")


def test_a_slurm_account_in_the_profile_needs_one_in_params(built, runtime, monkeypatch):
    monkeypatch.delenv("SLURM_JOB_ACCOUNT", raising=False)
    (built / "params.yaml").write_text("orchestrator:\n  cluster: lumi\n")
    one_error(invoke("container", "exec", "--project", str(built), "tiny", "--", "true"), "SLURM_JOB_ACCOUNT", "orchestrator.account")


@pytest.mark.parametrize(("rc", "status"), [(0, 0), (3, 3), (-15, 143), (-9, 137)])
def test_exit_status_is_the_commands(built, monkeypatch, rc, status):
    runner = FakeRunner(installed={"apptainer"}, exit_codes={"bash": rc})
    monkeypatch.setattr(container_verbs, "_runner", lambda: runner)
    result = invoke("container", "exec", "--project", str(built), "tiny", "--", "true")
    assert result.exit_code == status, result.output
    assert [c[:2] for c in runner.calls] == [["bash", "-c"]]


def test_shell_starts_an_interactive_shell_in_the_image(built, monkeypatch):
    runner = FakeRunner(installed={"apptainer"}, exit_codes={"bash": 5})
    monkeypatch.setattr(container_verbs, "_runner", lambda: runner)
    result = invoke("container", "shell", "tiny", "--project", str(built))
    assert result.exit_code == 5, result.output
    script = runner.calls[0][2]
    assert script.rstrip().endswith("orch_task") and "exec apptainer exec" in script
    assert shlex.join(session.SHELL_COMMAND) in script


def test_a_stale_image_runs_with_a_note(built, monkeypatch):
    runner = FakeRunner(installed={"apptainer"})
    monkeypatch.setattr(container_verbs, "_runner", lambda: runner)
    (built / "pkg" / "mod.py").write_text("x = 4\n")
    result = invoke("container", "exec", "--project", str(built), "tiny", "--", "true")
    assert result.exit_code == 0 and "note: image tiny is stale (changed: pkg/mod.py)" in result.output


def test_no_runtime_is_one_error(built, monkeypatch):
    monkeypatch.setattr(container_verbs, "_runner", lambda: FakeRunner(installed=set()))
    result = invoke("container", "exec", "--project", str(built), "tiny", "--", "true")
    assert result.exit_code == 2 and "neither apptainer nor singularity is on PATH" in result.output


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["exec"], ["exec needs an image name", "images: site, tiny"]),
        (["exec", "nope", "--", "ls"], ["no image 'nope'", "images: site, tiny"]),
        (["exec", "tiny"], ["exec needs a command", "orchestrator container exec tiny -- python -V", "container shell tiny"]),
        (["exec", "site", "--", "ls"], ["image 'site' is not built yet", "run `orchestrator container build site`"]),
        (["exec", "--bind", "/data/a:b", "tiny", "--", "ls"], ["cannot run image tiny.sif", "cannot bind '/data/a:b'"]),
        (["exec", "tiny", "--bind", "/data", "--", "ls"], ["--bind: options go before the image name", "exec [OPTIONS] tiny -- COMMAND"]),
        (["exec", "tiny", "--"], ["exec needs a command"]),
        (["shell"], ["shell needs an image name", "images: site, tiny"]),
        (["shell", "nope"], ["no image 'nope'"]),
        (["shell", "site"], ["not built yet", "orchestrator container build site"]),
        (["clean", "--dry-run", "--yes"], ["--dry-run and --yes exclude each other"]),
    ],
)
def test_bad_input_is_one_line_and_exit_2_with_nothing_written(built, monkeypatch, args, fragments):
    runner = FakeRunner(installed={"apptainer"})
    monkeypatch.setattr(container_verbs, "_runner", lambda: runner)
    before = files_of(built)
    one_error(invoke("container", args[0], "--project", str(built), *args[1:]), *fragments)
    assert files_of(built) == before and runner.spawned == []


@pytest.mark.parametrize("args", [["list"], ["exec", "x", "--", "ls"], ["shell", "x"], ["clean"]])
def test_a_project_without_images_yaml(tmp_path, args):
    one_error(invoke("container", args[0], "--project", str(tmp_path), *args[1:]), "images.yaml: no such file", "--project")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", ["../../evil", "/tmp/evil", "sub/evil", "-evil", ".hidden", "..", ""])
@pytest.mark.parametrize(
    "args",
    [
        ["exec", "--", "{name}", "--", "ls"],
        ["exec", "tiny", "--", "ls"],
        ["shell", "--", "{name}"],
        ["list"],
        ["build", "--", "{name}"],
        ["clean"],
    ],
)
def test_an_image_name_that_is_not_a_name_is_refused_and_nothing_runs(built, monkeypatch, name, args):
    """images.yaml's names become file names (.orchestrator/images/NAME.sif): `../../evil` would run
    (or build over) the file at .orchestrator/images/../../evil.sif."""
    import yaml

    images = yaml.safe_load((built / "containers/images.yaml").read_text())
    images[name] = {"definition": "tiny.def.j2"}
    (built / "containers/images.yaml").write_text(yaml.safe_dump(images))
    (built / "evil.sif").write_bytes(b"whatever lies there")
    runner = FakeRunner(installed={"apptainer"})
    monkeypatch.setattr(container_verbs, "_runner", lambda: runner)
    monkeypatch.setattr("orchestrator.util.runner.SubprocessRunner", lambda: runner)  # container build's
    before = files_of(built)
    result = invoke("container", args[0], "--project", str(built), *[a.format(name=name) for a in args[1:]])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"containers/images.yaml: invalid image names (1 problem):\n  - {name!r} is not a name" in result.output
    assert "an image name is letters, digits, '.', '_' and '-', starting with a letter or digit" in result.output
    assert "valid images: site, tiny" in result.output
    assert files_of(built) == before and runner.spawned == [] and runner.calls == []


# --- clean -------------------------------------------------------------------------------------


@pytest.fixture
def litter(built) -> Path:
    """An old image with its stamp, and a stamp whose image is gone."""
    folder = built / build.IMAGES_DIR
    (folder / "old.sif").write_bytes(b"o" * 5000)
    (folder / "old.sif.json").write_text("{}")
    (folder / "gone.sif.json").write_text("{}")
    return folder


def test_clean_dry_run_lists_sizes_and_total_and_removes_nothing(litter, built):
    before = files_of(built)
    result = invoke("container", "clean", "--dry-run", "--project", str(built))
    assert result.exit_code == 0, result.output
    assert "old image (not in images.yaml)" in result.output and "its stamp" in result.output and "stamp without an image" in result.output
    assert "3 items, " in result.output and "dry run: nothing removed" in result.output
    assert files_of(built) == before


def test_clean_without_yes_off_a_terminal_removes_nothing(litter, built):
    before = files_of(built)
    result = invoke("container", "clean", "--project", str(built))
    assert result.exit_code == 2 and "old.sif" in result.output  # listed first
    assert result.output.splitlines()[-1] == "error: nothing removed: pass --yes to remove what is listed (--dry-run only lists it)"
    assert files_of(built) == before


def test_clean_yes_removes_them_and_says_what_it_freed(litter, built):
    listed = invoke("container", "clean", "--dry-run", "--project", str(built)).output
    total = next(line for line in listed.splitlines() if line.startswith("3 items, ")).removeprefix("3 items, ").removesuffix(" in all")
    result = invoke("container", "clean", "--yes", "--project", str(built))
    assert result.exit_code == 0, result.output
    assert result.output.splitlines()[-1] == f"removed 3 items, freed {total}"
    assert not {"old.sif", "old.sif.json", "gone.sif.json"} & {p.name for p in litter.iterdir()}
    assert {"tiny.sif", "tiny.sif.json", "tiny.build.log"} <= {p.name for p in litter.iterdir()}  # the image of images.yaml stays
    assert invoke("container", "clean", "--project", str(built)).output.startswith("nothing to clean in ")


@pytest.mark.parametrize(("answer", "removed"), [("y\n", True), ("n\n", False), ("\n", False)])
def test_clean_asks_on_a_terminal(litter, built, monkeypatch, answer, removed):
    from click.testing import CliRunner

    from orchestrator.cli import main

    monkeypatch.setattr(container_verbs, "_interactive", lambda: True)
    result = CliRunner().invoke(main, ["container", "clean", "--project", str(built)], input=answer)
    assert result.exit_code == 0, result.output
    assert "remove them (" in result.output
    assert (litter / "old.sif").exists() is not removed
    last = result.output.splitlines()[-1]
    assert last.startswith("removed 3 items, freed ") if removed else last == "nothing removed"
