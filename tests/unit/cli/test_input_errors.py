"""Issue 22, section 5: each input that gave a traceback or an unclear answer gets one
message naming the input and what is wrong, exit status 2, and nothing half-written.

Commands run in this process (click's runner). `run` always names the local profile, so
no Slurm is asked even where a testbed is up.
"""

from __future__ import annotations

import errno
import os
import pathlib
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, invoke, make_project

from orchestrator.slurm import times

ONE_ITEM = """\
stages:
  train:
    matrix:
      v: ${values}
    cmd: orchestrator run --time ${time} -- python -c pass '${item.v}'
"""


def one_item(where: Path, time: str = "10", values: list[str] | None = None, settings: dict | None = None) -> Path:
    """A DVC project with one orchestrated stage on the local profile."""
    params = {
        "orchestrator": settings if settings is not None else {"cluster": "local", "account": ACCOUNT, "image": "none"},
        "values": values or ["x"],
        "time": time,
    }
    return make_project(where, dvc_yaml=ONE_ITEM, params_yaml=yaml.safe_dump(params))


def files_under(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


def user_error(result, *fragments: str) -> str:
    """The result is a user error: exit 2, no traceback, an `error:` line holding every fragment."""
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert "error:" in result.output or "Error:" in result.output, result.output
    for fragment in fragments:
        assert fragment in result.output, result.output
    return result.output


# --- the project folder, and paths the system refuses -------------------------------------------


@pytest.mark.parametrize("command", ["render", "status", "submit", "cancel"])
def test_a_project_path_through_a_regular_file(tmp_path, command):
    (tmp_path / "a-file").write_text("x")
    user_error(invoke(command, "--project", str(tmp_path / "a-file" / "project")), "a-file/project", "Not a directory")


@pytest.mark.parametrize("command", ["status", "show x", "logs x", "cancel"])
def test_a_project_that_does_not_exist_is_not_an_empty_project(tmp_path, command):
    *args, item = command.split() if " " in command else (command, None)
    argv = [*args, *([item] if item else []), "--project", str(tmp_path / "nowhere")]
    user_error(invoke(*argv), "nowhere", "no such folder")


def test_a_project_that_is_a_file_or_a_device(tmp_path):
    (tmp_path / "f").write_text("x")
    user_error(invoke("status", "--project", str(tmp_path / "f")), "is not a folder")
    user_error(invoke("status", "--project", "/dev/null"), "'/dev/null' is not a folder")


def test_a_project_name_longer_than_the_file_system_allows(tmp_path):
    user_error(invoke("status", "--project", str(tmp_path / ("a" * 300))), "File name too long")


def test_the_state_folder_through_a_regular_file_stops_render_and_run(tmp_path, monkeypatch):
    project = one_item(tmp_path / "p")
    (project / ".orchestrator").write_text("not a folder")
    in_the_way = "is in the way where a folder should be"
    user_error(invoke("render", "--project", str(project)), "/.orchestrator'", in_the_way)
    monkeypatch.chdir(project)
    user_error(invoke("run", "--cluster", "local", "--name", "x", "--", "true"), "/.orchestrator'", in_the_way)
    assert (project / ".orchestrator").read_text() == "not a folder"


def test_the_state_folder_on_a_pseudo_file_system(tmp_path):
    """.orchestrator a link into /proc (nothing can be made there): one message naming the path."""
    project = one_item(tmp_path / "p")
    (project / ".orchestrator").symlink_to("/proc/self")
    user_error(invoke("render", "--project", str(project)), "/.orchestrator/")


def test_a_read_only_project(tmp_path, monkeypatch):
    """As a read-only file system answers (a test cannot mount one without privileges)."""
    project = one_item(tmp_path / "p")

    def refuse(self, *args, **kwargs):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(self))

    monkeypatch.setattr(pathlib.Path, "mkdir", refuse)
    monkeypatch.setattr(pathlib.Path, "write_text", refuse)
    before = files_under(project)
    out = user_error(invoke("render", "--project", str(project)), "Read-only file system", "choose a folder you can write")
    assert len(out.strip().splitlines()) == 1
    monkeypatch.chdir(project)
    user_error(invoke("run", "--cluster", "local", "--name", "x", "--", "true"), "Read-only file system")
    assert files_under(project) == before


