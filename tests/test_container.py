"""Container images: definition rendering, the content hash, build errors (fake
runner), and real Apptainer builds (marker ``apptainer``).

The real tests build the project's CI image once per machine and content hash into
a persistent cache (``/var/cache/orchestrator-images``, or $ORCHESTRATOR_IMAGE_CACHE):
a second test run finds it up to date instead of rebuilding (a source change does
rebuild it: the source is in the image). "Changes rebuild" is shown on a tiny
``Bootstrap: scratch`` image, which builds in well under a second.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import ROOT, cli
from fakes import FakeRunner, ok

from orchestrator.containers import build, definition, images, inputs
from orchestrator.util.files import sha256_file
from orchestrator.util.runner import Completed

PYPROJECT = """\
[project]
name = "demo"
version = "0"
[project.optional-dependencies]
train = ["torch==2.13.0", "pytorch-lightning>=2.5,<2.7", "dvclive>=3.48"]
"""

TINY_DEF = """\
Bootstrap: scratch

%files
    {{ src_dir | path }} /opt/src

%labels
    org.orchestrator.image {{ name | label }}
    org.orchestrator.content-hash {{ content_hash | label }}
    org.orchestrator.git-commit {{ git_commit | label }}
    org.test.flavour {{ flavour | label }}
"""

IMAGES = """\
tiny:
  definition: tiny.def.j2
  source: [pkg, pyproject.toml]
site:
  definition: localimage.def.j2
  source: [pkg, pyproject.toml]
  base: base.sif
  activate: with-conda
"""


def make_tiny(where: Path, flavour: str = "plain") -> Path:
    """A project with a tiny scratch image (``tiny``) and the real localimage template (``site``)."""
    (where / "containers").mkdir(parents=True)
    (where / "pkg").mkdir()
    (where / "pkg" / "mod.py").write_text("x = 1\n")
    (where / "pyproject.toml").write_text(PYPROJECT)
    (where / "containers" / "images.yaml").write_text(IMAGES)
    (where / "containers" / "tiny.def.j2").write_text(TINY_DEF.replace("{{ flavour | label }}", flavour))
    (where / "containers" / "localimage.def.j2").write_text((ROOT / "containers" / "localimage.def.j2").read_text())
    return where


@pytest.fixture
def tiny(tmp_path) -> Path:
    return make_tiny(tmp_path / "proj")


@pytest.fixture
def isolated_tmp(tmp_path, monkeypatch) -> Path:
    """tempfile's folder (build contexts) inside tmp_path, to see what a build leaves behind."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    return tmp


def content_hash_of(project: Path, name: str, *overrides: str) -> str:
    return inputs.current_hash(project, name, overrides)


