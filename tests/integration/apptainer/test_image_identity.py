"""One identity per content, with real Apptainer builds (marker ``apptainer``): the digest file
(containers/<name>.digest, a DVC dependency of the training stages) holds the image's content
hash, so two builds of the same inputs give one digest file although their SIFs differ, a revert
gives the old digest back, and a forced rebuild leaves `dvc status` of the shipped pipeline
clean. The images hold the dependencies, not the project's code: a change to
the code takes no rebuild, a change to the dependency list the full one.

The tiny ``Bootstrap: scratch`` image builds in under a second; the CI image's forced rebuild
(minutes) is measured in benchmarks/container_build.py (its dependency revert gives the cold
build's digest back from other SIF bytes).
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from support import ROOT, container_cli, dvc, make_project, make_tiny

from orchestrator.containers import build
from orchestrator.util.files import sha256_file

pytestmark = pytest.mark.apptainer

# A tiny image as the shipped ones are made: no project code in it (no `source`), the train
# extra's dependency list in its definition (here in %help: a scratch image runs nothing).
THIN_DEF = """\
Bootstrap: scratch

%labels
    org.orchestrator.image {{ name | label }}
    org.orchestrator.content-hash {{ content_hash | label }}

%help
    dependencies: {{ requirements | map("q") | join(" ") }}