@pytest.mark.parametrize("out", ["/proc/self/scripts", "/dev/null/scripts", "/sys/kernel/orchestrator-scripts"])
def test_render_out_on_a_pseudo_file_system(tmp_path, out):
    project = one_item(tmp_path / "p")
    user_error(invoke("render", "--project", str(project), "--out", out), repr(out))
    assert not Path(out).exists()


def test_the_backstop_keeps_programming_errors_as_tracebacks(monkeypatch):
    """Only an OSError naming a file is the user's; one without a name is a bug and stays visible."""
    from orchestrator.config import profile

    def broken():
        raise OSError("no file named")

    monkeypatch.setattr(profile, "builtin_names", broken)
    result = invoke("clusters")
    assert isinstance(result.exception, OSError) and result.exit_code == 1


def test_the_backstop_names_the_file_and_the_reason(monkeypatch):
    from orchestrator.config import profile

    def full():
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/scratch/x")

    monkeypatch.setattr(profile, "builtin_names", full)
    user_error(invoke("clusters"), "'/scratch/x': No space left on device (the disk is full")


# --- names and values too long for a file name ---------------------------------------------------


def test_an_item_name_longer_than_a_file_name_may_be(tmp_path, monkeypatch):
    project = one_item(tmp_path / "p")
    monkeypatch.chdir(project)
    result = invoke("run", "--cluster", "local", "--name", "n" * 300, "--", "true")
    assert result.exit_code in (0, 2) and "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output


@pytest.mark.parametrize("cluster", ["local", "testbed"])
def test_a_very_long_matrix_value_leaves_no_scripts_folder_behind(tmp_path, cluster):
    """Rendered or refused as a whole: a failed render leaves neither an empty folder nor the
    script of the item before it (the property test found `0` then 229 `a`s on testbed)."""
    project = one_item(tmp_path / "p", values=["0", "v" * 400])
    out = tmp_path / "scripts"
    result = invoke("render", "--project", str(project), "--cluster", cluster, "--out", str(out))
    assert result.exit_code in (0, 2) and "Traceback" not in result.output, result.output
    if result.exit_code == 2:
        assert not out.exists(), f"{out} left behind by a failed render, holding {files_under(out)}"


def test_an_empty_matrix_value_is_refused_with_a_message(tmp_path):
    """DVC's own answer is a bare `assert key` (dvc/parsing/__init__.py): pipeline/stages.py checks
    the item's name before DVC resolves it."""
    project = one_item(tmp_path / "p", values=[""])
    result = invoke("render", "--project", str(project))
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"traceback for an empty matrix value: {result.exception!r}"
    )
    assert result.exit_code == 2 and "error:" in result.output


def test_a_params_value_dvc_s_yaml_reader_cannot_read(tmp_path):
    """`._` is text to YAML 1.1, but DVC's YAML 1.2 reader (ruamel) takes it for a float and then fails
    float('.') with a ValueError of its own, which `dvc repro` shows as an unexpected error. Found by
    the fuzz test of matrix values (tests/integration/local/test_cli_inputs.py). The tool reads params
    as DVC does, so its own reading says so first, where the value is."""
    project = one_item(tmp_path / "p", values=["._"])
    said = user_error(invoke("render", "--project", str(project)), "params.yaml is not valid YAML at line")
    assert "'._' is no number (quote it for text)" in said
    assert not (project / ".orchestrator" / "scripts").exists()


