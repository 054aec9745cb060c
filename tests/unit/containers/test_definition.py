"""Container definitions (orchestrator/containers/images.py, definition.py, inputs.prepare): rendering
with quoted values, validated image values, and what a definition may use."""

from __future__ import annotations

import pytest
from support import ROOT

from orchestrator.containers import definition, images, inputs


def test_ci_definition_renders_with_quoted_values_and_blank_build_values():
    prepared = inputs.prepare(ROOT, images.select(ROOT, "ci"))
    text = prepared.hashed_definition
    assert text.startswith("Bootstrap: debootstrap\nOSVersion: bookworm\n")
    assert "'pytorch-lightning>=2.5,<2.7'" in text  # a shell word, quoted
    assert "org.orchestrator.content-hash -" in text and "org.orchestrator.git-commit -" in text
    assert "%test" in text and "import torch, pytorch_lightning, dvclive" in text
    # The project's code is not in the shipped image: jobs import it from their workspace.
    assert "/opt/orchestrator/src" not in text and not [i for i in prepared.inputs if i.dest.startswith("src/")]
    assert "PIP_CERT" not in text  # the build machine's CA bundle is no part of the identity
    if prepared.variables["torch_wheel"]:  # this machine has the wheel: copied in, no CUDA download
        assert '"/build-context/wheels/torch-2.13.0' in text and "--find-links /opt/orchestrator/wheels" in text
    else:
        assert "download.pytorch.org/whl/cpu" in text


def test_an_image_copies_the_projects_code_in_only_when_its_source_asks(tmp_path):
    prepared = inputs.prepare(ROOT, images.select(ROOT, "ci", ["source=pyproject.toml experiments"]))
    text = prepared.hashed_definition
    assert '"/build-context/src" /opt/orchestrator/src' in text and "pip install --no-deps /opt/orchestrator/src" in text
    dests = [i.dest for i in prepared.inputs]
    assert "src/pyproject.toml" in dests and "src/experiments/classify/__main__.py" in dests
    assert not [d for d in dests if "__pycache__" in d or d.endswith(".pyc") or d.startswith("src/orchestrator/")]
    for name in ("nvidia", "rocm"):
        site = inputs.prepare(ROOT, images.select(ROOT, name, ["source=pyproject.toml experiments"])).hashed_definition
        assert "pip install --no-deps /opt/orchestrator/src" in site
        assert "/opt/orchestrator/src" not in inputs.prepare(ROOT, images.select(ROOT, name)).hashed_definition


def test_a_definition_that_copies_the_source_in_unconditionally_needs_source(tiny):
    images_yaml = tiny / "containers" / "images.yaml"
    images_yaml.write_text(images_yaml.read_text().replace("source: [pkg, pyproject.toml]", "source: []", 1))
    with pytest.raises(images.ContainerError, match=r"empty path .*\(does the image set `source`"):
        inputs.prepare(tiny, images.select(tiny, "tiny"))


def test_site_and_registry_definitions_keep_the_base_images_torch(tmp_path):
    base = tmp_path / "lumi.sif"
    base.write_bytes(b"base")
    lumi = inputs.prepare(ROOT, images.select(ROOT, "lumi", [f"base={base}"])).hashed_definition
    assert f"Bootstrap: localimage\nFrom: {inputs.HASH_BASE}\n" in lumi  # the base's path is not its identity, its content is
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
