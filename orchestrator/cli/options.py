"""Options and output shared by the commands, declared once so they cannot drift.

The grammar (tests/unit/cli/test_cli_grammar.py walks the click tree to hold it), chosen as DVC users know it:

- Where output goes: ``-o/--out PATH`` (a folder, or a file where there is one file), as ``dvc stage add -o``.
- Machine output: ``--json`` (a flag), as ``dvc exp show --json``. ``--format CHOICE`` only where there are more
  forms than a table and JSON (``layout --format markdown``, ``clusters show --format yaml``).
- Defaults: click's ``show_default`` (a value, or a string saying where it comes from), never "(default: x)" in a help text.
- ``--cluster`` (no short flag) wherever a profile is resolved or a login node reached (with ``--remote``).
- Short flags mean one thing across the commands, and ``run``'s are Slurm's (-c, -N, -G, -t, -p, -A, -q, -C).
- An old spelling stays one release as a hidden alias that says the new one on stderr, then acts as it
  (``old_spelling``, ``deprecated_short``; old command names in ``orchestrator.cli.RENAMED``).
"""

from __future__ import annotations

import errno
import math
import os
import stat
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

from orchestrator.errors import OrchestratorError
from orchestrator.util.files import display_path  # noqa: F401  (the commands' one spelling of a path)

# How `run`, `render`, `submit`, `report` and `container build --push` choose a profile
# (config.selection does the choosing; this only says it).
CLUSTER_DEFAULT = "params.yaml's orchestrator.cluster, else the profile whose cluster_name is Slurm's ClusterName, else local"


def cluster_option(what: str = "Built-in profile name or profile file", default: str | None = CLUSTER_DEFAULT, old_short: bool = True):
    """``--cluster``; ``default`` says how the profile is chosen when it is not given.

    No short flag: `-c` is Slurm's --cpus-per-task, which `orchestrator run` mirrors. The
    ``-c`` it had stays for one release as a hidden alias that says so (``old_short``), except
    where -c means something else (run's --cpus) or belongs to the command passed on (exp run).
    """

    def decorate(f):
        if old_short:
            f = click.option("-c", "old_cluster", hidden=True, default=None, expose_value=False, callback=_old_cluster)(f)
        return click.option("--cluster", default=None, callback=_not_empty, show_default=default or False, help=f"{what}.")(f)

    return decorate


def deprecated_short(new: str):
    """A callback for a hidden short flag kept for one release: says the new spelling once, then acts as it."""

    def said(ctx: click.Context, param: click.Parameter, value: object) -> object:
        if value:
            click.echo(f"orchestrator: {param.opts[0]} is now {new}; the short form goes in the next release", err=True)
        return value

    return said


