"""files.make_dirs: ``mkdir -p`` one level at a time, so a path any number of folders deep is made
(or refused with an OSError) without recursion; files.missing_folders says which it would make."""

from __future__ import annotations

import sys

import pytest

from orchestrator.util import files


def test_a_path_deeper_than_the_recursion_limit_is_made(tmp_path):
    # Python's default limit, set for the test: a library the worker imported before may have raised
    # it, and past ~2,000 levels of 2 characters the path is longer than PATH_MAX.
    before = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    deep = tmp_path.joinpath(*["a"] * 1500)
    try:
        missing = files.missing_folders(deep)
        assert missing[-1] == tmp_path / "a" and len(missing) == 1500
        files.make_dirs(deep)
        assert deep.is_dir() and files.missing_folders(deep) == []
        files.make_dirs(deep)  # there already: nothing to do
    finally:
        sys.setrecursionlimit(before)
        for folder in missing:  # deepest first: pytest's own clean-up (shutil.rmtree) recurses per level
            if folder.is_dir():
                folder.rmdir()


def test_a_file_in_the_way_is_an_os_error(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(FileExistsError):
        files.make_dirs(tmp_path / "f")
    with pytest.raises(NotADirectoryError):
        files.make_dirs(tmp_path / "f" / "sub")
