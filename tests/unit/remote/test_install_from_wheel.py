"""The wheel `orchestrator remote install` sends from a tool installed from its wheel (no source tree): in a
venv filled from this tree's wheel by pip, the running code finds its own installed distribution, sends the
wheel it was installed from while that file is there and unchanged, and otherwise re-packs the installed
files into a wheel that holds what the original holds, byte for byte (its RECORD in another order)."""

from __future__ import annotations

import shutil
import subprocess
import zipfile
from pathlib import Path

import pytest
from support import venv_with

pytestmark = pytest.mark.slow

# In the venv: what remote install's this_wheel finds (never the source tree: the venv's copy has none beside it).
FIND = """
import sys
from pathlib import Path
from orchestrator.remote import install
dist = install.running_distribution()
print("dist", dist is not None and Path(str(dist.locate_file(""))).resolve())
print("wheel", install.this_wheel(Path(sys.argv[1]), None, lambda line: print("said", line)))
"""


def _entries(wheel: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(wheel) as zf:
        assert zf.testzip() is None
        return {name: zf.read(name) for name in zf.namelist()}


def test_a_wheel_installed_tool_sends_its_wheel_or_the_installed_files_repacked(tmp_path, this_wheel):
    downloads = tmp_path / "downloads"
    downloads.mkdir()
    wheel = downloads / this_wheel.name
    shutil.copy(this_wheel, wheel)
    venv = venv_with(wheel, tmp_path / "venv", system_site_packages=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    out = tmp_path / "out"
    out.mkdir()

    def find() -> list[str]:
        done = subprocess.run([venv / "bin/python", "-c", FIND, str(out)], capture_output=True, text=True, cwd=tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout.splitlines()

    lines = find()
    assert lines[0] == f"dist {site.resolve()}"  # the venv's copy, not this checkout seen through the system's site-packages
    assert lines[-1] == f"wheel {wheel}" and f"said sending the wheel this orchestrator was installed from: {wheel}" in lines

    wheel.unlink()  # the download deleted: the installed files, re-packed
    lines = find()
    assert any(line.startswith("said re-packed the installed files") for line in lines), lines
    repacked = Path(lines[-1].removeprefix("wheel "))
    assert repacked.parent == out and repacked.name == this_wheel.name
    got, want = _entries(repacked), _entries(this_wheel)
    record = next(name for name in want if name.endswith(".dist-info/RECORD"))
    assert sorted(got) == sorted(want)
    assert [n for n in want if got[n] != want[n]] == [record]
    assert sorted(got[record].decode().splitlines()) == sorted(want[record].decode().splitlines())

    # A file changed after the install: nothing to send, and the error names --wheels.
    (site / "orchestrator" / "__init__.py").write_text((site / "orchestrator" / "__init__.py").read_text() + "\n# patched\n")
    done = subprocess.run([venv / "bin/python", "-c", FIND, str(out)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode != 0 and "was changed after the install" in done.stderr and "--wheels DIR" in done.stderr
