"""Recognising a forced run: `dvc repro -f` among a stage's ancestors, or ORCH_FORCE."""

from __future__ import annotations

import os

import pytest

from orchestrator.pipeline import invocation


@pytest.mark.parametrize(
    ("argv", "forced"),
    [
        (["dvc", "repro", "-f"], True),
        (["dvc", "repro", "--force", "train@a"], True),
        (["/usr/bin/python3", "/usr/local/bin/dvc", "repro", "-sf", "x"], True),
        (["python3", "-m", "dvc", "exp", "run", "-f", "-S", "lr=0.1"], True),
        (["dvc", "repro"], False),
        (["dvc", "repro", "-s", "x"], False),
        (["dvc", "repro", "--", "-f"], False),
        (["dvc", "exp", "show", "-f"], False),
        (["vim", "dvc", "repro", "-f"], False),
        (["bash", "-c", "dvc repro -f"], False),
    ],
)
def test_dvc_force_is_read_from_argv(argv, forced):
    assert invocation.dvc_forced(argv) is forced


def _fake_proc(tmp_path, chain):
    """A /proc where our parent's ancestors are ``chain`` (argv lists), nearest first."""
    pids = [os.getppid(), *range(5000, 5000 + len(chain))]
    for pid, parent, argv in zip(pids, [*pids[1:], 1], chain, strict=False):
        folder = tmp_path / str(pid)
        folder.mkdir()
        (folder / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
        (folder / "stat").write_text(f"{pid} (odd name) with) S {parent} 1 1\n")
    return tmp_path


def test_a_forced_dvc_repro_among_the_ancestors_forces(tmp_path, monkeypatch):
    monkeypatch.delenv(invocation.FORCE, raising=False)
    proc = _fake_proc(tmp_path, [["/bin/sh", "-c", "orchestrator run -- x"], ["python3", "/usr/bin/dvc", "repro", "-f"], ["bash"]])
    assert invocation.forced(proc)


def test_no_force_without_the_flag_or_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(invocation.FORCE, raising=False)
    proc = _fake_proc(tmp_path, [["/bin/sh", "-c", "orchestrator run -- x"], ["dvc", "repro"], ["bash"]])
    assert not invocation.forced(proc)
    monkeypatch.setenv(invocation.FORCE, "0")
    assert not invocation.forced(proc)
    monkeypatch.setenv(invocation.FORCE, "1")
    assert invocation.forced(proc)


def test_the_real_proc_is_read_without_error(monkeypatch):
    monkeypatch.delenv(invocation.FORCE, raising=False)
    assert invocation.forced() is False  # pytest is not a forced dvc repro
