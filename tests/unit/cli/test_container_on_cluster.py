"""`container build NAME --on-cluster` refusals, through click's runner: one message each, exit 2,
nothing sent or submitted (no ssh is reachable here: a refusal that got as far as ssh would say so)."""

from __future__ import annotations

import pytest
import yaml
from support import ACCOUNT, ROOT, invoke, make_tiny


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A tiny-image project whose profile is the testbed's with a container section (build as the test sets)."""
    monkeypatch.setenv("ORCHESTRATOR_SSH", "false")  # any ssh fails at once
    where = make_tiny(tmp_path / "proj")
    (where / "dvc.yaml").write_text("stages: {}\n")

    def with_profile(container: dict | None, login: dict | None = None):
        data = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
        data["name"] = "mine"
        if container is not None:
            data["container"] = container
        if login is not None:
            data["login"] = login
        path = tmp_path / "mine.yaml"
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        params = {"orchestrator": {"cluster": str(path), "account": ACCOUNT, "image": "tiny"}}
        (where / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
        return where

    return with_profile


BUILD = {"runtime": "apptainer", "image": "/shared/${USER}/tiny.sif", "build": {"partition": "debug"}}


def refused(*args: str) -> str:
    result = invoke("container", "build", *args)
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    return result.output


def test_on_cluster_with_push_or_output_is_refused(project):
    where = project(BUILD)
    out = refused("tiny", "--on-cluster", "--push", "-o", "x.sif", "--project", str(where))
    assert "--on-cluster puts the image where the profile's jobs read it (container.image): leave out --push and --out" in out


def test_the_remote_flags_need_on_cluster(project):
    where = project(BUILD)
    assert "--remote and --with-changes: only with --on-cluster" in refused("tiny", "--remote", "--with-changes", "--project", str(where))


def test_a_profile_without_a_build_section_is_one_message(project):
    where = project({"runtime": "apptainer", "image": "/shared/tiny.sif"}, login={"host": "nowhere.invalid"})
    out = refused("tiny", "--on-cluster", "--remote", "--project", str(where))
    assert "profile 'mine' says nowhere to build on the cluster: it has no container.build section" in out
    assert "ssh" not in out and not (where / ".orchestrator").exists()


def test_a_profile_without_a_login_node_says_what_remote_says(project):
    where = project(BUILD)
    out = refused("tiny", "--on-cluster", "--remote", "--project", str(where))
    assert "profile 'mine' names no login node to run on" in out


def test_another_image_than_the_profiles_needs_replace(project):
    where = project(BUILD, login={"host": "nowhere.invalid"})
    out = refused("site", "--on-cluster", "--remote", "--project", str(where))
    assert "--on-cluster: profile 'mine' runs image 'tiny' from /shared/${USER}/tiny.sif (params.yaml's orchestrator.image)" in out
    assert "you gave 'site'" in out
    assert "--replace-other-image to build it there anyway" in out


def test_here_off_the_login_node_is_refused(project, monkeypatch, tmp_path):
    where = project(BUILD)
    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch
    out = refused("tiny", "--on-cluster", "--here", "--project", str(where))
    assert "--on-cluster --here builds from the login node of" in out and "there is no sbatch on this machine" in out


def test_a_file_of_another_image_at_the_target_needs_replace(tmp_path):
    import json

    from orchestrator.containers.build import stamp_path
    from orchestrator.containers.cluster_build import guard_target
    from orchestrator.containers.push_target import OtherImageThere

    target = tmp_path / "x.sif"
    guard_target(target, "tiny", False, print)  # nothing there: nothing to guard
    target.write_bytes(b"not a SIF")
    st = target.stat()
    stamp_path(target).write_text(json.dumps({"version": 2, "name": "other", "size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    with pytest.raises(OtherImageThere, match=r"holds image 'other'.*you gave 'tiny'; pass --replace-other-image to overwrite"):
        guard_target(target, "tiny", False, print)
    said: list[str] = []
    guard_target(target, "tiny", True, said.append)
    assert said and "replacing it (--replace-other-image)" in said[0]
    guard_target(target, "other", False, print)  # the same image: a newer build of it goes ahead


@pytest.mark.parametrize("cluster", [None, "auto"])
def test_a_cluster_params_do_not_name_is_one_message_for_on_cluster_and_remote(project, cluster):
    where = project(BUILD, login={"host": "nowhere.invalid"})
    data = yaml.safe_load((where / "params.yaml").read_text())
    data["orchestrator"]["cluster"] = cluster
    (where / "params.yaml").write_text(yaml.safe_dump(data))
    said = "'auto'" if cluster else "not set"
    out = refused("tiny", "--on-cluster", "--remote", "--project", str(where))
    assert f"--on-cluster needs to know the cluster: params.yaml's orchestrator.cluster is {said}" in out
    result = invoke("status", "--remote", "--project", str(where))
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"--remote needs to know the cluster: params.yaml's orchestrator.cluster is {said}" in result.output
    assert "ssh" not in out + result.output and not (where / ".orchestrator").exists()  # nothing sent, nothing written


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "0.0 is not in the range 0<x<=604800"),
        ("-5", "-5.0 is not in the range 0<x<=604800"),
        ("soon", "'soon' is not a valid float range"),
        ("nan", "'nan' is not a finite number (0<x<=604800)"),  # passes every comparison: it would reach the job
        ("inf", "inf is not in the range 0<x<=604800"),
        ("1e9", "1000000000.0 is not in the range 0<x<=604800"),
    ],
)
def test_a_bad_timeout_is_refused_before_anything_is_sent(project, value, message):
    """--on-cluster hands --timeout to the build in the job: a bad one must not reach a job."""
    where = project(BUILD)
    out = refused("tiny", "--on-cluster", "--remote", "--timeout", value, "--project", str(where))
    assert "Invalid value for '--timeout'" in out and message in out
    assert "ssh" not in out and not (where / ".orchestrator").exists()
