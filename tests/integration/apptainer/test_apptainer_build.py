"""Real Apptainer builds (marker ``apptainer``) of the project's CI image and of a tiny
``Bootstrap: scratch`` image, and `container build --push` to an sshd on loopback (also ``ssh``).

The CI image is built once per machine and content hash into a persistent cache
(``/var/cache/orchestrator-images``, or $ORCHESTRATOR_IMAGE_CACHE; the ``ci_image`` fixture):
a second test run finds it up to date instead of rebuilding. It holds the dependencies, not
the project's code: a job runs the code of its workspace, bound into the container and first
on PYTHONPATH. "Changes rebuild" is shown on the tiny image, which builds in well under a
second; one identity per content in test_image_identity.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support import ROOT, container_cli, make_tiny

from orchestrator.containers import build

PROBE = """\
import json, os, sys
import torch, pytorch_lightning, experiments
from experiments.common import requeue
json.dump({"torch": torch.__version__, "experiments": experiments.__file__, "marker": getattr(experiments, "MARKER", None),
           "requeue": requeue.__file__, "pythonpath": os.environ.get("PYTHONPATH"), "cwd": os.getcwd()}, open(sys.argv[1], "w"))
"""


def local_container_plan(tmp_path: Path, image: Path, workspace: Path, command: tuple[str, ...]):
    """The plan of a job on this machine (the local profile) with every task in ``image``."""
    from orchestrator.config import params, selection
    from orchestrator.pipeline.runargs import JobSpec
    from orchestrator.scripts.plan import make_plan

    profile = yaml.safe_load(selection.load_profile("local").text)
    profile["container"] = {"runtime": "apptainer", "image": str(image)}
    path = tmp_path / "local-apptainer.yaml"
    path.write_text(yaml.safe_dump(profile))
    loaded = selection.load_profile(str(path))
    return make_plan(JobSpec(command=command, gpus_per_node=1), "probe", "", loaded, params.Settings(image="ci"), str(workspace), "local")


@pytest.mark.apptainer
@pytest.mark.slow
def test_ci_image_runs_the_training_stack(apptainer, ci_image, tmp_path):
    """The image brings torch and Lightning; the code is the job's workspace's, bound into the
    container and first on PYTHONPATH: `python experiments/x.py` imports the package from there."""
    from orchestrator.scripts import render

    workspace = tmp_path / "work space"
    shutil.copytree(ROOT / "experiments", workspace / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    init = workspace / "experiments" / "__init__.py"
    init.write_text(init.read_text() + '\nMARKER = "the workspace\'s own copy"\n')  # a change no image has seen
    (workspace / "experiments" / "probe.py").write_text(PROBE)
    plan = local_container_plan(tmp_path, ci_image, workspace, ("python", "experiments/probe.py", "out.json"))
    assert not plan.problems, plan.problems
    script = tmp_path / "probe.sh"
    script.write_text(render.render(plan))
    env = {**os.environ, "PYTHONPATH": "/leaked/host/path"}  # the login node's PYTHONPATH must not reach the job
    done = subprocess.run(["bash", str(script)], cwd=workspace, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    seen = json.loads((workspace / "out.json").read_text())
    assert seen["torch"].startswith("2.13.0") and seen["marker"] == "the workspace's own copy"
    assert seen["experiments"] == str(workspace / "experiments" / "__init__.py") and seen["requeue"].startswith(str(workspace))
    assert seen["pythonpath"] == str(workspace) and seen["cwd"] == str(workspace)  # the image sets none: no trailing ':'

    # The image itself holds no project code: outside a workspace nothing of it imports.
    bare = subprocess.run(
        [apptainer, "exec", str(ci_image), "python", "-c", "import experiments"],
        cwd="/",
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},  # apptainer passes ours in: a source checkout's would import
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert bare.returncode != 0 and "No module named 'experiments'" in bare.stderr
    labels = subprocess.run([apptainer, "inspect", "--labels", str(ci_image)], capture_output=True, text=True, check=True).stdout
    stamp = json.loads(build.stamp_path(ci_image).read_text())
    assert f"org.orchestrator.content-hash: {stamp['content_hash']}" in labels
    assert ci_image.with_suffix(".digest").read_text() == stamp["content_hash"] + "\n"


@pytest.mark.apptainer
def test_ci_image_noop_check_is_fast(ci_image):
    proc, seconds = container_cli("build", "ci", "--out", str(ci_image), "--digest-file", str(ci_image.with_suffix(".digest")))
    assert proc.returncode == 0, proc.stderr
    assert "ci: up to date" in proc.stdout
    assert seconds < 2.0, f"the no-op check took {seconds:.2f} s of CPU; benchmarks/container_start.py has the figure"


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
    assert (project / "containers" / "tiny.digest").read_text() == stamp["content_hash"] + "\n"

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
    assert "derived: built" in again.stdout and "changed: the base image" in again.stderr


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
    """`container build --push` without NAME: the image params.yaml names lands where the profile
    says jobs find it, readable as the local file is; a second push sends nothing; a file there
    holding another image (named by its own SIF label) is replaced only with --replace-other-image."""
    import shutil
    import stat

    import yaml

    project = make_tiny(tmp_path / "proj")
    images_yaml = project / "containers" / "images.yaml"
    images_yaml.write_text(images_yaml.read_text() + "other:\n  definition: tiny.def.j2\n  source: [pkg, pyproject.toml]\n")
    remote = tmp_path / "cluster project's dir"
    profile = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    profile["container"] = {"runtime": "apptainer", "image": f"{remote}/${{SLURM_JOB_ACCOUNT}}/tiny.sif", "push_host": sshd.host}
    (project / "cluster.yaml").write_text(yaml.safe_dump(profile))
    (project / "params.yaml").write_text("orchestrator: {cluster: cluster.yaml, account: project_465000858, image: tiny}\n")
    ssh = [f"--ssh-option={o}" for o in sshd.options]
    first, _ = container_cli("build", "--push", *ssh, cwd=project, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    pushed, local = remote / "project_465000858" / "tiny.sif", project / build.IMAGES_DIR / "tiny.sif"
    assert "tiny: pushed to" in first.stdout and "bytes sent" in first.stdout and pushed.read_bytes() == local.read_bytes()
    assert stat.S_IMODE(pushed.stat().st_mode) & stat.S_IRGRP
    assert json.loads(pushed.with_name("tiny.sif.orchestrator.json").read_text())["name"] == "tiny"
    record = json.loads(local.with_name("tiny.sif.pushes.json").read_text())
    assert record[f"{sshd.host}:{pushed}"]["name"] == "tiny"
    again, _ = container_cli("build", "tiny", "--push", *ssh, cwd=project)
    assert again.returncode == 0 and "tiny: up to date" in again.stdout and "already there, nothing sent" in again.stdout

    built, _ = container_cli("build", "other", cwd=project, timeout=300)
    assert built.returncode == 0, built.stderr
    shutil.copyfile(project / build.IMAGES_DIR / "other.sif", pushed)  # put there by hand: no sidecar, only its label
    pushed.with_name("tiny.sif.orchestrator.json").unlink()
    refused, _ = container_cli("build", "--push", *ssh, cwd=project)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert f"error: {sshd.host}:{pushed} holds image 'other' (built " in refused.stderr
    assert "you gave 'tiny'; pass --replace-other-image to overwrite" in refused.stderr and "Traceback" not in refused.stderr
    assert pushed.read_bytes() == (project / build.IMAGES_DIR / "other.sif").read_bytes()
    replaced, _ = container_cli("build", "--push", "--replace-other-image", *ssh, cwd=project)
    assert replaced.returncode == 0 and "replacing it (--replace-other-image)" in replaced.stderr, replaced.stderr
    assert pushed.read_bytes() == local.read_bytes()
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
