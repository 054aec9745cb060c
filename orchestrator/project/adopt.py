"""Bring an existing DVC project up to what the orchestrator needs (``orchestrator init``).

It only adds: the ``orchestrator`` section of params.yaml when there is none (appended
as text, so the user's formatting and comments stay as they are), ``.orchestrator/``
(scripts, logs, the job ledger: this workspace's state) to .gitignore and .dvcignore
where they do not ignore it yet, and a containers/images.yaml skeleton when there is
none. Run twice, the second run changes nothing.

Wrapping stages (:mod:`orchestrator.pipeline.wrap`) is the only change to a file's existing
text, and then in one rename. The section it writes must be one the profile accepts
(`render --check` must not fail on init's own output): a Slurm profile needs an account,
a profile that runs tasks in a container needs an image, and adoption refuses without them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchestratorError, UnreadableFile
from orchestrator.pipeline.wrap import Stage
from orchestrator.util import files

# The lines that already keep our state folder out of git or DVC (gitignore syntax).
_IGNORES_STATE = re.compile(r"/?\.orchestrator(/\*{0,2})?")


@dataclass(frozen=True)
class Change:
    path: str  # relative to the project
    changed: bool
    what: str  # what was done, or what is there already


@dataclass(frozen=True)
class Adoption:
    """What adoption did: one Change per file, and each stage of dvc.yaml as it is afterwards."""

    changes: list[Change]
    stages: list[Stage]

    @property
    def changed(self) -> bool:
        return any(c.changed for c in self.changes)


def adopt(
    root: Path,
    cluster: str | None,
    *,
    account: str | None = None,
    image: str | None = None,
    wrap: tuple[str, ...] = (),
    wrap_all: bool = False,
) -> Adoption:
    """Bring ``root`` (a folder with dvc.yaml) up to what the orchestrator needs; one Change per
    file, and each stage of dvc.yaml as it is afterwards (:class:`orchestrator.pipeline.wrap.Stage`).

    Every file is read and checked before any is written: a refusal leaves the project as it was."""
    from orchestrator.pipeline.stages import PIPELINE_FILE

    if not (root / PIPELINE_FILE).is_file():
        raise OrchestratorError(
            f"{str(root.absolute())!r} has no {PIPELINE_FILE}: `orchestrator init` adds to an existing DVC project",
            hints=[f"run it in the folder with {PIPELINE_FILE} (or give --project), or make the pipeline first (dvc init, dvc stage add)"],
        )
    pipeline, stages = _pipeline(root, wrap, wrap_all, _holds_cluster(root))
    steps = [
        _params(root, cluster, account, image),
        *(_ignore(root, name) for name in (".gitignore", ".dvcignore")),
        _images(root),
        pipeline,
    ]
    for _, write in steps:
        if write is not None:
            write()
    return Adoption([change for change, _ in steps], stages)


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


def _params(root: Path, cluster: str | None, account: str | None, image: str | None) -> Step:
    from orchestrator.config import params, profile
    from orchestrator.util import yamlio

    path = files.edit_target(root, root / params.PARAMS_FILE)
    old = _read(path)
    data = yamlio.load_text(old, str(path)) or {}
    if not isinstance(data, dict):
        raise OrchestratorError(f"{path}: expected a mapping at the top level, found {type(data).__name__}; fix it, then run init again")
    name = cluster or params.DEFAULT_CLUSTER
    loaded = profile.load(name)  # an unknown profile: one error, with the valid names
    example = loaded.profile.scheduler.account_example
    if "orchestrator" in data:
        section = data["orchestrator"]
        current = section.get("cluster") if isinstance(section, dict) else None
        # What the user asked for that differs from what is there: said, never silently dropped.
        given = [f"--{k} {v}" for k, v in (("cluster", cluster), ("account", account), ("image", image)) if v is not None]
        given = [g for g in given if g != f"--cluster {current}"]
        unwritten = f"; {' '.join(given)} not written: set it in that section yourself" if given else ""
        return Change(params.PARAMS_FILE, False, f"has an orchestrator section already (cluster {current}), left as it is{unwritten}"), None
    _check_settings(loaded, account, image)
    section = params.section_text(name, example, account=account, image=image)
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
    written = f"cluster {name}, account {account or 'null'}, image {image or params.NO_IMAGE}"
    change = Change(params.PARAMS_FILE, True, f"added the orchestrator section ({written})")
    return change, _appender(path, gap + section)


def _check_settings(loaded, account: str | None, image: str | None) -> None:
    """Refuse values (or their absence) that the profile would refuse at the first `render`:
    init's own output must plan. One error naming each value to give and what it may be."""
    from orchestrator.config import params

    p = loaded.profile
    s = p.scheduler
    problems = []
    example = f", e.g. {s.account_example}" if s.account_example else ""
    if p.uses_slurm and not account:
        problems.append(f"--account: your Slurm account on {loaded.name} (matching {s.account_pattern!r}{example})")
    elif account and not re.fullmatch(s.account_pattern, account):
        problems.append(f"--account {account!r} does not match {loaded.name}'s pattern {s.account_pattern!r}{example}")
    elif account and account == s.account_example:  # `render --check` refuses the profile's own example too
        problems.append(f"--account {account!r} is {loaded.name}'s example account, not your project's: give your own")
    runtime = p.container.runtime
    if runtime and (image or params.NO_IMAGE) == params.NO_IMAGE:
        problems.append(
            f"--image: what the tasks run in ({loaded.name} runs every task in a {runtime} container): your image file "
            "(a path ending .sif, absolute or from the project), or a containers/images.yaml entry you build with "
            "`orchestrator container build NAME`"
        )
    elif image and params.image_problem(image):
        problems.append(f"--image: {params.image_problem(image)}")
    if problems:
        raise OrchestratorError(
            f"cluster {loaded.name}: init would write values its profile refuses",
            problems,
            hints=[f"give them, e.g. `orchestrator init --cluster {loaded.name} --account ... --image ...`; nothing was changed"],
        )


