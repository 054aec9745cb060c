"""A build's progress (orchestrator/containers/progress.py): phases read from the runtime's
output as Apptainer 1.4.5 prints it, one line per phase without a terminal, one line redrawn
on a terminal, and the log written line by line while the runtime runs (a FakeRunner that
streams). Stopping a build: tests/unit/containers/test_leftovers.py."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from fakes import FakeRunner, ok

from orchestrator.containers import build, progress
from orchestrator.containers.progress import Phase
from orchestrator.util.runner import Completed

# What `apptainer build --fakeroot` printed, stdout and stderr merged as the build reads them
# (a scratch image whose %post runs `sleep`; debootstrap, localimage and docker bootstraps).
SCRATCH = """\
INFO:    Starting build...
INFO:    Copying /bin/dash to /bin/sh
INFO:    Copying /tmp/proj/.orchestrator/images/.build-sleepy-5256/context/src to /opt/src
INFO:    Running post scriptlet
+ echo started
started
+ sleep 3
+ echo done
done
INFO:    Adding labels
INFO:    Creating SIF file...
INFO:    To see mksquashfs output with progress bar enable verbose logging
INFO:    Build complete: /tmp/proj/.orchestrator/images/.sleepy.sif.5256.tmp
"""
DEBOOTSTRAP = """\
INFO:    Starting build...
I: Retrieving InRelease
I: Base system installed successfully.
INFO:    Copying /tmp/ctx/src to /opt/orchestrator/src
INFO:    Running post scriptlet
+ set -eu
+ /opt/venv/bin/pip install --find-links /opt/orchestrator/wheels torch==2.13.0 pytorch-lightning>=2.5,<2.7 dvclive>=3.48 numpy>=1.26
Collecting pytorch-lightning<2.7,>=2.5
INFO:    Adding testscript
INFO:    Running testscript
INFO:    Creating SIF file...
INFO:    Build complete: /x/.ci.sif.1.tmp
"""
LOCALIMAGE = """\
INFO:    Starting build...
INFO:    Verifying bootstrap image /tmp/h2exp/out.sif
INFO:    Extracting local image...
INFO:    Running post scriptlet
"""
DOCKER = """\
INFO:    Starting build...
Getting image source signatures
Copying blob sha256:0123
INFO:    Fetching OCI image...
INFO:    Extracting OCI image...
INFO:    Inserting Apptainer configuration...
INFO:    Running post scriptlet
"""


def phases(transcript: str) -> list[str]:
    """Each phase the transcript goes through, in order, as the display names it."""
    seen, phase = [], progress.STARTING
    for line in transcript.splitlines():
        phase = progress.parse(line, phase)
        if not seen or seen[-1] != str(phase):
            seen.append(str(phase))
    return seen


def test_scratch_build_phases_and_post_steps():
    assert phases(SCRATCH) == [
        "bootstrap",
        "%files",
        "%post",
        "%post: echo started",
        "%post: sleep 3",
        "%post: echo done",
        "SIF: mksquashfs",
        "done",
    ]


def test_debootstrap_build_names_the_bootstrap_and_cuts_long_steps():
    seen = phases(DEBOOTSTRAP)
    assert seen[:3] == ["bootstrap", "bootstrap: debootstrap", "%files"]
    pip = [s for s in seen if s.startswith("%post: /opt/venv/bin/pip install")]
    assert len(pip) == 1 and pip[0].endswith("…") and len(pip[0]) == len("%post: ") + progress.STEP_WIDTH
    # pip's own lines are not steps (they are the last line a terminal shows); %test and the SIF are phases
    assert seen[-3:] == ["%test", "SIF: mksquashfs", "done"]


@pytest.mark.parametrize(
    ("transcript", "bootstrap"),
    [(LOCALIMAGE, ["bootstrap: unpacking the base"]), (DOCKER, ["bootstrap: pulling the base", "bootstrap: unpacking the base"])],
)
def test_base_image_bootstraps(transcript, bootstrap):
    assert phases(transcript) == ["bootstrap", *bootstrap, "%post"]


def test_output_outside_post_is_not_a_step():
    # a `+ ` line before %post (a file name, a diff) names no step
    assert progress.parse("+ not a command", Phase("%files")) == Phase("%files")
    assert progress.parse("WARNING: something", Phase("%post", "x")) == Phase("%post", "x")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_without_a_terminal_one_line_per_phase():
    said, clock = [], Clock()
    display = progress.Lines(said.append, clock)
    display.begin("sleepy")
    for line in SCRATCH.splitlines():
        clock.now += 0.5 if not line.startswith("+ sleep") else 65
        display.line(line)
    display.end()
    assert said[0] == "sleepy: 0:00 bootstrap"
    assert "sleepy: 1:08 %post: echo done" in said  # the elapsed time, as m:ss
    assert [s.split(" ", 2)[2] for s in said] == phases(SCRATCH)


def test_on_a_terminal_one_line_cut_to_the_width():
    from rich.console import Console

    out = io.StringIO()
    console = Console(file=out, width=50, force_terminal=False, color_system=None)
    display = progress.Terminal(console, Clock())
    display.tracker = progress.Tracker("ci", Clock())  # as begin() makes it, without starting the redraw thread
    for line in DEBOOTSTRAP.splitlines()[:7]:
        display.line(line)
    console.print(display)
    (shown,) = out.getvalue().splitlines()
    assert len(shown) <= 50 and shown.startswith("ci 0:00 %post: /opt/venv/bin/pip") and shown.endswith("…")
    display.line("     ━━━━━━━━━━ 1.2/3.4 MB 10 MB/s\r     ━━━━━━━━━━━━━━━━ 3.4/3.4 MB 10 MB/s")
    assert display.tracker.last == "━━━━━━━━━━━━━━━━ 3.4/3.4 MB 10 MB/s"  # a bar redrawn with \r: its latest state


def test_terminal_display_starts_and_stops_its_redraw():
    from rich.console import Console

    out = io.StringIO()
    display = progress.Terminal(Console(file=out, width=80, force_terminal=True), Clock())
    display.begin("tiny")
    display.line("INFO:    Running post scriptlet")
    display.end()
    assert display.live is None and "tiny" in out.getvalue()


@pytest.mark.parametrize(("n", "text"), [(912, "912 B"), (1536, "1.5 KiB"), (385978368, "368 MiB"), (5 * 2**30, "5.0 GiB")])
def test_size_text(n, text):
    assert progress.size_text(n) == text


@pytest.mark.parametrize(("s", "text"), [(7.9, "0:07"), (291, "4:51"), (3723, "1:02:03")])
def test_clock_text(s, text):
    assert progress.clock_text(s) == text


# --- the log, while the runtime runs --------------------------------------------------------


def streaming_apptainer(transcript: str) -> FakeRunner:
    def fake_build(argv):
        if argv[1] == "--version":
            return Completed(tuple(argv), 0, "apptainer version 1.4.5\n", "")
        Path(argv[-2]).write_bytes(b"SIF image bytes")
        return Completed(tuple(argv), 0, transcript, "")

    return FakeRunner(answers={"apptainer": fake_build, "git": ok("", rc=128)}, installed={"apptainer"})


def test_the_log_holds_this_build_from_its_first_line(tiny):
    log = tiny / build.IMAGES_DIR / "tiny.build.log"
    log.parent.mkdir(parents=True)
    log.write_text("the previous build's log\n")
    runner = streaming_apptainer(SCRATCH)
    seen: list[tuple[str, str]] = []
    runner.after_line = lambda line: seen.append((line, log.read_text()))
    said: list[str] = []
    build.build(tiny, "tiny", runner, say=said.append)

    assert len(seen) == len(SCRATCH.splitlines())
    for line, text in seen:  # each line is in the log when the next one arrives, and nothing of the old log is
        assert text.endswith(line + "\n") and "previous build" not in text
    first = seen[0][1].splitlines()
    assert first[0].startswith("# build started") and first[1].startswith("$ APPTAINER_TMPDIR=")
    assert log.read_text().endswith("(exit 0)\n")
    assert f"tiny: log: {log}" in said and "tiny: 0:00 %post: sleep 3" in said


def test_the_runtime_gets_its_temporary_folder_beside_the_image(tiny):
    runner = streaming_apptainer(SCRATCH)
    folders: list[bool] = []
    runner.after_line = lambda line: folders.append(Path(runner.stream_envs[-1]["APPTAINER_TMPDIR"]).is_dir())
    build.build(tiny, "tiny", runner)
    (env,) = runner.stream_envs
    images = (tiny / build.IMAGES_DIR).absolute()
    tmp = Path(env["APPTAINER_TMPDIR"])
    assert env["SINGULARITY_TMPDIR"] == str(tmp) and tmp.parent.parent == images and tmp.parent.name.startswith(".build-tiny-")
    assert all(folders) and not tmp.parent.exists()  # there while it ran, gone after