def _old_cluster(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
    if value is None:
        return
    deprecated_short("--cluster (-c is Slurm's --cpus-per-task)")(ctx, param, value)
    ctx.meta[_OLD_CLUSTER] = _not_empty(ctx, param, value)
    if ctx.params.get("cluster") is None and "cluster" in ctx.params:  # --cluster was processed first and not given
        ctx.params["cluster"] = ctx.meta[_OLD_CLUSTER]


_OLD_CLUSTER = "orchestrator.old_cluster"


def old_spelling(
    old: str,
    dest: str,
    new: str,
    *,
    is_flag: bool = False,
    type: click.ParamType | None = None,
    convert: Callable[[Any], object] = lambda v: v,
):
    """A hidden option kept one release under its old name ``old``: says ``new`` on stderr, then gives its value
    (through ``convert``) to parameter ``dest`` (whose option must take ``callback=given_or_old``), whichever
    click processes first."""

    def said(ctx: click.Context, param: click.Parameter, value: object) -> None:
        if value is None or value is False:
            return
        click.echo(f"orchestrator: {old} is now {new}; the old spelling goes in the next release", err=True)
        value = ctx.meta[_OLD + dest] = convert(value)
        if dest in ctx.params and ctx.params[dest] in (None, False):  # the new option was processed first, not given
            ctx.params[dest] = value

    kind = {"is_flag": True} if is_flag else {"type": type}
    return click.option(old, f"old_{dest}", hidden=True, default=None, expose_value=False, callback=said, **kind)


def given_or_old(ctx: click.Context, param: click.Parameter, value: object) -> object:
    """The new option's value, else what its old spelling gave (``old_spelling``)."""
    if value is None or value is False:
        return ctx.meta.get(_OLD + (param.name or ""), value)
    return value


_OLD = "orchestrator.old."


def _not_empty(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    # An empty value (an unset shell variable, `--cluster ""`) would silently mean "not given".
    if value is not None and not value.strip():
        raise OrchestratorError(f"--cluster {value!r} is empty: give a built-in profile name (orchestrator clusters) or a profile file")
    return value if value is not None else ctx.meta.get(_OLD_CLUSTER)


class FiniteFloat(click.FloatRange):
    """A number in range that is a number: click's FloatRange lets ``nan`` through (no comparison
    with it holds) and ``inf`` wherever there is no maximum, and either would reach a job or a clock."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number ({self._describe_range()})", param, ctx)
        return number


# What to do about the errors a user's paths and disks give most often.
_FILE_HINTS = {
    errno.EROFS: "the file system is read-only: choose a folder you can write (--project, --out)",
    errno.EACCES: "no permission: choose a folder you can write, or fix its owner and mode",
    errno.EPERM: "not permitted here (a pseudo or read-only file system?): choose a folder you can write",
    errno.ENOSPC: "the disk is full: free some space and run again",
    errno.EDQUOT: "your disk quota is used up: free some space and run again",
    errno.ENAMETOOLONG: "a name is longer than the file system allows: use shorter item names or a shorter path",
    errno.ENOTDIR: "a part of the path is a file, not a folder",
    errno.EISDIR: "a folder is in the way where a file should be",
    errno.EEXIST: "something that is not a folder is in the way where a folder should be",
    errno.ENOENT: "a folder on the way does not exist",
    errno.ELOOP: "the path has a loop of symbolic links",
}


def file_error(exc: OSError) -> str:
    """One line for an OSError that names a file: the file(s), the system's reason, what to do."""
    names = " -> ".join(_cut(repr(os.fsdecode(f))) for f in (exc.filename, exc.filename2) if f is not None)
    reason = exc.strerror or str(exc)
    hint = _FILE_HINTS.get(exc.errno or 0)
    return f"{names}: {reason}" + (f" ({hint})" if hint else "")


def _cut(text: str, limit: int = 300) -> str:
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} characters)"


def _project_folder(ctx: click.Context, param: click.Parameter, value: Path) -> Path:
    """The project must be a folder that exists: every command reads it, and one that is
    missing would otherwise read as a project with nothing submitted yet."""
    what = f"--project {_shown(value)}"
    try:
        st = value.stat()
    except FileNotFoundError:
        raise OrchestratorError(f"{what}: no such folder (give the DVC project's folder, the one with dvc.yaml)") from None
    except OSError as exc:
        raise OrchestratorError(f"--project: {file_error(exc)}") from None
    except ValueError as exc:  # a NUL in the path (Python refuses it before the system sees it)
        raise OrchestratorError(f"{what}: {exc}") from None
    if not stat.S_ISDIR(st.st_mode):
        raise OrchestratorError(f"{what} is not a folder (give the DVC project's folder, the one with dvc.yaml)")
    return value


def _shown(path: Path) -> str:
    return _cut(repr(str(path)))


project_option = click.option(
    "--project",
    "project",
    type=click.Path(path_type=Path),
    default=".",
    show_default=True,
    callback=_project_folder,
    help="The DVC project (folder with dvc.yaml).",
)


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(*header, box=None, pad_edge=False, header_style="bold")
    for row in rows:
        t.add_row(*row)
    # Piped output (CI logs) gets whole lines, a terminal gets its own width.
    Console(width=None if sys.stdout.isatty() else 1000).print(t)


class WholeGroup(click.Group):
    """A command group whose --help gives each subcommand's summary whole (its docstring's first sentence,
    wrapped), never cut off with "..."."""

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [
            (name, cmd.get_short_help_str(1000))
            for name in self.list_commands(ctx)
            if (cmd := self.get_command(ctx, name)) and not cmd.hidden
        ]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)
