"""files.make_dirs: ``mkdir -p`` one level at a time, so a path any number of folders deep is made
(or refused with an OSError) without recursion; files.missing_folders says which it would make."""

from __future__ import annotations

import sys

import pytest

from orchestrator.util import files


def test_a_path_deeper_than_the_recursion_limit_is_made(tmp_path):
    levels = sys.getrecursionlimit() + 500
    deep = tmp_path.joinpath(*["a"] * levels)
    missing = files.missing_folders(deep)
    assert missing[-1] == tmp_path / "a" and len(missing) == levels
    try:
        files.make_dirs(deep)
        assert deep.is_dir() and files.missing_folders(deep) == []
        files.make_dirs(deep)  # there already: nothing to do
    finally:
        for folder in missing:  # deepest first: pytest's own clean-up (shutil.rmtree) recurses per level
            if folder.is_dir():
                folder.rmdir()


def test_a_file_in_the_way_is_an_os_error(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(FileExistsError):
        files.make_dirs(tmp_path / "f")
    with pytest.raises(NotADirectoryError):
        files.make_dirs(tmp_path / "f" / "sub")