def test_a_dvc_yaml_value_dvc_s_yaml_reader_cannot_read(tmp_path):
    """The same text in dvc.yaml itself, which DVC's reader loads before the params."""
    project = one_item(tmp_path / "p")
    (project / "dvc.yaml").write_text(ONE_ITEM.replace("v: ${values}", "v: [x, ._]"))
    out = user_error(invoke("render", "--project", str(project)), f"DVC cannot read {project / 'dvc.yaml'}", "quote the value")
    assert "params of" not in out
    assert not (project / ".orchestrator" / "scripts").exists()


# --- time limits ----------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", ["25:99:99", "1-24:00:00", "2 hours", "١٠"])
def test_a_bad_time_limit_on_the_command_line(tmp_path, monkeypatch, bad):
    project = one_item(tmp_path / "p")
    monkeypatch.chdir(project)
    out = user_error(invoke("run", "--cluster", "local", "--time", bad, "--", "true"), repr(bad), "MM:SS", "D-HH:MM:SS")
    assert "--time" in out
    assert not (project / ".orchestrator" / "ledger").exists()


def test_a_bad_time_limit_in_dvc_yaml(tmp_path):
    project = one_item(tmp_path / "p", time="25:99:99")
    user_error(invoke("render", "--project", str(project)), "train@x", "'25:99:99' is not a Slurm time: minutes must be below 60")
    assert not (project / ".orchestrator" / "scripts").exists()


def test_a_bad_time_limit_in_params(tmp_path):
    project = one_item(tmp_path / "p", settings={"cluster": "local", "account": ACCOUNT, "image": "none", "time": "1:60"})
    user_error(invoke("render", "--project", str(project)), "params.yaml: orchestrator.time: '1:60'", "seconds must be below 60")


def test_a_bad_time_limit_in_a_profile(tmp_path):
    data = yaml.safe_load(Path(times.__file__).parents[1].joinpath("config/profiles/testbed.yaml").read_text())
    data["scheduler"]["default_time"] = "25:99:99"
    data["scheduler"]["partitions"]["debug"]["max_time"] = "UNLIMITED"  # Slurm's word for no limit is fine
    file = tmp_path / "p.yaml"
    file.write_text(yaml.safe_dump(data))
    out = user_error(invoke("clusters", "show", str(file)), "scheduler.default_time: '25:99:99' is not a Slurm time")
    assert "max_time" not in out


def test_a_partition_without_a_limit_takes_any_time_and_a_finite_one_is_enforced(tmp_path):
    data = yaml.safe_load(Path(times.__file__).parents[1].joinpath("config/profiles/testbed.yaml").read_text())
    data["scheduler"]["partitions"]["debug"]["max_time"] = "UNLIMITED"
    file = tmp_path / "p.yaml"
    file.write_text(yaml.safe_dump(data))
    project = one_item(tmp_path / "proj", time="40-00:00:00")
    assert invoke("render", "--project", str(project), "--cluster", str(file)).exit_code == 0
    user_error(invoke("render", "--project", str(project), "--cluster", "testbed"), "exceeds partition debug's limit")


# --- params.yaml's shape ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("section", "shape"),
    [("null", "empty (null)"), ("[a, b]", "a list"), ("3", "a number 3"), ("lumi", "text 'lumi'"), ("true", "a boolean")],
)
def test_the_orchestrator_section_of_the_wrong_shape(tmp_path, section, shape):
    project = one_item(tmp_path / "p")
    text = (project / "params.yaml").read_text()
    params = yaml.safe_load(text)
    params["orchestrator"] = yaml.safe_load(section)
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    user_error(invoke("render", "--project", str(project)), "params.yaml: 'orchestrator' is " + shape, "expected a mapping")


@pytest.mark.parametrize(("clusters", "fragment"), [("null", "'clusters' is empty"), ("{lumi: 3}", "clusters.lumi is a number 3")])
def test_the_clusters_section_of_the_wrong_shape(tmp_path, clusters, fragment):
    project = one_item(tmp_path / "p")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["clusters"] = yaml.safe_load(clusters)
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    user_error(invoke("render", "--project", str(project)), fragment)


