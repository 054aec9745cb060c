"""An image's content hash (orchestrator/containers/inputs.py): stable, changed by the definition and
every input, independent of where the project is, of the build machine's CA bundle and of a base
image's path; not changed by the project's code in the shipped images, changed by their dependency
list; big files hashed once; the torch wheel found."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from support import ROOT, make_tiny

from orchestrator.containers import images, inputs
from orchestrator.util.files import sha256_file


def content_hash_of(project: Path, name: str, *overrides: str) -> str:
    return inputs.current_hash(project, name, overrides)


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
    first = content_hash_of(make_tiny(tmp_path / "a"), "tiny")
    assert first.startswith("content-sha256:") and len(first) == len("content-sha256:") + 64
    assert content_hash_of(make_tiny(tmp_path / "b b"), "tiny") == first


def test_a_localimage_base_is_an_input_by_its_content_not_its_path(tiny, tmp_path):
    (tiny / "base.sif").write_bytes(b"v1")
    first = content_hash_of(tiny, "site")
    elsewhere = tmp_path / "another-machine" / "lumi.sif"
    elsewhere.parent.mkdir()
    shutil.copy(tiny / "base.sif", elsewhere)
    assert content_hash_of(tiny, "site", f"base={elsewhere}") == first  # the same base at another path: the same image
    (tiny / "base.sif").write_bytes(b"v2")
    assert content_hash_of(tiny, "site") != first


CA_DEF = """\
Bootstrap: scratch
{% if ca_bundle %}
%files
    {{ ca_bundle | path }} /opt/ca.crt
{% endif %}
%labels
    org.orchestrator.content-hash {{ content_hash | label }}
"""


def test_the_build_machines_ca_bundle_is_no_part_of_the_identity(tiny, tmp_path):
    (tiny / "containers" / "tiny.def.j2").write_text(CA_DEF)
    ca = tmp_path / "proxy-ca.crt"
    ca.write_text("-----BEGIN CERTIFICATE----- one\n")
    without = content_hash_of(tiny, "tiny", "ca_bundle=none")
    with_ca = content_hash_of(tiny, "tiny", f"ca_bundle={ca}")
    ca.write_text("-----BEGIN CERTIFICATE----- another\n")
    assert without == with_ca == content_hash_of(tiny, "tiny", f"ca_bundle={ca}")
    # It is still staged and given to the build: only the identity leaves it out.
    prepared = inputs.prepare(tiny, images.select(tiny, "tiny", [f"ca_bundle={ca}"]))
    assert [(i.dest, i.identity) for i in prepared.inputs if i.path == ca] == [("ca.crt", None)]
    assert prepared.variables["ca_bundle"] == "ca.crt" and "ca.crt" not in prepared.hashed_definition


def shipped_copy(where: Path) -> Path:
    """What the shipped images are built from: containers/, pyproject.toml, and the code beside them."""
    where.mkdir()
    shutil.copytree(ROOT / "containers", where / "containers")
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    shutil.copytree(ROOT / "experiments", where / "experiments", ignore=shutil.ignore_patterns("__pycache__"))
    return where


def test_the_shipped_images_change_with_their_dependencies_not_with_the_code(tmp_path):
    project = shipped_copy(tmp_path / "p")
    (project / "base.sif").write_bytes(b"a site's base image")
    names = {"ci": (), "lumi": ("base=base.sif",), "nvidia": (), "rocm": ()}
    before = {name: content_hash_of(project, name, *sets) for name, sets in names.items()}
    model = project / "experiments" / "classify" / "__main__.py"
    model.write_text(model.read_text() + "\n# one line more\n")
    (project / "experiments" / "new_module.py").write_text("x = 1\n")
    assert {name: content_hash_of(project, name, *sets) for name, sets in names.items()} == before
    pyproject = project / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('"numpy>=1.26"', '"numpy>=1.26.0"'))
    after = {name: content_hash_of(project, name, *sets) for name, sets in names.items()}
    assert all(after[name] != before[name] for name in names), after


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
