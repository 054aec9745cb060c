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

It also checks that a DVC stage command is a plain argument vector
(:func:`plain_argv_problems`): DVC runs ``cmd`` through a shell, while ``render``
splits it with :mod:`shlex`; the two agree only when the command uses nothing but
words and quotes, so anything else is reported instead of guessed at.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable

_RUNTIME_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class Shell(str):
    """Text that is already valid, quoted shell: templates emit it verbatim."""

    __slots__ = ()


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def quote(value: object) -> Shell:
    """Quote one value as a single shell word that never spans lines.

    ``shlex.quote`` where it can; values with control characters (newlines) use
    bash's ``$'...'`` form instead, so a quoted value is safe even in a comment.
    """
    text = str(value)
    if not _CONTROL.search(text):
        return Shell(shlex.quote(text))
    body = _CONTROL.sub(lambda m: _ANSI_C.get(m.group(), f"\\x{ord(m.group()):02x}"), text.replace("\\", "\\\\").replace("'", "\\'"))
    return Shell(f"$'{body}'")


_ANSI_C = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}


def join(words: Iterable[object]) -> Shell:
    """Quote every word and join them with spaces (an argv as shell text)."""
    return Shell(" ".join(w if isinstance(w, Shell) else quote(w) for w in words))


def runtime_problems(value: str) -> list[str]:
    """Why ``value`` is not a valid runtime template (empty list: it is)."""
    stripped = _RUNTIME_REF.sub("", value)
    if "$" in stripped:
        return [f"{value!r}: only ${{NAME}} references may expand at run time; write other '$' as part of ${{NAME}}"]
    return []


def quote_runtime(value: str) -> Shell:
    """Double-quote a runtime template, keeping only ``${NAME}`` expansions live."""
    out: list[str] = []
    pos = 0
    for m in _RUNTIME_REF.finditer(value):
        out.append(_escape_dq(value[pos : m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_escape_dq(value[pos:]))
    return Shell('"' + "".join(out) + '"')


def _escape_dq(text: str) -> str:
    return re.sub(r'([\\"`$])', r"\\\1", text)


def runtime_refs(value: str) -> list[str]:
    """Names of the variables a runtime template refers to."""
    return _RUNTIME_REF.findall(value)


# --- plain argv check ---------------------------------------------------------

_OPERATORS = set(";&|<>()\n")
_GLOB = set("*?[]{}")


def plain_argv_problems(cmd: str) -> list[str]:
    """Find shell syntax in ``cmd`` beyond words and quotes.

    Rejected outside single quotes: ``$`` and backticks (expansion the shell would
    do at run time but ``render`` cannot), backslash-newline. Rejected outside any
    quotes: control operators and redirections, unquoted newlines, glob and brace
    characters, ``~`` and ``#`` at the start of a word. Unbalanced quotes too.
    """
    problems: list[str] = []
    state = None  # None, "'" or '"'
    word_start = True
    i = 0
    while i < len(cmd):
        c = cmd[i]
        where = _context(cmd, i)
        if state == "'":
            if c == "'":
                state = None
        elif c == "\\":
            nxt = cmd[i + 1 : i + 2]
            if nxt in ("\n", "$", "`") or nxt == "":
                problems.append(f"backslash before {nxt!r} at {where}: shells and shlex disagree on it")
            i += 2
            word_start = False
            continue
        elif c in "$`":
            kind = "command substitution" if c == "`" or cmd[i + 1 : i + 2] == "(" else "variable expansion"
            problems.append(f"{kind} {c!r} at {where}: the shell would expand it when the stage runs")
        elif state == '"':
            if c == '"':
                state = None
        elif c in "'\"":
            state = c
        elif c in _OPERATORS:
            problems.append(f"shell operator {c!r} outside quotes at {where}")
        elif c in _GLOB:
            problems.append(f"glob/brace character {c!r} outside quotes at {where}")
        elif word_start and c in "~#":
            problems.append(f"{c!r} at the start of a word at {where}")
        word_start = state is None and c in " \t"
        i += 1
    if state is not None:
        problems.append(f"unbalanced {state} quote")
    return problems


def _context(text: str, i: int, width: int = 12) -> str:
    return repr(text[max(0, i - width) : i + width])
