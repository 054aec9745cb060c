"""`orchestrator profile-diff` (orchestrator/cli/profile_diff.py): bad input is one message and
exit 2; the command stays off torch and is listed."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support import examples, invoke, with_git, write_operators


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (lambda d: d / "missing", "no such file or folder"),
        (lambda d: d, "no profile/operators.json in"),
        (lambda d: _write(d / "x.json", "{not json"), "not readable JSON"),
        (lambda d: _write(d / "x.json", '{"steps": 2, "operators": {"a": {"calls": 1}}}'), "not an operators.json"),
        (lambda d: _write(d / "x.json", '{"steps": 0, "operators": {}}'), "steps must be a positive integer"),
        (lambda d: _write(d / "x.json", "[1, 2]"), "not an operators.json"),
    ],
)
def test_bad_input_is_one_message_and_exit_2(tmp_path, setup, message):
    good = write_operators(tmp_path / "good.json", {"aten::mm": (1, 2)})
    bad = setup(tmp_path)
    for args in ([str(bad), str(good)], [str(good), str(bad), "--json"]):
        result = invoke("profile-diff", *args)
        assert result.exit_code == 2, result.output
        assert message in result.output and "Traceback" not in result.output
        assert result.exception is None or isinstance(result.exception, SystemExit)


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_the_comparison_stays_off_torch_and_is_listed():
    code = (
        "import sys, orchestrator.cli, orchestrator.analysis.opdiff, orchestrator.cli.profile_diff; "
        "print(sorted(m for m in ('torch', 'pytorch_lightning', 'lightning', 'numpy', 'rich') if m in sys.modules))"
    )
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "[]"
    result = invoke("--help")
    assert "profile-diff" in result.output


# --- REV:PATH: the revision's file goes under a scratch folder, never outside it ------------------------


def _git_project(where: Path, files: dict[str, Path]) -> Path:
    """A git + DVC project with ``files`` (path in it -> operators.json to copy there) committed."""
    import shutil

    where.mkdir(parents=True)
    for name, source in files.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(source, where / name)
    return with_git(where, "runs")


def test_a_rev_path_that_leaves_the_project_is_refused_and_nothing_is_written(tmp_path, monkeypatch):
    import tempfile

    good = write_operators(tmp_path / "good.json", {"aten::mm": (1, 2)})
    outside = tmp_path / "outside"  # an absolute PATH names it; the repository holds the same path under its root
    files = {"sub/profile/operators.json": good, f"{str(outside).lstrip('/')}/profile/operators.json": good}
    project = _git_project(tmp_path / "proj", files)
    scratch_parent = tmp_path / "tmp"
    scratch_parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch_parent))  # where profile-diff's scratch folder goes
    for path in ("../../sub", "sub/../../../sub/profile/operators.json", str(outside)):
        result = invoke("profile-diff", f"HEAD:{path}", str(good), "--project", str(project))
        assert result.exit_code == 2 and "Traceback" not in result.output, result.output
        assert f"'HEAD:{path}': PATH {path!r} is not a path inside the project" in result.output
        assert "REV:PATH takes PATH from the project's folder" in result.output
        assert not any(scratch_parent.iterdir()) and not outside.exists(), path  # nothing written, nothing left
    result = invoke("profile-diff", "HEAD:./sub/", str(good), "--project", str(project))  # inside: read as before
    assert result.exit_code == 0, result.output
    assert not any(scratch_parent.iterdir())


def test_a_revision_that_looks_like_an_option_is_refused(tmp_path):
    from orchestrator.analysis.opdiff import ProfileDataError
    from orchestrator.cli.profile_diff import _at_revision

    with pytest.raises(ProfileDataError, match=r"'--git-dir=x' is not a revision \(it starts with '-'\)"):
        _at_revision("--git-dir=x:sub", tmp_path, tmp_path / "scratch")


REV_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
REV_PARTS = st.sampled_from(["..", ".", "", "/", "//", "a", "b.json", "profile", "operators.json", "\0", "-", "~", "\\", "é", "a" * 300])
SPECS = st.one_of(
    REV_TEXT,
    st.builds(lambda rev, path: f"{rev}:{path}", st.sampled_from(["HEAD", "-x", "exp", "a:b"]), REV_TEXT),
    st.builds(
        lambda rev, lead, parts: f"{rev}:{lead}{'/'.join(parts)}",
        st.sampled_from(["HEAD", "on-lumi"]),
        st.sampled_from(["", "/", "./", "../"]),
        st.lists(REV_PARTS, max_size=8),
    ),
)


@given(spec=SPECS)
@settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_rev_path_resolves_inside_the_scratch_folder_or_is_refused(tmp_path_factory, spec):
    """Any spec: read from inside the scratch folder, taken as a file or folder here (no REV:PATH),
    or refused with an OrchestratorError; never a traceback, never a write outside the scratch folder."""
    import os

    from orchestrator.analysis import revisions
    from orchestrator.cli.profile_diff import _at_revision
    from orchestrator.errors import OrchestratorError

    sandbox = tmp_path_factory.mktemp("revpath")
    scratch = sandbox / "scratch" / "0"
    written: list[Path] = []

    class Revision:  # a revision that has every file: writes each where the real one would
        def __init__(self, project, name):
            pass

        def read_files(self, paths, into):
            for path in paths:
                target = Path(os.path.realpath(into / path))
                if not target.is_relative_to(os.path.realpath(into)):
                    raise AssertionError(f"{spec!r} would write {target}, outside {into}")
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text("{}")
                written.append(target)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(revisions, "Revision", Revision)
        try:
            found = _at_revision(spec, sandbox, scratch)
        except OrchestratorError as exc:
            assert exc.exit_code == 2 and str(exc)
            assert not written
            return
    if written:
        assert Path(os.path.realpath(found)).is_relative_to(os.path.realpath(scratch)) and found.is_file()
    else:
        assert found == Path(spec)  # not REV:PATH (or a path that is there): read as it is, nothing written
