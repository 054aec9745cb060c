"""`orchestrator init`: what an existing DVC project needs to run its stages through the orchestrator.

It only adds: the ``orchestrator`` section of params.yaml when there is none (appended
as text, so the user's formatting and comments stay as they are), ``.orchestrator/``
(scripts, logs, the job ledger: this workspace's state) to .gitignore and .dvcignore
where they do not ignore it yet, and a containers/images.yaml skeleton when there is
none. Run twice, the second run changes nothing and says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click

from orchestrator.cli.options import cluster_option, project_option
from orchestrator.errors import OrchestratorError, UnreadableFile
from orchestrator.util import files

# The lines that already keep our state folder out of git or DVC (gitignore syntax).
_IGNORES_STATE = re.compile(r"/?\.orchestrator(/\*{0,2})?")


@dataclass(frozen=True)
class Change:
    path: str  # relative to the project
    changed: bool
    what: str  # what was done, or what is there already


@click.command()
@cluster_option("The profile this workspace runs on, written to params.yaml", default="default: local")
@project_option
def init(cluster: str | None, project: Path) -> None:
    """Add what an existing DVC project needs (params, ignores, images.yaml); change nothing else.

    Appends the `orchestrator:` section to params.yaml unless it has one, adds
    `.orchestrator/` to .gitignore and .dvcignore unless they ignore it, and
    writes containers/images.yaml unless it exists. Idempotent.
    """
    changes = adopt(project, cluster)
    for c in changes:
        click.echo(f"{c.path}: {c.what}")
    if not any(c.changed for c in changes):
        click.echo("nothing to do: this project is set up already")
        return
    click.echo(
        "next: set orchestrator.account (and orchestrator.image: none, an images.yaml entry, or your .sif) in params.yaml, "
        "then `orchestrator render --cluster NAME --check`"
    )


def adopt(root: Path, cluster: str | None) -> list[Change]:
    """Bring ``root`` (a folder with dvc.yaml) up to what the orchestrator needs; one Change per file.

    Every file is read and checked before any is written: a refusal leaves the project as it was."""
    from orchestrator.pipeline.stages import PIPELINE_FILE

    if not (root / PIPELINE_FILE).is_file():
        raise OrchestratorError(
            f"{str(root.absolute())!r} has no {PIPELINE_FILE}: `orchestrator init` adds to an existing DVC project",
            hints=[f"run it in the folder with {PIPELINE_FILE} (or give --project), or make the pipeline first (dvc init, dvc stage add)"],
        )
    steps = [_params(root, cluster), *(_ignore(root, name) for name in (".gitignore", ".dvcignore")), _images(root)]
    for _, write in steps:
        if write is not None:
            write()
    return [change for change, _ in steps]


# params.yaml, .gitignore and .dvcignore are small text files; init appends to them as UTF-8.
_MAX_TEXT_BYTES = 16 << 20

Step = tuple[Change, Callable[[], None] | None]  # what init does to a file, and the write that does it (None: nothing)


def _read(path: Path) -> str:
    """The text of a file init appends to ("" when there is none), or one error saying what it is instead."""
    try:
        return files.read_text(path, _MAX_TEXT_BYTES, follow_symlinks=True)  # the user's own file may be a link
    except UnreadableFile as exc:
        if exc.missing:
            return ""
        raise OrchestratorError(
            f"{path} {exc.reason}: `orchestrator init` appends to it as UTF-8 text",
            hints=["make it a UTF-8 text file (or move it away), then run init again; nothing was changed"],
        ) from None


def _appender(path: Path, text: str) -> Callable[[], None]:
    def write() -> None:
        with path.open("a", encoding="utf-8") as f:  # appended, never rewritten: the user's formatting and comments stay
            f.write(text)

    return write


def _params(root: Path, cluster: str | None) -> Step:
    from orchestrator.config import params, profile
    from orchestrator.util import yamlio

    path = root / params.PARAMS_FILE
    old = _read(path)
    data = yamlio.load_text(old, str(path)) or {}
    if not isinstance(data, dict):
        raise OrchestratorError(f"{path}: expected a mapping at the top level, found {type(data).__name__}; fix it, then run init again")
    name = cluster or params.DEFAULT_CLUSTER
    example = profile.load(name).profile.scheduler.account_example  # an unknown profile: one error, with the valid names
    if "orchestrator" in data:
        section = data["orchestrator"]
        current = section.get("cluster") if isinstance(section, dict) else None
        unwritten = f"; --cluster {cluster} not written: set orchestrator.cluster yourself" if cluster and cluster != current else ""
        return Change(params.PARAMS_FILE, False, f"has an orchestrator section already (cluster {current}), left as it is{unwritten}"), None
    section = params.section_text(name, example)
    gap = ""  # a blank line between the user's last line and ours
    if old.strip():
        gap = "\n\n" if not old.endswith("\n") else "\n"
    new = old + gap + section
    # Appended text can only join a file in block style: one whose last mapping is written
    # in flow style ({...}) would not read back. Check before writing anything.
    try:
        merged = yamlio.load_text(new, str(path))
    except OrchestratorError:
        merged = None
    if not isinstance(merged, dict) or {k: v for k, v in merged.items() if k != "orchestrator"} != data or "orchestrator" not in merged:
        raise OrchestratorError(
            f"{path}: cannot append the orchestrator section to it as text (is it written in flow style?)",
            hints=["add this yourself:\n" + section],
        )
    change = Change(params.PARAMS_FILE, True, f"added the orchestrator section (cluster {name}, account null, image none)")
    return change, _appender(path, gap + section)


def _ignore(root: Path, name: str) -> Step:
    from orchestrator.scripts.workspace import STATE_DIR

    path = root / name
    old = _read(path)
    if any(_IGNORES_STATE.fullmatch(line.strip()) for line in old.splitlines()):
        return Change(name, False, f"ignores {STATE_DIR}/ already"), None
    what = "git" if name == ".gitignore" else "DVC"
    lines = f"# The orchestrator's scripts, logs and job ledger: this workspace's own state, not for {what}.\n{STATE_DIR}/\n"
    change = Change(name, True, f"{'added' if old else 'created with'} {STATE_DIR}/")
    return change, _appender(path, ("\n" if old and not old.endswith("\n") else "") + lines)


def _images(root: Path) -> Step:
    from orchestrator.containers.images import IMAGES_FILE, SKELETON

    path = root / IMAGES_FILE
    if path.exists() or path.is_symlink():
        return Change(IMAGES_FILE, False, "exists already (left as it is)"), None
    if path.parent.exists() and not path.parent.is_dir():
        raise OrchestratorError(
            f"{path.parent} is not a folder: `orchestrator init` writes {IMAGES_FILE} in it",
            hints=["move it away, then run init again; nothing was changed"],
        )

    def write() -> None:
        path.parent.mkdir(exist_ok=True)
        with path.open("x", encoding="utf-8") as f:
            f.write(SKELETON)

    return Change(IMAGES_FILE, True, "created: no image yet, and how to add one"), write