def _ignore(root: Path, name: str) -> Step:
    from orchestrator.scripts.workspace import STATE_DIR

    path = files.edit_target(root, root / name)
    old = _read(path)
    if any(_IGNORES_STATE.fullmatch(line.strip()) for line in old.splitlines()):
        return Change(name, False, f"ignores {STATE_DIR}/ already"), None
    what = "git" if name == ".gitignore" else "DVC"
    lines = f"# The orchestrator's scripts, logs and job ledger: this workspace's own state, not for {what}.\n{STATE_DIR}/\n"
    change = Change(name, True, f"{'added' if old else 'created with'} {STATE_DIR}/")
    return change, _appender(path, ("\n" if old and not old.endswith("\n") else "") + lines)


def _holds_cluster(root: Path) -> bool:
    """Whether params.yaml will hold ``orchestrator.cluster`` once init is done: init writes the
    section where there is none; a section of the user's own may lack it (DVC refuses a stage that
    declares a param params.yaml lacks). A file init cannot read counts as holding it: its own error
    comes from the params step."""
    from orchestrator.config import params
    from orchestrator.util import yamlio

    try:
        data = yamlio.load_text(_read(root / params.PARAMS_FILE), params.PARAMS_FILE)
    except OrchestratorError:
        return True
    section = data.get("orchestrator") if isinstance(data, dict) else None
    return not isinstance(data, dict) or "orchestrator" not in data or (isinstance(section, dict) and "cluster" in section)


def _pipeline(root: Path, names: tuple[str, ...], wrap_all: bool, cluster_param: bool) -> tuple[Step, list[Stage]]:
    """dvc.yaml with the stages ``names`` (or all that can be) wrapped, and its stages as they will be;
    a stage whose cmd is wrapped now declares ``orchestrator.cluster`` (``cluster_param``: params.yaml holds it)."""
    from orchestrator.pipeline import wrap
    from orchestrator.pipeline.stages import PIPELINE_FILE
    from orchestrator.util import yamlio

    path = root / PIPELINE_FILE
    old = _read(path)
    data = yamlio.load_text(old, str(path))
    stages = wrap.stages_of(data)
    by_name = {s.name: s for s in stages}
    unknown = [n for n in names if n not in by_name]
    if unknown:
        raise OrchestratorError(
            f"--wrap {' '.join(unknown)}: no such stage in {PIPELINE_FILE}",
            hints=[f"stages: {', '.join(by_name) or 'none'}; nothing was changed"],
        )
    refused = [f"stage {n}: {by_name[n].problem}" for n in names if by_name[n].problem]
    if refused:
        raise OrchestratorError(
            f"--wrap: init cannot wrap {'these stages' if len(refused) > 1 else 'this stage'}", refused, hints=["nothing was changed"]
        )
    chosen = [s.name for s in stages if (s.name in names or wrap_all) and not s.problem and (not s.wrapped or s.todo)]
    if not chosen:
        return (Change(PIPELINE_FILE, False, "left as it is"), None), stages
    path = files.edit_target(root, path)  # the rename then replaces the file a link inside the project leads to, not the link
    new = wrap.rewrite(old, data, chosen, cluster_param)
    mode = path.stat().st_mode & 0o7777
    declared = wrap.newly_declaring_cluster(data, yamlio.load_text(new, str(path)), chosen)

    def write() -> None:
        files.atomic_write(path, new, mode=mode)  # one rename: dvc.yaml is either the old file or the new one

    cluster = f", {wrap.CLUSTER_PARAM} among the params of {', '.join(declared)}" if declared else ""
    change = Change(
        PIPELINE_FILE, True, f"wrapped {', '.join(chosen)} in `{wrap.PREFIX}` (outputs persist: true, provenance.json declared{cluster})"
    )
    return (change, write), wrap.stages_of(yamlio.load_text(new, str(path)))


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
