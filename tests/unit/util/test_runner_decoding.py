"""One decoding rule for what SubprocessRunner.run captures (ssh, git, sacct, squeue, DVC, shellcheck):
text with undecodable bytes replaced, for showing and parsing; the exact bytes kept beside it."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from support import invoke, make_project

from orchestrator.util.runner import Completed, SubprocessRunner

# Latin-1 text, a lone continuation byte and a cut-short sequence: none of them UTF-8.
INVALID = b"caf\xe9 \x80 end \xe2\x82\n"


def writer(out: bytes, err: bytes, code: int = 0) -> list[str]:
    program = f"import sys; sys.stdout.buffer.write({out!r}); sys.stderr.buffer.write({err!r}); sys.exit({code})"
    return [sys.executable, "-c", program]


def test_invalid_utf8_is_replaced_in_text_and_kept_in_bytes():
    done = SubprocessRunner().run(writer(INVALID, b"warn \xff\n", 3))
    assert done.returncode == 3
    assert done.stdout == "caf\ufffd \ufffd end \ufffd\n" and done.stderr == "warn \ufffd\n"
    assert done.stdout_bytes == INVALID and done.data == INVALID
    print(done.stdout, done.stderr)  # text that can be shown: no lone surrogates


def test_valid_output_and_line_ends_are_as_a_text_pipe_gives_them():
    done = SubprocessRunner().run(writer("grüße\r\nzwei\rdrei\n".encode(), b""))
    assert done.stdout == "grüße\nzwei\ndrei\n"
    assert done.stdout_bytes == "grüße\r\nzwei\rdrei\n".encode()


def test_input_is_sent_as_utf8():
    done = SubprocessRunner().run([sys.executable, "-c", "import sys; sys.stdout.buffer.write(sys.stdin.buffer.read())"], input="ünï\n")
    assert done.stdout_bytes == "ünï\n".encode()


def test_a_fake_runners_text_reads_as_bytes_too():
    assert Completed(("x",), 0, "ä", "").data == "ä".encode()


def test_a_tool_printing_invalid_utf8_is_one_message_not_a_traceback(tmp_path, monkeypatch):
    """render --check runs shellcheck through the runner; a shellcheck that prints bytes that
    are not UTF-8 (a locale's, a file name's) failed with UnicodeDecodeError."""
    params = "orchestrator: {cluster: local, image: none}\nvalues: [x]\n"
    dvc_yaml = "stages:\n  train:\n    matrix:\n      v: ${values}\n    cmd: orchestrator run --time 10 -- python -c pass '${item.v}'\n"
    project = make_project(tmp_path / "p", dvc_yaml=dvc_yaml, params_yaml=params)
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "shellcheck"
    fake.write_text(f"#!{sys.executable}\nimport sys\nsys.stdout.buffer.write({INVALID!r})\nsys.exit(1)\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    result = invoke("render", "--check", "--project", str(project), "--out", str(Path(tmp_path / "out")))
    assert "Traceback" not in result.output and not isinstance(result.exception, UnicodeDecodeError), result.output
    assert result.exit_code == 1 and "shellcheck failed: caf\ufffd" in result.output, result.output