def test_a_cluster_overlay_whose_orchestrator_section_is_not_a_mapping(tmp_path):
    project = one_item(tmp_path / "p")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["clusters"] = {"testbed": {"orchestrator": "x"}}
    (project / "params.yaml").write_text(yaml.safe_dump(params))
    user_error(invoke("render", "--project", str(project), "--cluster", "testbed"), "clusters.testbed: 'orchestrator' is text 'x'")


# --- --cluster ---------------------------------------------------------------------------------------


def test_cluster_given_a_folder(tmp_path):
    project = one_item(tmp_path / "p")
    (tmp_path / "profiles").mkdir()
    user_error(invoke("render", "--project", str(project), "--cluster", str(tmp_path / "profiles")), "is a folder", "built-in profiles:")
    user_error(invoke("clusters", "show", str(tmp_path / "profiles")), "is a folder")


def test_cluster_given_a_binary_file_a_device_or_no_yaml(tmp_path):
    (tmp_path / "bin.yaml").write_bytes(b"\x7fELF\x02\x01\x01\x00\x00\xff\xfe")
    (tmp_path / "nul.yaml").write_bytes(b"name: x\x00\n")
    (tmp_path / "bad.yaml").write_text("name: [unclosed\n")
    user_error(invoke("clusters", "show", str(tmp_path / "bin.yaml")), "is not a text file")
    user_error(invoke("clusters", "show", str(tmp_path / "nul.yaml")), "is a binary file")
    user_error(invoke("clusters", "show", str(tmp_path / "bad.yaml")), "is not valid YAML at line 2")
    user_error(invoke("clusters", "show", "/dev/zero"), "is not a regular file")


def test_cluster_given_an_unreadable_file(tmp_path, monkeypatch):
    """Unreadable as the system would say it (root reads any file, so the refusal is simulated)."""
    file = tmp_path / "p.yaml"
    file.write_text("name: x\n")
    real_open = os.open

    def refuse(path, *args, **kwargs):
        if pathlib.Path(path) == file:
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    user_error(invoke("clusters", "show", str(file)), "cannot be read: Permission denied")


def test_cluster_given_an_empty_value_or_a_huge_name(tmp_path):
    user_error(invoke("clusters", "show", "x" * 5000), "unknown cluster", "(5000 characters)")
    project = one_item(tmp_path / "p")
    user_error(invoke("render", "--project", str(project), "--cluster", ""), "--cluster '' is empty")


# --- environment variables -----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["maybe", "2", "nan"])
def test_a_force_variable_that_is_not_a_yes_or_no(tmp_path, monkeypatch, value):
    project = one_item(tmp_path / "p")
    monkeypatch.chdir(project)
    monkeypatch.setenv("ORCH_FORCE", value)
    user_error(invoke("run", "--cluster", "local", "--name", "x", "--", "true"), f"ORCH_FORCE={value!r} is not a yes or no")
    assert not (project / ".orchestrator" / "ledger").exists()


@pytest.mark.parametrize("value", ["", "0", "no", "false", "1", "yes", "TRUE"])
def test_the_force_variable_reads_yes_and_no(monkeypatch, value):
    from orchestrator.pipeline import invocation

    monkeypatch.setenv("ORCH_FORCE", value)
    assert invocation.force_variable() is (value.lower() in ("1", "yes", "true"))


@pytest.mark.parametrize("value", ["nan", "inf", "0", "-5"])
def test_testbed_timeout_must_be_a_finite_positive_number(value):
    # Refused by click before anything is started: nan would make every wait for a daemon end at once or never (issue 33).
    result = invoke("testbed", "up", "--timeout", value)
    assert result.exit_code == 2
    assert "Invalid value for '--timeout'" in result.output
    assert "Traceback" not in result.output
