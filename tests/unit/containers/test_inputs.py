"""An image's content hash (orchestrator/containers/inputs.py): stable, changed by the definition and
every input, independent of where the project is; big files hashed once; the torch wheel found."""

from __future__ import annotations

import os
from pathlib import Path

from support import make_tiny

from orchestrator.containers import inputs
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
