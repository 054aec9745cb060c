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


# --- plain argv --------------------------------------------------------------

_OPERATORS = frozenset(";&|<>()\n")
_GLOB = frozenset("*?[]{}")
# Characters after which a plain word needs no closer look (the fast path).
_SPECIAL = re.compile(r"[\\'\"$`;&|<>()\n*?\[\]{}~#]")


def split_plain(cmd: str) -> tuple[list[str], list[str]]:
    """Split ``cmd`` as a POSIX shell would, if it is plain words and quotes.

    Returns (argv, problems). Rejected outside single quotes: ``$`` and
    backticks (expansion the shell would do at run time, which ``render``
    cannot), backslash before newline, ``$`` or a backtick. Rejected outside any
    quotes: control operators and redirections, unquoted newlines, glob and
    brace characters, ``~`` and ``#`` at the start of a word. Unbalanced quotes
    too. Where there are no problems, ``argv`` is exactly what ``sh -c cmd``
    would pass to the program (and what ``shlex.split`` returns).
    """
    if not _SPECIAL.search(cmd):
        return cmd.split(), []
    argv: list[str] = []
    problems: list[str] = []
    word: list[str] = []
    in_word = False
    state = None  # None, "'" or '"'
    i, n = 0, len(cmd)
    while i < n:
        c = cmd[i]
        if state == "'":
            if c == "'":
                state = None
            else:
                word.append(c)
        elif c == "\\":
            nxt = cmd[i + 1 : i + 2]
            if nxt in ("\n", "$", "`", ""):
                problems.append(f"backslash before {nxt!r} at {_context(cmd, i)}: shells and shlex disagree on it")
            elif state == '"' and nxt not in ('"', "\\"):
                word.append(c)  # inside double quotes, only \" and \\ are escapes
            word.append(nxt)
            in_word = True
            i += 2
            continue
        elif c in "$`":
            kind = "command substitution" if c == "`" or cmd[i + 1 : i + 2] == "(" else "variable expansion"
            problems.append(f"{kind} {c!r} at {_context(cmd, i)}: the shell would expand it when the stage runs")
            word.append(c)
        elif state == '"':
            if c == '"':
                state = None
            else:
                word.append(c)
        elif c in "'\"":
            state = c
            in_word = True
        elif c in " \t":
            if in_word:
                argv.append("".join(word))
                word, in_word = [], False
        else:
            if c in _OPERATORS:
                problems.append(f"shell operator {c!r} outside quotes at {_context(cmd, i)}")
            elif c in _GLOB:
                problems.append(f"glob/brace character {c!r} outside quotes at {_context(cmd, i)}")
            elif not in_word and c in "~#":
                problems.append(f"{c!r} at the start of a word at {_context(cmd, i)}")
            word.append(c)
            in_word = True
        i += 1
    if state is not None:
        problems.append(f"unbalanced {state} quote")
    if in_word:
        argv.append("".join(word))
    return argv, problems


def plain_argv_problems(cmd: str) -> list[str]:
    """Why ``cmd`` is not a plain argument vector (see :func:`split_plain`)."""
    return split_plain(cmd)[1]


def _context(text: str, i: int, width: int = 12) -> str:
    return repr(text[max(0, i - width) : i + width])
