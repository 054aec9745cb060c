"""The files DVC rewrites in place, and the way back when a killed process cut one short.

DVC opens these files for writing and dumps into them (it does not write beside and
rename), so a process killed mid-write (a login node ending a session, a job's time
limit) leaves one empty or cut short, and DVC reads each before any stage runs. Measured
by tracing every file DVC 3.67 opens for writing in ``dvc repro``, ``dvc exp run`` (also
``-S``, ``--temp``) on an orchestrated project:

* ``dvc.lock``: DVC's record of the finished stages, rewritten whole after each stage
  (``dvc repro``, ``dvc exp run``, ``orchestrator record``). Cut where YAML or DVC's
  schema no longer holds, every DVC command stops ("unable to read: 'dvc.lock'", "'./dvc.lock'
  validation failed"); cut elsewhere (about two offsets in three), DVC reads the stages
  that are left and sees the others as changed, which an orchestrated stage answers by
  attaching to its finished job and a plain one from DVC's run cache.
* ``.dvc/tmp/rwlock`` and ``.dvc/tmp/exps/rwlock``: which process reads or writes what;
  rewritten as each command starts and ends. Whoever was writing was cut off, so its
  entries are gone either way: an unreadable file is replaced by an empty lock.
* ``params.yaml``: under ``dvc exp run -S`` only. It is the user's file, so it is never
  replaced here: :func:`mend` refuses with the path of the last readable copy.

The way back for ``dvc.lock`` needs a readable copy, which DVC does not keep: every
``orchestrator run`` a stage starts (DVC is waiting for it then, not writing) keeps one
under ``.orchestrator/kept/`` (written beside and renamed, so no kill cuts it), and so do
``record`` and ``submit``. :func:`mend` moves a cut file aside (never deleted; a file
unreadable otherwise, such as a list or another program's file, is left to DVC's own error),
puts back that copy (or git's ``HEAD`` version where there is none; where neither exists,
no lock: every stage then looks new to DVC), and the caller records from the ledger
every item that finished since (:mod:`orchestrator.jobs.record`).
"""

from __future__ import annotations

import json
import os
import shlex
import time
from collections.abc import Callable
from pathlib import Path

from orchestrator.config.params import PARAMS_FILE
from orchestrator.errors import PipelineError, UnreadableFile
from orchestrator.pipeline.stages import LOCK_FILE, MAX_LOCK_BYTES
from orchestrator.util import files
from orchestrator.util.runner import Runner

RWLOCKS = (".dvc/tmp/rwlock", ".dvc/tmp/exps/rwlock")
KEPT_DIR = ".orchestrator/kept"
CUT_DIR = f"{KEPT_DIR}/cut"  # unreadable files moved aside, stamped with the time they were found
MEND = "orchestrator record"  # the one command every message names


def lock_problem(text: str) -> str | None:
    """Why DVC cannot read ``text`` as a dvc.lock (its own parser and schema), or None."""
    from dvc.schema import COMPILED_LOCKFILE_SCHEMA
    from dvc.utils.serialize import parse_yaml

    try:
        COMPILED_LOCKFILE_SCHEMA(parse_yaml(text, LOCK_FILE) or {})
    except Exception as exc:  # noqa: BLE001 - YAML's, voluptuous' and DVC's errors alike mean "unreadable"
        return _said(exc)
    return None


def _said(exc: Exception) -> str:
    """DVC's parse or schema error in one short line: the YAML problem and where, else the words."""
    cause = getattr(exc, "__cause__", None) or exc
    mark, problem = getattr(cause, "problem_mark", None), getattr(cause, "problem", None)
    if mark is not None and problem:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(cause).split())[:200] or type(exc).__name__


def cut_problem(text: str) -> str | None:
    """Why DVC cannot read ``text`` when it is a dvc.lock DVC was writing and did not finish,
    or None: readable, or unreadable in a way no cut gives (a list, another program's file,
    an edit), which is not ours to replace. DVC dumps the lock starting with :data:`_HEAD`,
    so a cut one is a prefix of it or starts with it."""
    return lock_problem(text) if _as_dvc_begins(text) else None


def surely_cut(text: str) -> str | None:
    """Why ``text``, a dvc.lock from elsewhere (a cluster's, read as plain data whatever DVC's
    schema says), is surely one DVC did not finish writing, or None: it is a prefix of a lock
    as DVC writes it that is not whole YAML, or does not end its last line."""
    if not _as_dvc_begins(text):
        return None
    if not text.endswith("\n"):
        return "it ends mid-line"
    from dvc.utils.serialize import parse_yaml

    try:
        parse_yaml(text, LOCK_FILE)
    except Exception as exc:  # noqa: BLE001 - any YAML error
        return _said(exc)
    return None


# How every dvc.lock DVC 3 writes begins (its schema key first, then the stages).
_HEAD = "schema: '2.0'\nstages:\n"


def _as_dvc_begins(text: str) -> bool:
    """Whether ``text`` begins as DVC writes a lock, or is a beginning of that (a cut one)."""
    return text.startswith(_HEAD) or _HEAD.startswith(text)


def _read(path: Path) -> str | None:
    """The file's text; None where it is missing, not a regular file, too big or not UTF-8."""
    try:
        return files.read_text(path, MAX_LOCK_BYTES)
    except (UnreadableFile, UnicodeDecodeError):
        return None


