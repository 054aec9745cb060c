"""The command blocks of the user's pages (docs/get-started/, docs/how-to/), and a way to run them.

Each fenced shell block of those pages carries, on the line before it, an HTML comment that
says where it runs: `<!-- run: local -->` (this machine, the local profile), `<!-- run: testbed -->`
(needs the two-node Slurm testbed), `<!-- run: ssh -->` (needs the loopback sshd as a login
node), or `<!-- run: no (why) -->` (a real cluster, a person's own account...). A page's
runnable blocks run in order, in one bash session (a `cd` or a variable of one block holds in
the next), from a fresh folder, with the orchestrator the test suite runs; the first command
that fails fails the page, naming the page, the block, its line and the output.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from support import GIT_ENV, ROOT

DOCS = ROOT / "docs"
USER_PAGES = ("get-started", "how-to")
SHELL_LANGUAGES = frozenset({"bash", "sh", "shell", "console", "zsh"})
KINDS = ("local", "testbed", "ssh", "no")

_FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)[^`]*$")
_SNIPPET = re.compile(r"^\s*--8<--\s*[\"'](?P<path>[^\"']+)[\"']\s*$")
_TAG = re.compile(r"^\s*<!--\s*run:\s*(?P<kind>[a-z]+)\s*(?:\((?P<reason>[^)]*)\))?\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    page: Path
    line: int  # 1-based line of the opening fence
    language: str
    kind: str | None  # None: no run: comment on the line before
    reason: str
    text: str

    @property
    def where(self) -> str:
        return f"{page_id(self.page)}:{self.line}"


def user_pages() -> list[Path]:
    return sorted(path for folder in USER_PAGES for path in (DOCS / folder).glob("*.md"))


def blocks(page: Path) -> list[Block]:
    """Every fenced block of PAGE with a shell language, in order."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        opening = _FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        fence, language = opening["fence"], opening["info"].strip("{}.").lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            body.append(lines[j][len(opening["indent"]) :])
            j += 1
        if language in SHELL_LANGUAGES:
            previous = next((lines[k] for k in range(i - 1, -1, -1) if lines[k].strip()), "")
            tag = _TAG.match(previous)
            kind, reason = (tag["kind"], (tag["reason"] or "").strip()) if tag else (None, "")
            found.append(Block(page, i + 1, language, kind, reason, _expand("\n".join(body) + "\n")))
        i = j + 1
    return found


def _expand(text: str) -> str:
    """A block's `--8<-- "PATH"` lines replaced by the file's text, as pymdownx.snippets does (PATH from the repository's root)."""
    return "".join((ROOT / m["path"]).read_text() if (m := _SNIPPET.match(line)) else line for line in text.splitlines(keepends=True))


def kinds(page: Path) -> set[str]:
    return {b.kind for b in blocks(page) if b.kind and b.kind != "no"}


def pages_needing(kind: str) -> list[Path]:
    """The pages a test of KIND runs: local, those with local blocks only; testbed, those with a
    testbed block and no ssh one; ssh, those with an ssh block."""
    chosen = []
    for page in user_pages():
        have = kinds(page)
        if kind == "local" and have == {"local"}:
            chosen.append(page)
        elif kind == "testbed" and "testbed" in have and "ssh" not in have:
            chosen.append(page)
        elif kind == "ssh" and "ssh" in have:
            chosen.append(page)
    return chosen


def page_id(page: Path) -> str:
    return str(page.relative_to(DOCS)) if page.is_relative_to(DOCS) else str(page)


_MARK = "@@docs-block {}@@"


def run_page(page: Path, where: Path, env: dict[str, str] | None = None, timeout: float = 900) -> str:
    """Run PAGE's runnable blocks in one bash session in WHERE; the output, or an AssertionError
    naming the page, the block that failed, its text and the output."""
    runnable = [b for b in blocks(page) if b.kind not in (None, "no")]
    assert runnable, f"{page_id(page)} has no runnable block"
    parts = ["set -eo pipefail"]
    for n, block in enumerate(runnable):
        parts.append(f"printf '\\n%s\\n' {_MARK.format(n)!r}")
        parts.append(block.text)
    parts.append(f"printf '\\n%s\\n' {_MARK.format('done')!r}")
    environment = {**os.environ, **GIT_ENV, "ORCH_POLL_MAX_S": "2", **(env or {})}
    environment.pop("CI", None)  # the pages' commands never cancel anyone's testbed jobs
    try:
        done = subprocess.run(["bash", "-c", "\n".join(parts)], cwd=where, env=environment, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise AssertionError(f"{page_id(page)}: timed out after {timeout:.0f} s; output:\n{out[-4000:]}") from e
    output = done.stdout + done.stderr
    if done.returncode == 0 and _MARK.format("done") in done.stdout:
        return output
    started = re.findall(r"@@docs-block (\d+)@@", done.stdout)
    failed = runnable[int(started[-1])] if started else runnable[0]
    since = done.stdout.rsplit(_MARK.format(started[-1]), 1)[-1] if started else done.stdout
    raise AssertionError(
        f"{page_id(page)}: the block at {failed.where} ({failed.kind}) failed (exit {done.returncode}):\n"
        f"{failed.text}\n--- its output ---\n{since[-4000:]}\n--- stderr ---\n{done.stderr[-4000:]}"
    )