"""


def thin_tiny(where: Path) -> Path:
    project = make_tiny(where)
    images_yaml = project / "containers" / "images.yaml"
    images_yaml.write_text(images_yaml.read_text().replace("source: [pkg, pyproject.toml]", "source: []", 1))
    (project / "containers" / "tiny.def.j2").write_text(THIN_DEF)
    return project


def built(proc: subprocess.CompletedProcess) -> bool:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return "tiny: built" in proc.stdout


def test_two_builds_of_the_same_inputs_give_one_digest_file_and_a_revert_gives_it_back(apptainer, tmp_path):
    project = make_tiny(tmp_path / "proj")
    image = project / build.IMAGES_DIR / "tiny.sif"
    digest_file = project / "containers" / "tiny.digest"
    assert built(container_cli("build", "tiny", cwd=project, timeout=300)[0])
    first, first_sif, written = digest_file.read_text(), sha256_file(image), digest_file.stat().st_mtime_ns
    assert first.startswith("content-sha256:")
    assert built(container_cli("build", "tiny", "--force", cwd=project, timeout=300)[0])
    assert sha256_file(image) != first_sif  # a SIF carries its build time and a random id...
    assert digest_file.read_text() == first and digest_file.stat().st_mtime_ns == written  # ...its identity does not
    labels = subprocess.run([apptainer, "inspect", "--labels", str(image)], capture_output=True, text=True, check=True).stdout
    assert f"org.orchestrator.content-hash: {first.strip()}" in labels
    assert json.loads(build.stamp_path(image).read_text())["digest"] == "sha256:" + sha256_file(image)  # the SIF's own, for push

    module = project / "pkg" / "mod.py"
    module.write_text("x = 2\n")  # this image copies the code in (source: [pkg, ...]): a new identity
    assert built(container_cli("build", "tiny", cwd=project, timeout=300)[0]) and digest_file.read_text() != first
    module.write_text("x = 1\n")  # the revert
    assert built(container_cli("build", "tiny", cwd=project, timeout=300)[0]) and digest_file.read_text() == first


def test_a_code_change_takes_no_rebuild_and_a_dependency_change_the_full_one(apptainer, tmp_path):
    project = thin_tiny(tmp_path / "proj")
    image = project / build.IMAGES_DIR / "tiny.sif"
    assert built(container_cli("build", "tiny", cwd=project, timeout=300)[0])
    sif, digest = sha256_file(image), (project / "containers" / "tiny.digest").read_text()

    (project / "pkg" / "mod.py").write_text("x = 2  # a one-line change\n")
    same, seconds = container_cli("build", "tiny", cwd=project)
    assert not built(same) and "tiny: up to date" in same.stdout and seconds < 2.0
    assert sha256_file(image) == sif and (project / "containers" / "tiny.digest").read_text() == digest

    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"dvclive>=3.48"', '"dvclive>=3.48.0"'))
    rebuilt, _ = container_cli("build", "tiny", cwd=project, timeout=300)
    assert built(rebuilt) and "changed: the definition" in rebuilt.stderr
    helptext = subprocess.run([apptainer, "run-help", str(image)], capture_output=True, text=True, check=True).stdout
    assert "'dvclive>=3.48.0'" in helptext and (project / "containers" / "tiny.digest").read_text() != digest


def shipped_copy(where: Path) -> Path:
    """The shipped pipeline in a fresh DVC project, its tasks in image ``tiny`` (made as the
    shipped images are: dependencies, no code; it builds in a second where the CI image takes
    minutes, and its identity is computed the same way), with the image built."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["orchestrator"]["image"] = "tiny"
    project = make_project(where, params_yaml=yaml.safe_dump(params, sort_keys=False))
    thin = thin_tiny(where / "tiny-src")
    shutil.copytree(thin / "containers", project / "containers", dirs_exist_ok=True)
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    shutil.copytree(ROOT / "experiments", project / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    assert built(container_cli("build", "tiny", cwd=project, timeout=300)[0])
    return project


def record_benchmark_outputs(project: Path) -> list[str]:
    """Outputs of every item of the shipped `benchmark` stage, then `dvc commit`: dvc.lock as
    after a training run (none is run), the image's digest file among the recorded deps."""
    items = []
    for cfg in yaml.safe_load((project / "params.yaml").read_text())["benchmark"]["device_cfgs"]:
        out = project / f"results/benchmark/pydoc-topics/tiny/{cfg['num_nodes']}x{cfg['num_gpus']}"
        (out / "model").mkdir(parents=True)
        (out / "model" / "model.ckpt").write_bytes(b"weights")
        for name in ("provenance.json", "metrics.json"):
            (out / name).write_text("{}\n")
        (out / "dvclive" / "plots" / "metrics").mkdir(parents=True)
        items.append(out)
    done = dvc(project, "commit", "-f", "benchmark")
    assert done.returncode == 0, done.stdout + done.stderr
    lock = (project / "dvc.lock").read_text()
    assert lock.count("containers/tiny.digest") == len(items), lock
    return [str(i) for i in items]


def status(project: Path) -> dict:
    done = dvc(project, "status", "benchmark", "--json")
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads(done.stdout)


def test_a_forced_rebuild_leaves_dvc_status_of_the_shipped_pipeline_clean(apptainer, tmp_path):
    project = shipped_copy(tmp_path / "clone")
    record_benchmark_outputs(project)
    assert status(project) == {}
    image = project / build.IMAGES_DIR / "tiny.sif"
    digest, sif = (project / "containers" / "tiny.digest").read_text(), sha256_file(image)

    # A second machine (or CI) builds the image again from the same inputs: another SIF, one digest.
    assert built(container_cli("build", "tiny", "--force", cwd=project, timeout=300)[0])
    assert sha256_file(image) != sif
    assert (project / "containers" / "tiny.digest").read_text() == digest
    assert status(project) == {}  # nothing to re-run: the digest the stages depend on did not change

    # A change to the code: the image stays up to date (nothing built); only the code dep is stale.
    model = project / "experiments" / "classify" / "__main__.py"
    model.write_text(model.read_text() + "\n# a one-line change\n")
    same, seconds = container_cli("build", "tiny", cwd=project)
    assert same.returncode == 0 and "tiny: up to date" in same.stdout and seconds < 2.0, same.stdout + same.stderr
    changed = status(project)
    assert changed and all(v == [{"changed deps": {"experiments": "modified"}}] for v in changed.values()), changed

    # A change to the dependency list: a new identity, and DVC sees the digest dep change (the test can fail).
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"dvclive>=3.48"', '"dvclive>=3.48.0"'))
    assert built(container_cli("build", "tiny", cwd=project, timeout=300)[0])
    assert (project / "containers" / "tiny.digest").read_text() != digest
    stale = status(project)
    assert all({"changed deps": {"containers/tiny.digest": "modified", "experiments": "modified"}} in v for v in stale.values()), stale
