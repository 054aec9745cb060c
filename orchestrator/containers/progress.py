"""What a running build is doing: its phase, read from the runtime's output, and how it is shown.

A build is minutes of bootstrap (debootstrap, or pulling or unpacking the base image),
``%files``, ``%post`` (torch and the project installed by pip), ``%test`` and mksquashfs.
:func:`parse` reads the phase from Apptainer's (and SingularityCE's) ``INFO:`` lines,
debootstrap's ``I:`` lines and the OCI pull's lines; within ``%post``, which the runtime
runs under ``sh -x``, the step is the last command line it traced (``+ pip install ...``).

Two displays: :class:`Terminal` keeps one line updated in place (phase, elapsed time, the
runtime's last line, cut to the terminal's width); :class:`Lines`, for logs and CI, says
one line per phase or ``%post`` step. The build hands every line of output to both
its log and the display.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from rich.live import Live

STEP_WIDTH = 60  # a %post step is cut to this many characters: pip install lines list every requirement


@dataclass(frozen=True)
class Phase:
    name: str  # starting, bootstrap, %setup, %files, %post, %test, SIF, done
    step: str = ""  # within bootstrap: how; within %post: the command being run

    def __str__(self) -> str:
        return f"{self.name}: {self.step}" if self.step else self.name


STARTING = Phase("starting")

# INFO line (prefix removed) -> the phase it starts; checked in order, the first match wins.
_INFO = (
    (re.compile(r"Running setup scriptlet"), Phase("%setup")),
    (re.compile(r"Copying .+ to "), Phase("%files")),
    (re.compile(r"Running post scriptlet"), Phase("%post")),
    (re.compile(r"Running testscript"), Phase("%test")),
    (re.compile(r"Creating SIF file"), Phase("SIF", "mksquashfs")),
    (re.compile(r"Build complete"), Phase("done")),
    (re.compile(r"Fetching OCI image|Converting OCI blobs|Pulling|Downloading library image"), Phase("bootstrap", "pulling the base")),
    (re.compile(r"Extracting OCI image|Extracting local image|Verifying bootstrap image"), Phase("bootstrap", "unpacking the base")),
    (re.compile(r"Starting build"), Phase("bootstrap")),
)
_INFO_PREFIX = re.compile(r"^INFO:\s+")
_DEBOOTSTRAP = re.compile(r"^[IW]: ")  # debootstrap's own messages
_OCI = re.compile(r"^(Getting image source signatures|Copying (blob|config)|Writing manifest|Storing signatures)")


def parse(line: str, current: Phase) -> Phase:
    """The phase after ``line`` of the runtime's output, ``current`` before it."""
    text = line.strip()
    info = _INFO_PREFIX.match(text)
    if info:
        body = text[info.end() :]
        return next((phase for pattern, phase in _INFO if pattern.match(body)), current)
    if current.name in ("%post", "%setup") and text.startswith("+ "):
        step = text[2:]
        return Phase(current.name, step if len(step) <= STEP_WIDTH else step[: STEP_WIDTH - 1] + "…")
    if current.name in ("starting", "bootstrap"):
        if _DEBOOTSTRAP.match(text):
            return Phase("bootstrap", "debootstrap")
        if _OCI.match(text):
            return Phase("bootstrap", "pulling the base")
    return current


def clock_text(seconds: float) -> str:
    """Elapsed time as a person reads it: 0:07, 4:51, 1:02:03."""
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def size_text(n: int) -> str:
    """Bytes as a person reads them: 912 B, 1.5 KiB, 368 MiB."""
    size, unit = float(n), "B"
    for bigger in ("KiB", "MiB", "GiB", "TiB"):
        if size < 1024:
            break
        size, unit = size / 1024, bigger
    return f"{n} B" if unit == "B" else f"{size:.1f} {unit}" if size < 10 else f"{size:.0f} {unit}"


class Tracker:
    """The phase and last line of one build, fed line by line."""

    def __init__(self, image: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.image, self.clock = image, clock
        self.started = clock()
        self.phase = STARTING
        self.last = ""

    def feed(self, line: str) -> bool:
        """Take one line of output; whether the phase (or %post step) changed."""
        shown = line.rsplit("\r", 1)[-1].strip()  # a progress bar redrawn with \r: its latest state
        if shown:
            self.last = shown
        before, self.phase = self.phase, parse(line, self.phase)
        return self.phase != before

    def elapsed(self) -> str:
        return clock_text(self.clock() - self.started)


class Display(Protocol):
    """Where a build's progress goes: ``begin`` once the runtime starts, ``line`` for each
    line of its output, ``end`` when it has ended (whichever way)."""

    def begin(self, image: str) -> None: ...

    def line(self, text: str) -> None: ...

    def end(self) -> None: ...


class Lines:
    """Without a terminal: one line per phase (and %post step), e.g. ``tiny: 0:03 %post: + sleep 60``."""

    def __init__(self, say: Callable[[str], None], clock: Callable[[], float] = time.monotonic) -> None:
        self.say, self.clock = say, clock
        self.tracker: Tracker | None = None

    def begin(self, image: str) -> None:
        self.tracker = Tracker(image, self.clock)

    def line(self, text: str) -> None:
        t = self.tracker
        if t is not None and t.feed(text):
            self.say(f"{t.image}: {t.elapsed()} {t.phase}")

    def end(self) -> None:
        self.tracker = None


class Terminal:
    """On a terminal: one line on stderr, redrawn in place four times a second (rich.live),
    so the elapsed time moves while the runtime is quiet; gone when the build ends."""

    def __init__(self, console=None, clock: Callable[[], float] = time.monotonic) -> None:
        from rich.console import Console

        self.console = console or Console(stderr=True)
        self.clock = clock
        self.tracker: Tracker | None = None
        self.live: Live | None = None

    def begin(self, image: str) -> None:
        from rich.live import Live

        self.tracker = Tracker(image, self.clock)
        self.live = Live(self, console=self.console, refresh_per_second=4, transient=True)
        self.live.start()

    def line(self, text: str) -> None:
        if self.tracker is not None:
            self.tracker.feed(text)

    def end(self) -> None:
        if self.live is not None:
            self.live.stop()
        self.live = self.tracker = None

    def __rich_console__(self, console, options):
        from rich.text import Text

        t = self.tracker
        if t is None:
            return
        status = Text.assemble((f"{t.image} ", "bold"), (f"{t.elapsed()} ", "cyan"), (str(t.phase), "green"))
        if t.last:
            status.append(f"  │ {t.last}", style="dim")
        status.truncate(options.max_width, overflow="ellipsis")  # one line, whatever the terminal's width
        yield status
