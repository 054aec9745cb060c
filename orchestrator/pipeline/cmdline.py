"""A DVC stage's ``cmd`` as an argument vector, when it is plain words and quotes.

DVC runs ``cmd`` through a shell, while ``render`` must know the exact argv of
``orchestrator run`` without running anything. The two agree only when the
command uses nothing but words and quotes, so anything else is reported
instead of guessed at.
"""

from __future__ import annotations

import re

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


def _context(text: str, i: int, width: int = 12) -> str:
    return repr(text[max(0, i - width) : i + width])
