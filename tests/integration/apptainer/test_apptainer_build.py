"""Real Apptainer builds (marker ``apptainer``) of the project's CI image and of a tiny
``Bootstrap: scratch`` image, and `container build --push` to an sshd on loopback (also ``ssh``).

The CI image is built once per machine and content hash into a persistent cache
(``/var/cache/orchestrator-images``, or $ORCHESTRATOR_IMAGE_CACHE; the ``ci_image`` fixture):
a second test run finds it up to date instead of rebuilding (a source change does rebuild
it: the source is in the image). "Changes rebuild" is shown on the tiny image, which builds
in well under a second.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from support import ROOT, container_cli, make_tiny

from orchestrator.containers import build


@pytest.mark.apptainer
@pytest.mark.slow
def test_ci_image_runs_the_training_stack(apptainer, ci_image):
    proc = subprocess.run(
        [
            apptainer,
            "exec",
            str(ci_image),
            "python",
            "-c",
            "import torch, pytorch_lightning, orchestrator, experiments; print(torch.__version__, experiments.__file__)",
        ],
        cwd="/",  # not the workspace: the image's own copy of the project must import
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    version, where = proc.stdout.split()
    assert version.startswith("2.13.0") and where.startswith("/opt/venv/")
    labels = subprocess.run([apptainer, "inspect", "--labels", str(ci_image)], capture_output=True, text=True, check=True).stdout
    stamp = json.loads(build.stamp_path(ci_image).read_text())
    assert f"org.orchestrator.content-hash: {stamp['content_hash']}" in labels


@pytest.mark.apptainer
def test_ci_image_noop_check_is_fast(ci_image):
    proc, seconds = container_cli("build", "ci", "--output", str(ci_image), "--digest-file", str(ci_image.with_suffix(".digest")))
    assert proc.returncode == 0, proc.stderr
    assert "ci: up to date" in proc.stdout
    assert seconds < 2.0, f"the no-op check took {seconds:.2f} s (Python start-up included); benchmarks/container_start.py has the figure"


@pytest.mark.apptainer
def test_changes_rebuild_a_real_image(apptainer, tmp_path):
    project = make_tiny(tmp_path / "proj")
    built, _ = container_cli("build", "tiny", cwd=project, timeout=300)
    assert built.returncode == 0 and "tiny: built" in built.stdout, built.stderr
    image = project / build.IMAGES_DIR / "tiny.sif"
    first = (project / "containers" / "tiny.digest").read_text()
    same, seconds = container_cli("build", "tiny", cwd=project)
    assert "tiny: up to date" in same.stdout and seconds < 2.0

    template = project / "containers" / "tiny.def.j2"
    template.write_text(template.read_text().replace("flavour plain", "flavour spicy"))
    rebuilt, _ = container_cli("build", "tiny", cwd=project, timeout=300)
    assert rebuilt.returncode == 0 and "tiny: built" in rebuilt.stdout and "changed: the definition" in rebuilt.stderr
    labels = subprocess.run([apptainer, "inspect", "--labels", str(image)], capture_output=True, text=True, check=True).stdout
    stamp = json.loads(build.stamp_path(image).read_text())
    assert "org.test.flavour: spicy" in labels and f"org.orchestrator.content-hash: {stamp['content_hash']}" in labels
    assert (project / "containers" / "tiny.digest").read_text() != first
    assert (project / "containers" / "tiny.digest").read_text() == stamp["digest"] + "\n"

    (project / "pkg" / "mod.py").write_text("x = 42\n")
    changed, _ = container_cli("build", "tiny", cwd=project, timeout=300)
    assert "tiny: built" in changed.stdout and "changed: pkg/mod.py" in changed.stderr
    exported = tmp_path / "sandbox"  # unpacking a SIF: what `Bootstrap: localimage` does too
    subprocess.run([apptainer, "build", "--sandbox", str(exported), str(image)], capture_output=True, check=True)
    assert (exported / "opt" / "src" / "pkg" / "mod.py").read_text() == "x = 42\n"

    # An image built on it (Bootstrap: localimage) is rebuilt when its base changes.
    images_yaml = project / "containers" / "images.yaml"
    images_yaml.write_text(images_yaml.read_text() + f"derived:\n  definition: derived.def.j2\n  base: {image}\n")
    (project / "containers" / "derived.def.j2").write_text(
        "Bootstrap: localimage\nFrom: {{ base | label }}\n\n%labels\n    org.orchestrator.content-hash {{ content_hash | label }}\n"
    )
    derived, _ = container_cli("build", "derived", cwd=project, timeout=300)
    assert derived.returncode == 0 and "derived: built" in derived.stdout, derived.stderr
    assert "derived: up to date" in container_cli("build", "derived", cwd=project)[0].stdout
    (project / "pkg" / "mod.py").write_text("x = 43\n")
    assert "tiny: built" in container_cli("build", "tiny", cwd=project, timeout=300)[0].stdout
    again, _ = container_cli("build", "derived", cwd=project, timeout=300)
    assert "derived: built" in again.stdout and f"changed: base:{image}" in again.stderr


@pytest.mark.apptainer
def test_a_failing_real_build_leaves_nothing_half_written(apptainer, tmp_path):
    project = make_tiny(tmp_path / "proj")
    template = project / "containers" / "tiny.def.j2"
    template.write_text(template.read_text().replace("/opt/src\n", "/opt/src\n    /nonexistent/input /opt/x\n"))
    proc, _ = container_cli("build", "tiny", cwd=project, timeout=300)
    out_dir = project / build.IMAGES_DIR
    assert proc.returncode == 1
    assert "building image 'tiny' failed" in proc.stderr and "tiny.build.log" in proc.stderr and "/nonexistent/input" in proc.stderr
    assert not (out_dir / "tiny.sif").exists() and not list(out_dir.glob(".*.tmp"))


@pytest.mark.apptainer
@pytest.mark.ssh
def test_build_push_to_the_profiles_image_path_then_nothing_to_send(apptainer, sshd, tmp_path):
    """`container build --push`: the image lands where the profile says jobs find it;
    a second push sends nothing."""
    import yaml

    project = make_tiny(tmp_path / "proj")
    remote = tmp_path / "cluster project's dir"
    profile = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    profile["container"] = {"runtime": "apptainer", "image": f"{remote}/${{SLURM_JOB_ACCOUNT}}/tiny.sif", "push_host": sshd.host}
    (project / "cluster.yaml").write_text(yaml.safe_dump(profile))
    (project / "params.yaml").write_text("orchestrator: {cluster: cluster.yaml, account: project_465000858}\n")
    ssh = [f"--ssh-option={o}" for o in sshd.options]
    first, _ = container_cli("build", "tiny", "--push", *ssh, cwd=project, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    pushed = remote / "project_465000858" / "tiny.sif"
    assert "bytes sent" in first.stdout and pushed.read_bytes() == (project / build.IMAGES_DIR / "tiny.sif").read_bytes()
    again, _ = container_cli("build", "tiny", "--push", *ssh, cwd=project)
    assert again.returncode == 0 and "tiny: up to date" in again.stdout and "already there, nothing sent" in again.stdout
    (project / "cluster.yaml").write_text(yaml.safe_dump({**profile, "container": {**profile["container"], "push_host": "root@127.0.0.1"}}))
    unreachable, _ = container_cli(
        "build",
        "tiny",
        "--push",
        "--ssh-option=-p",
        "--ssh-option=1",
        "--ssh-option=-oConnectTimeout=3",
        "--ssh-option=-oBatchMode=yes",
        cwd=project,
    )
    assert unreachable.returncode != 0 and "cannot reach" in unreachable.stderr and "Traceback" not in unreachable.stderr
