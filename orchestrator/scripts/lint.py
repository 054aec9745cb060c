"""Checks on rendered scripts: bash's own parser, then shellcheck.

Both run once for a whole matrix, not once per script: a 1,000-item matrix
would otherwise spend seconds starting processes. bash parses every script
wrapped in a function of its own, in one file, with ``--pretty-print`` (parse
and print, never execute); counting the functions it printed proves no script
swallowed its neighbour (an unclosed quote would), so the batch is as exact as
one ``bash -n`` per script. Where a check fails, the scripts are checked one by
one to name the culprits. Older bash without ``--pretty-print`` gets
``bash -n`` per script.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Mapping
from pathlib import Path

from orchestrator.util.runner import Runner

_HEADER = re.compile(r"^orch_check_(\d+) \(\) $", re.M)
_GCC = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<level>\w+): (?P<msg>.*)$")


def bash_problems(scripts: Mapping[str, str], runner: Runner) -> list[str]:
    """Syntax errors in ``scripts`` (name -> text), as bash itself reports them."""
    names = list(scripts)
    if not names:
        return []
    with tempfile.TemporaryDirectory(prefix="orch-check-") as tmp:
        batch = Path(tmp, "batch.sh")
        batch.write_text("".join(f"orch_check_{i}() {{\n{scripts[n]}\n}}\n" for i, n in enumerate(names)))
        done = runner.run(["bash", "--pretty-print", str(batch)])
        if done.returncode == 0 and len(_HEADER.findall(done.stdout)) == len(names):
            return []
        # A syntax error somewhere, or a bash older than 5.2 without --pretty-print.
        return [p for n in names for p in _one(n, scripts[n], Path(tmp), runner)]


def _one(name: str, text: str, tmp: Path, runner: Runner) -> list[str]:
    path = tmp / "script.sh"
    path.write_text(text)
    done = runner.run(["bash", "-n", str(path)])
    if done.returncode == 0:
        return []
    detail = done.stderr.replace(str(path), name).strip()
    return [f"bash -n {name}: {detail}"]


def shellcheck_problems(scripts: Mapping[str, str], runner: Runner) -> list[str] | None:
    """shellcheck's findings for ``scripts``; None if shellcheck is not installed."""
    exe = runner.which("shellcheck")
    if exe is None:
        return None
    if not scripts:
        return []
    # Identical texts need checking once (a matrix renders many alike).
    by_text: dict[str, list[str]] = {}
    for name, text in scripts.items():
        by_text.setdefault(text, []).append(name)
    with tempfile.TemporaryDirectory(prefix="orch-shellcheck-") as tmp:
        files: dict[str, list[str]] = {}
        for i, (text, owners) in enumerate(by_text.items()):
            path = Path(tmp, f"{i}.sh")
            path.write_text(text)
            files[str(path)] = owners
        done = runner.run([exe, "--shell=bash", "--format=gcc", *files])
    found = []
    for line in done.stdout.splitlines():
        m = _GCC.match(line)
        if m:
            owner = files.get(m["file"], [m["file"]])[0]
            found.append(f"shellcheck {owner}:{m['line']}:{m['col']}: {m['level']}: {m['msg']}")
    if done.returncode != 0 and not found:
        found.append(f"shellcheck failed: {done.stderr.strip() or done.stdout.strip()}")
    return found
