"""Shell words: how values become safe text in a bash script.

Three kinds of text reach a rendered script, each with its own rule:

* values (params, paths, names): single-quoted with :func:`quote`; nothing in them
  is ever evaluated by the shell.
* runtime templates from a cluster profile (``/tmp/${USER}-cache-${SLURM_NODEID}``):
  double-quoted with :func:`quote_runtime`, where only ``${NAME}`` references expand;
  every other ``$``, backtick, quote or backslash is escaped, so no command
  substitution can happen.
* ``Shell`` fragments: text the code assembled from already-quoted words. Templates
  print these as they are; anything else is quoted on output (see render.py).
"""

from __future__ import annotations

import functools
import re
import shlex
from collections.abc import Iterable

from orchestrator.util.patterns import CONTROL, RUNTIME_REF


class Shell(str):
    """Text that is already valid, quoted shell: templates emit it verbatim."""

    __slots__ = ()


def quote(value: object) -> Shell:
    """Quote one value as a single shell word that never spans lines.

    ``shlex.quote`` where it can; values with control characters (newlines) use
    bash's ``$'...'`` form instead, so a quoted value is safe even in a comment.
    """
    text = str(value)
    if not CONTROL.search(text):
        return Shell(shlex.quote(text))
    body = CONTROL.sub(lambda m: _ANSI_C.get(m.group(), f"\\x{ord(m.group()):02x}"), text.replace("\\", "\\\\").replace("'", "\\'"))
    return Shell(f"$'{body}'")


_ANSI_C = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def join(words: Iterable[object]) -> Shell:
    """Quote every word and join them with spaces (an argv as shell text)."""
    return Shell(" ".join(w if isinstance(w, Shell) else quote(w) for w in words))


@functools.lru_cache(maxsize=4096)  # every item of a matrix quotes the profile's same templates
def quote_runtime(value: str) -> Shell:
    """Double-quote a runtime template, keeping only ``${NAME}`` expansions live."""
    out: list[str] = []
    pos = 0
    for m in RUNTIME_REF.finditer(value):
        out.append(_escape_dq(value[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_escape_dq(value[pos:]))
    return Shell('"' + "".join(out) + '"')


def _escape_dq(text: str) -> str:
    return re.sub(r'([\\"`$])', r"\\\1", text)


def runtime_refs(value: str) -> list[str]:
    """Names of the variables a runtime template refers to."""
    return RUNTIME_REF.findall(value)