def fake_apptainer(rc: int = 0, write: bytes = b"SIF image bytes", output: str = "INFO:    Build complete\n") -> FakeRunner:
    """A runner whose `apptainer build` writes ``write`` to its output path and exits ``rc``."""

    def fake_build(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        Path(argv[-2]).write_bytes(write)  # a failed build may leave a half-written file
        return Completed(tuple(argv), rc, output, "FATAL:   While performing build: exit status 1\n" if rc else "")

    return FakeRunner(answers={"apptainer": fake_build, "git": ok("", rc=128)}, installed={"apptainer"})


# --- rendering -------------------------------------------------------------------------------


def test_ci_definition_renders_with_quoted_values_and_blank_build_values():
    prepared = inputs.prepare(ROOT, images.select(ROOT, "ci"))
    text = prepared.hashed_definition
    assert text.startswith("Bootstrap: debootstrap\nOSVersion: bookworm\n")
    assert '"/build-context/src" /opt/orchestrator/src' in text
    assert "'pytorch-lightning>=2.5,<2.7'" in text  # a shell word, quoted
    assert "org.orchestrator.content-hash -" in text and "org.orchestrator.git-commit -" in text
    assert "%test" in text and "import torch, pytorch_lightning, orchestrator, experiments" in text
    dests = [i.dest for i in prepared.inputs]
    assert "src/pyproject.toml" in dests and "src/orchestrator/containers/build.py" in dests
    assert "src/experiments/classify/__main__.py" in dests
    assert not [d for d in dests if "__pycache__" in d or d.endswith(".pyc")]
    if prepared.variables["torch_wheel"]:  # this machine has the wheel: copied in, no CUDA download
        assert '"/build-context/wheels/torch-2.13.0' in text and "--find-links /opt/orchestrator/wheels" in text
    else:
        assert "download.pytorch.org/whl/cpu" in text


def test_site_and_registry_definitions_keep_the_base_images_torch(tmp_path):
    base = tmp_path / "lumi.sif"
    base.write_bytes(b"base")
    lumi = inputs.prepare(ROOT, images.select(ROOT, "lumi", [f"base={base}"])).hashed_definition
    assert f"Bootstrap: localimage\nFrom: {base}\n" in lumi
    assert "$WITH_CONDA" in lumi and "torch==2.13.0" not in lumi and "'pytorch-lightning>=2.5,<2.7'" in lumi
    nvidia = inputs.prepare(ROOT, images.select(ROOT, "nvidia")).hashed_definition
    assert "Bootstrap: docker\nFrom: nvcr.io/nvidia/pytorch:" in nvidia
    assert "-c /opt/orchestrator/torch-constraint.txt" in nvidia and "torch==2.13.0" not in nvidia


@pytest.mark.parametrize(
    ("setting", "problem"),
    [
        ("from=nvcr.io/x; rm -rf /", "from: invalid value"),
        ("activate=maybe", "activate: invalid value"),
        ("mirror=ftp://x", "mirror: invalid value"),
        ("colour=blue", "unknown key 'colour'"),
        ("novalue", "expected KEY=VALUE"),
    ],
)
def test_image_values_are_validated(setting, problem):
    with pytest.raises(images.ContainerError, match="is invalid") as err:
        images.select(ROOT, "nvidia", [setting])
    assert problem in err.value.render() and "valid keys" in err.value.render()


def test_an_unknown_image_lists_the_images():
    with pytest.raises(images.ContainerError, match="no image 'nope'") as err:
        images.select(ROOT, "nope")
    assert "ci, lumi, nvidia" in err.value.render()


def test_a_value_the_definition_needs_must_be_set(tiny):
    with pytest.raises(images.ContainerError, match="uses base, which containers/images.yaml does not set"):
        images_yaml = tiny / "containers" / "images.yaml"
        images_yaml.write_text(images_yaml.read_text() + "nobase:\n  definition: localimage.def.j2\n  source: [pkg]\n")
        inputs.prepare(tiny, images.select(tiny, "nobase"))


def test_missing_source_paths_are_named(tiny):
    images_yaml = tiny / "containers" / "images.yaml"
    images_yaml.write_text(images_yaml.read_text().replace("source: [pkg, pyproject.toml]", "source: [pkg, gone]", 1))
    with pytest.raises(images.ContainerError, match="source paths missing in .*: gone"):
        inputs.prepare(tiny, images.select(tiny, "tiny"))


def test_source_is_an_input_only_when_the_definition_copies_it_in(tiny):
    (tiny / "containers" / "tiny.def.j2").write_text("Bootstrap: scratch\n%labels\n    x {{ content_hash | label }}\n")
    assert inputs.prepare(tiny, images.select(tiny, "tiny")).inputs == ()


def test_undefined_template_names_are_errors(tiny):
    (tiny / "containers" / "tiny.def.j2").write_text("Bootstrap: scratch\n%labels\n    x {{ colour }}\n")
    with pytest.raises(images.ContainerError, match="uses colour"):
        inputs.prepare(tiny, images.select(tiny, "tiny"))


@pytest.mark.parametrize("path", ["/tmp/a b", "/tmp/a'b", '/tmp/a"b', "/tmp/$HOME", "/tmp/*", "/tmp/a\nb"])
def test_files_paths_with_shell_or_quote_characters_are_refused(path):
    with pytest.raises(images.ContainerError):
        definition._path(path)


def test_shell_words_are_quoted():
    assert definition._q("a b'c") == "'a b'\"'\"'c'"
    with pytest.raises(images.ContainerError, match="line break"):
        definition._q("x\n%post")


# --- the content hash ----------------------------------------------------------------------------


def test_hash_is_stable_and_changes_with_definition_and_inputs(tiny):
    first = content_hash_of(tiny, "tiny")
    assert content_hash_of(tiny, "tiny") == first
    (tiny / "pkg" / "__pycache__").mkdir()
    (tiny / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"\0")
    (tiny / "README.md").write_text("docs do not go into images\n")
    assert content_hash_of(tiny, "tiny") == first  # caches and docs are not inputs
    (tiny / "pkg" / "mod.py").write_text("x = 2\n")
    second = content_hash_of(tiny, "tiny")
    assert second != first
    (tiny / "pkg" / "new.py").write_text("")
    third = content_hash_of(tiny, "tiny")
    assert third != second
    template = tiny / "containers" / "tiny.def.j2"
    template.write_text(template.read_text().replace("flavour plain", "flavour other"))
    assert content_hash_of(tiny, "tiny") != third


def test_hash_does_not_depend_on_the_project_location(tmp_path):
    assert content_hash_of(make_tiny(tmp_path / "a"), "tiny") == content_hash_of(make_tiny(tmp_path / "b b"), "tiny")


def test_a_localimage_base_is_an_input(tiny):
    (tiny / "base.sif").write_bytes(b"v1")
    first = content_hash_of(tiny, "site")
    (tiny / "base.sif").write_bytes(b"v2")
    assert content_hash_of(tiny, "site") != first


def test_big_files_are_hashed_once_then_known_by_stat(tmp_path):
    big = tmp_path / "big.whl"
    big.write_bytes(b"\1" * inputs.BIG_FILE)
    inp = [inputs.Input("wheels/big.whl", big)]
    digests, cache = inputs.digest_inputs(inp)
    assert digests["wheels/big.whl"] == sha256_file(big)
    cache[str(big)][3] = "from-the-cache"
    assert inputs.digest_inputs(inp, cache)[0]["wheels/big.whl"] == "from-the-cache"
    os.utime(big, ns=(1, 1))  # touched (or replaced): hashed again
    assert inputs.digest_inputs(inp, cache)[0]["wheels/big.whl"] == sha256_file(big)


def test_torch_wheel_lookup(tmp_path):
    import platform

    arch = platform.machine()
    for name in (f"torch-2.13.0+cpu-cp310-cp310-manylinux_2_28_{arch}.whl", f"torch-2.12.0+cpu-cp311-cp311-manylinux_2_28_{arch}.whl"):
        (tmp_path / name).write_bytes(b"")
    reqs = ["torch==2.13.0", "dvclive"]
    assert inputs.find_torch_wheel(reqs, str(tmp_path), "3.11") is None
    good = tmp_path / f"torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_{arch}.whl"
    good.write_bytes(b"")
    assert inputs.find_torch_wheel(reqs, str(tmp_path), "3.11") == good
    assert inputs.find_torch_wheel(["torch>=2"], str(tmp_path), "3.11") is None  # only an exact pin picks a wheel


# --- builds with a fake runtime ----------------------------------------------------------------


def leftovers(out_dir: Path, tmp: Path) -> list[str]:
    """Files a build must not leave: temporary images, staging folders."""
    found = [p.name for p in out_dir.glob(".*.tmp")] if out_dir.exists() else []
    return found + [p.name for p in tmp.iterdir()]


def test_no_runtime_is_one_clear_error(tiny):
    with pytest.raises(images.ContainerError, match="neither apptainer nor singularity is on PATH"):
        build.build(tiny, "tiny", FakeRunner(installed=set()))


def test_no_runtime_on_the_command_line(tiny, monkeypatch):
    monkeypatch.setenv("PATH", str(tiny))  # nothing there
    from orchestrator.cli import main

    result = CliRunner().invoke(main, ["container", "build", "tiny", "--project", str(tiny)])
    assert result.exit_code != 0
    assert "neither apptainer nor singularity is on PATH" in result.output and "Traceback" not in result.output


def test_singularity_is_used_when_apptainer_is_missing(tiny, isolated_tmp):
    runner = fake_apptainer()
    runner.answers["singularity"] = runner.answers.pop("apptainer")
    runner.installed = {"singularity"}
    result = build.build(tiny, "tiny", runner)
    assert result.built and runner.called("singularity")[-1][1:3] == ["build", "--fakeroot"]


def test_missing_localimage_base_names_the_path(tiny, isolated_tmp):
    runner = fake_apptainer()
    with pytest.raises(images.ContainerError, match=r"the base image .*base\.sif does not exist") as err:
        build.build(tiny, "site", runner)
    assert "--set base=PATH" in err.value.render()
    assert not [c for c in runner.calls if c[:2] == ["apptainer", "build"]]
    assert not (tiny / ".orchestrator").exists() and leftovers(tiny, isolated_tmp) == []


def test_failing_build_leaves_no_image_and_no_temporaries(tiny, isolated_tmp):
    runner = fake_apptainer(rc=255, write=b"half an image")
    with pytest.raises(images.BuildError) as err:
        build.build(tiny, "tiny", runner)
    out_dir = tiny / build.IMAGES_DIR
    message = err.value.render()
    assert "building image 'tiny' failed" in message and "exited with 255" in message
    assert "FATAL:   While performing build" in message and str(out_dir / "tiny.build.log") in message
    assert err.value.exit_code == 1
    assert not (out_dir / "tiny.sif").exists() and not (out_dir / "tiny.sif.json").exists()
    assert leftovers(out_dir, isolated_tmp) == []
    assert "FATAL" in (out_dir / "tiny.build.log").read_text()
    assert not (tiny / "containers" / "tiny.digest").exists()


def test_timed_out_build_leaves_nothing(tiny, isolated_tmp):
    def slow(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        Path(argv[-2]).write_bytes(b"partial")
        raise subprocess.TimeoutExpired(argv, 5, output=b"INFO:    Starting build...\n")

    runner = FakeRunner(answers={"apptainer": slow, "git": ok("", rc=128)}, installed={"apptainer"})
    with pytest.raises(images.BuildError, match="timed out after 5 s"):
        build.build(tiny, "tiny", runner, timeout=5)
    assert leftovers(tiny / build.IMAGES_DIR, isolated_tmp) == [] and not (tiny / build.IMAGES_DIR / "tiny.sif").exists()


def test_build_then_up_to_date_then_rebuild_on_change(tiny, isolated_tmp):
    runner = fake_apptainer()
    first = build.build(tiny, "tiny", runner)
    image = tiny / build.IMAGES_DIR / "tiny.sif"
    assert first.built and image.read_bytes() == b"SIF image bytes"
    (argv,) = [c for c in runner.calls if c[1] == "build"]
    assert argv[:4] == ["apptainer", "build", "--fakeroot", "--force"] and Path(argv[4]).parent == image.parent
    assert Path(argv[4]).name.startswith(".tiny.sif.") and argv[5].endswith("tiny.def")  # built beside, renamed into place
    stamp = json.loads((tiny / build.IMAGES_DIR / "tiny.sif.json").read_text())
    assert stamp["content_hash"] == first.content_hash and stamp["digest"] == first.digest == "sha256:" + sha256_file(image)
    assert stamp["runtime"] == "apptainer version 1.4.5" and stamp["git_commit"] == "unknown"
    assert (tiny / "containers" / "tiny.digest").read_text() == first.digest + "\n"
    assert leftovers(image.parent, isolated_tmp) == []

    runner.calls.clear()
    again = build.build(tiny, "tiny", runner)
    assert not again.built and again.digest == first.digest
    assert not [c for c in runner.calls if c[:2] == ["apptainer", "build"]]

    (tiny / "containers" / "tiny.digest").unlink()  # e.g. a fresh clone: rewritten, nothing built
    build.build(tiny, "tiny", runner)
    assert (tiny / "containers" / "tiny.digest").read_text() == first.digest + "\n"

    killed = image.parent / ".tiny.sif.abcd1234.tmp"  # what a build killed by SIGKILL leaves
    killed.write_bytes(b"half")
    (tiny / "pkg" / "mod.py").write_text("x = 3\n")
    lines: list[str] = []
    third = build.build(tiny, "tiny", runner, say=lines.append)
    assert third.built and third.content_hash != first.content_hash and "changed: pkg/mod.py" in lines[0]
    assert not killed.exists()  # the next build removes it, under the image's lock
    assert build.build(tiny, "tiny", runner, force=True).built


def test_rendered_definition_carries_hash_and_commit_labels(tiny, isolated_tmp):
    seen = {}

    def fake_build(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        seen["def"] = Path(argv[-1]).read_text()
        seen["staged"] = sorted(str(p.relative_to(Path(argv[-1]).parent)) for p in Path(argv[-1]).parent.rglob("*") if p.is_file())
        Path(argv[-2]).write_bytes(b"img")
        return Completed(tuple(argv), 0, "", "")

    head = "a" * 40
    git = lambda argv: Completed(tuple(argv), 0, head + "\n" if "rev-parse" in argv else " M pkg/mod.py\n", "")
    runner = FakeRunner(answers={"apptainer": fake_build, "git": git}, installed={"apptainer", "git"})
    result = build.build(tiny, "tiny", runner)
    assert f"org.orchestrator.content-hash {result.content_hash}\n" in seen["def"]
    assert f"org.orchestrator.git-commit {head}-dirty\n" in seen["def"]
    assert seen["staged"] == ["src/README.md", "src/pkg/mod.py", "src/pyproject.toml", "tiny.def"]


# --- real Apptainer ------------------------------------------------------------------------------

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
    proc, seconds = cli("build", "ci", "--output", str(ci_image), "--digest-file", str(ci_image.with_suffix(".digest")))
    assert proc.returncode == 0, proc.stderr
    assert "ci: up to date" in proc.stdout
    assert seconds < 2.0, f"the no-op check took {seconds:.2f} s (Python start-up included); benchmarks/container_start.py has the figure"


@pytest.mark.apptainer
def test_changes_rebuild_a_real_image(apptainer, tmp_path):
    project = make_tiny(tmp_path / "proj")
    built, _ = cli("build", "tiny", cwd=project, timeout=300)
    assert built.returncode == 0 and "tiny: built" in built.stdout, built.stderr
    image = project / build.IMAGES_DIR / "tiny.sif"
    first = (project / "containers" / "tiny.digest").read_text()
    same, seconds = cli("build", "tiny", cwd=project)
    assert "tiny: up to date" in same.stdout and seconds < 2.0

    template = project / "containers" / "tiny.def.j2"
    template.write_text(template.read_text().replace("flavour plain", "flavour spicy"))
    rebuilt, _ = cli("build", "tiny", cwd=project, timeout=300)
    assert rebuilt.returncode == 0 and "tiny: built" in rebuilt.stdout and "changed: the definition" in rebuilt.stderr
    labels = subprocess.run([apptainer, "inspect", "--labels", str(image)], capture_output=True, text=True, check=True).stdout
    stamp = json.loads(build.stamp_path(image).read_text())
    assert "org.test.flavour: spicy" in labels and f"org.orchestrator.content-hash: {stamp['content_hash']}" in labels
    assert (project / "containers" / "tiny.digest").read_text() != first
    assert (project / "containers" / "tiny.digest").read_text() == stamp["digest"] + "\n"

    (project / "pkg" / "mod.py").write_text("x = 42\n")
    changed, _ = cli("build", "tiny", cwd=project, timeout=300)
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
    derived, _ = cli("build", "derived", cwd=project, timeout=300)
    assert derived.returncode == 0 and "derived: built" in derived.stdout, derived.stderr
    assert "derived: up to date" in cli("build", "derived", cwd=project)[0].stdout
    (project / "pkg" / "mod.py").write_text("x = 43\n")
    assert "tiny: built" in cli("build", "tiny", cwd=project, timeout=300)[0].stdout
    again, _ = cli("build", "derived", cwd=project, timeout=300)
    assert "derived: built" in again.stdout and f"changed: base:{image}" in again.stderr


@pytest.mark.apptainer
def test_a_failing_real_build_leaves_nothing_half_written(apptainer, tmp_path):
    project = make_tiny(tmp_path / "proj")
    template = project / "containers" / "tiny.def.j2"
    template.write_text(template.read_text().replace("/opt/src\n", "/opt/src\n    /nonexistent/input /opt/x\n"))
    proc, _ = cli("build", "tiny", cwd=project, timeout=300)
    out_dir = project / build.IMAGES_DIR
    assert proc.returncode == 1
    assert "building image 'tiny' failed" in proc.stderr and "tiny.build.log" in proc.stderr and "/nonexistent/input" in proc.stderr
    assert not (out_dir / "tiny.sif").exists() and not list(out_dir.glob(".*.tmp"))


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
    first, _ = cli("build", "tiny", "--push", *ssh, cwd=project, timeout=300)
    assert first.returncode == 0, first.stdout + first.stderr
    pushed = remote / "project_465000858" / "tiny.sif"
    assert "bytes sent" in first.stdout and pushed.read_bytes() == (project / build.IMAGES_DIR / "tiny.sif").read_bytes()
    again, _ = cli("build", "tiny", "--push", *ssh, cwd=project)
    assert again.returncode == 0 and "tiny: up to date" in again.stdout and "already there, nothing sent" in again.stdout
    (project / "cluster.yaml").write_text(yaml.safe_dump({**profile, "container": {**profile["container"], "push_host": "root@127.0.0.1"}}))
    unreachable, _ = cli(
        "build", "tiny", "--push", "--ssh-option=-p", "--ssh-option=1", "--ssh-option=-oConnectTimeout=3", "--ssh-option=-oBatchMode=yes",
        cwd=project,
    )
    assert unreachable.returncode != 0 and "cannot reach" in unreachable.stderr and "Traceback" not in unreachable.stderr
