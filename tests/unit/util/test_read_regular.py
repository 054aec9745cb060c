"""files.read_regular: the one guard for files read from the disk. A regular file only, under a
cap; anything else is refused without being read, so nothing blocks and nothing fills memory."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from orchestrator.errors import OrchestratorError, UnreadableFile
from orchestrator.util import files


def refused(path, limit=1 << 20, **kwargs) -> UnreadableFile:
    with pytest.raises(UnreadableFile) as err:
        files.read_regular(path, limit, **kwargs)
    assert isinstance(err.value, OrchestratorError) and err.value.exit_code == 2
    assert str(path) in str(err.value)
    return err.value


def test_a_regular_file_is_read_whole(tmp_path):
    (tmp_path / "f").write_bytes(b"abc\xff")
    assert files.read_regular(tmp_path / "f", 4) == b"abc\xff"
    assert files.read_regular(tmp_path / "f", 4 << 20) == b"abc\xff"


def test_a_file_over_the_cap_is_refused(tmp_path):
    (tmp_path / "f").write_bytes(b"x" * 5)
    err = refused(tmp_path / "f", 4)
    assert err.kind == "too-large" and "larger than 4 bytes" in str(err)
    (tmp_path / "g").write_bytes(b"x" * ((1 << 20) + 1))
    assert "larger than 1 MiB" in str(refused(tmp_path / "g", 1 << 20))


def test_a_fifo_is_refused_without_blocking(tmp_path):
    fifo = tmp_path / "entry.json"
    os.mkfifo(fifo)
    done: list[UnreadableFile] = []
    reader = threading.Thread(target=lambda: done.append(refused(fifo)), daemon=True)
    reader.start()
    reader.join(5)
    assert done, "reading a FIFO blocked"
    assert done[0].kind == "special" and "is not a regular file (a FIFO)" in str(done[0])


def test_a_link_to_dev_zero_is_refused_without_reading_it(tmp_path):
    (tmp_path / "entry.json").symlink_to("/dev/zero")
    assert refused(tmp_path / "entry.json").kind == "link"
    # Followed where the caller asks (a path the user typed): still a device, never read.
    err = refused(tmp_path / "entry.json", follow_symlinks=True)
    assert err.kind == "special" and "a character device" in str(err)
    assert refused("/dev/zero").kind == "special"


def test_a_link_to_a_regular_file_is_read_only_when_followed(tmp_path):
    (tmp_path / "real").write_text("x")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    assert refused(tmp_path / "link").kind == "link"
    assert files.read_regular(tmp_path / "link", 10, follow_symlinks=True) == b"x"


def test_a_folder_a_socket_and_a_missing_file(tmp_path):
    (tmp_path / "d").mkdir()
    assert "is a folder" in str(refused(tmp_path / "d"))
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "s"))
        assert "(a socket)" in str(refused(tmp_path / "s"))
    missing = refused(tmp_path / "nope")
    assert missing.missing and "does not exist" in str(missing)
    assert refused(tmp_path / "a\0b").kind == "unreadable"


def test_read_text_refuses_binary_content(tmp_path):
    (tmp_path / "bin").write_bytes(b"ok\xff\xfe")
    (tmp_path / "nul").write_bytes(b"ok\0")
    (tmp_path / "ok").write_text("grüße\n")
    with pytest.raises(UnreadableFile, match=r"not UTF-8 at byte 2") as err:
        files.read_text(tmp_path / "bin", 100)
    assert err.value.kind == "not-text"
    with pytest.raises(UnreadableFile, match="NUL"):
        files.read_text(tmp_path / "nul", 100)
    assert files.read_text(tmp_path / "ok", 100) == "grüße\n"