def keep(root: Path) -> None:
    """Keep a copy of ``root``'s dvc.lock and params.yaml where no DVC process can cut it,
    when they differ from the copies kept. Call it only while no DVC process writes them and
    after DVC last wrote them whole (a stage's command runs while ``dvc repro`` waits for it;
    ``record`` after its own write). Checking that here would cost a YAML parse per item (a
    third of a second at 1,000 items): the copy is checked when it is put back."""
    for name in (LOCK_FILE, PARAMS_FILE):
        text = _read(root / name)
        if text is None or (name == LOCK_FILE and not (text.startswith(_HEAD) and text.endswith("\n"))):
            continue  # none, or not as DVC writes it whole
        kept = root / KEPT_DIR / name
        if _read(kept) == text:
            continue
        try:
            files.make_dirs(kept.parent)
            files.atomic_write(kept, text)
        except OSError:
            pass  # a full disk costs the copy, not the run


def _params_readable(text: str) -> bool:
    from dvc.utils.serialize import parse_yaml

    try:
        parse_yaml(text, PARAMS_FILE)
    except Exception:  # noqa: BLE001 - any parse error
        return False
    return True


def broken(root: Path) -> list[str]:
    """One line per file DVC rewrites in place that DVC cannot read now, naming the fix."""
    found = []
    for name in RWLOCKS:
        if _rwlock_cut(root / name):
            found.append(f"{root / name} is cut short (a DVC process killed while it wrote it): run `{MEND}`")
    lock = root / LOCK_FILE
    text = _read(lock)
    if text is not None and (problem := cut_problem(text)):
        found.append(f"{lock} cannot be read ({problem}): a DVC process killed while it wrote it? run `{MEND}`")
    return found


def require_readable(root: Path) -> None:
    """PipelineError naming :data:`MEND` when a file of :func:`broken` is cut short."""
    if found := broken(root):
        raise PipelineError(
            "DVC cannot read its own files: a DVC process was killed while it wrote them",
            found,
            hints=[f"`{MEND}` puts back the last readable copy and records every item that finished since; then `dvc repro`"],
        )


def _rwlock_cut(path: Path) -> bool:
    if not path.is_file():
        return False
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        return True
    return False


def mend(root: Path, runner: Runner | None = None, say: Callable[[str], None] = print) -> bool:
    """Put back each file DVC cannot read: the rwlocks emptied, dvc.lock from the copy kept
    (else git's HEAD, else none), the cut file moved aside. True when anything changed.
    PipelineError, with nothing changed, for an unreadable params.yaml (the user's)."""
    _refuse_cut_params(root)
    changed = False
    for name in RWLOCKS:
        if _mend_rwlock(root / name):
            say(f"{root / name} was cut short by a killed DVC process: reset to an empty lock")
            changed = True
    lock = root / LOCK_FILE
    text = _read(lock)
    if text is None or (problem := cut_problem(text)) is None:
        return changed  # whole, or broken otherwise than by a cut: DVC's own error names it
    aside = _move_aside(root, lock).relative_to(root)
    source, good = _last_readable(root, runner)
    if good is None:
        say(f"{lock} could not be read ({problem}; kept as {aside}); no readable copy to put back: DVC starts a new one")
    else:
        files.atomic_write(lock, good)
        say(f"{lock} could not be read ({problem}; kept as {aside}): put back {source}")
    return True


def _mend_rwlock(path: Path) -> bool:
    if not path.is_file():
        return False
    from dvc.lock import make_lock

    # Under DVC's own guard for the file, so no DVC process writes it meanwhile.
    with make_lock(str(path.with_name(path.name + ".lock")), tmp_dir=str(path.parent)):
        if not _rwlock_cut(path):
            return False
        path.write_text("{}", encoding="utf-8")
        return True


def _move_aside(root: Path, path: Path) -> Path:
    aside = root / CUT_DIR / f"{path.name}.{time.strftime('%Y%m%dT%H%M%S')}.{os.getpid()}"
    files.make_dirs(aside.parent)
    os.replace(path, aside)
    return aside


def _last_readable(root: Path, runner: Runner | None) -> tuple[str, str | None]:
    """(where it came from, the text) of the newest readable dvc.lock: the copy kept, else HEAD's."""
    kept = root / KEPT_DIR / LOCK_FILE
    text = _read(kept)
    if text is not None and lock_problem(text) is None:
        return f"the last readable copy ({_age(kept)})", text
    if runner is not None:
        from orchestrator.util.git import Git

        committed = Git(root, runner).output("show", f"HEAD:./{LOCK_FILE}", timeout=60)
        if committed is not None and lock_problem(committed) is None:
            return "the committed copy (git HEAD)", committed
    return "nothing", None


def _age(path: Path) -> str:
    return "kept " + time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(path.stat().st_mtime))


def _refuse_cut_params(root: Path) -> None:
    """An unreadable params.yaml may be DVC's cut (``dvc exp run -S`` killed) or the user's
    edit: not ours to replace either way, so the fix is named and nothing is changed."""
    text = _read(root / PARAMS_FILE)
    if text is None or _params_readable(text):
        return
    kept = root / KEPT_DIR / PARAMS_FILE
    hints = ["it is your file, so it is not replaced here"]
    if (copy := _read(kept)) is not None and _params_readable(copy):
        put_back = f"cp {shlex.quote(str(kept))} {shlex.quote(str(root / PARAMS_FILE))}"
        hints.append(f"if `dvc exp run -S` was killed while it wrote it, its last readable copy ({_age(kept)}) is {kept}: `{put_back}`")
    hints.append(f"or `git checkout -- {PARAMS_FILE}` for the committed one; then `{MEND}` again")
    raise PipelineError(f"{root / PARAMS_FILE} cannot be read as YAML", hints=hints)
