"""The cluster's side of a sync: check out what the workstation pushed, keeping what runs there wrote.

Runs in the project's repository on the login node (``orchestrator remote checkout
COMMIT [--changes COMMIT]``, which :mod:`orchestrator.remote.sync` calls over ssh after
``git push`` put the commits there). The folder is a git repository whose working tree
is also where the jobs ran: outputs, the ledger (``.orchestrator/``), the DVC cache.

- ``git checkout --detach COMMIT``: only files git tracks change; untracked and ignored
  files (outputs, ledger, cache) stay. Never ``git clean``, never ``--force``. A file the
  new commit tracks that is untracked here stops the checkout (git's own refusal):
  :class:`CheckoutRefused` lists them, nothing changed. Except a file whose bytes are
  the commit's own (nothing is lost when git puts it in place) and a run's result (below).
- Results: a file under one of the pipeline's declared outputs (outs, metrics, plots of
  the dvc.yaml there) that a run there rewrote or removed since the last checkout, or
  that is untracked there while the new commit tracks it, is the cluster's, as its
  dvc.lock entry is: set aside, the checkout made, and put back as the run left it. The
  workstation tracks such files once ``orchestrator fetch`` brought them home and they
  were committed; from then on every run there changes a tracked file, and a later run
  may have rewritten it again before the next sync. None of that is a change by hand,
  and refusing it would stop the loop at its second round. The checkout names the files
  it kept, and ``orchestrator fetch`` brings them home.
- Other changes to tracked files made on the cluster would be lost, so they stop the
  sync (:class:`ClusterChanges`, listing them), with two exceptions, the files DVC
  itself writes there:

  ``dvc.lock``: DVC records each finished item's deps and outputs in it, on the
  cluster, where the outputs are; the workstation's committed copy lags behind until
  results come back. Taking the workstation's copy would forget what the cluster has
  done (the next ``dvc status`` there would call every finished item stale, or
  changed), and keeping the cluster's copy whole would undo entries the workstation
  changed on purpose. So the lock is merged stage by stage, three ways, with the lock
  of the commit checked out before as the base: an entry the cluster changed since
  that checkout (a run wrote it) is the cluster's; every other entry is the new
  commit's. When both changed one, the cluster wins: an entry must describe the files
  that are THERE, or DVC calls them changed. The merged lock stays a working-tree
  change (``git status`` shows it modified), as it was before the sync.

  ``.gitignore``: DVC adds each output it makes to the .gitignore beside it. Merged
  by lines: the new commit's, then the lines the cluster added that it lacks.

- ``--changes``: the workstation's uncommitted changes, as a commit on top of COMMIT
  (see :mod:`sync`), applied to the working tree after the checkout (``git apply`` of
  their binary diff), not committed. The next sync takes them back out first (a reverse
  apply, which succeeds only while the files are as it left them), so they never count
  as the cluster's own changes; a file edited there since is one, and stops the sync.

What the last sync checked out is kept in ``.orchestrator/remote/synced.json``.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import yaml

from orchestrator.pipeline import stages
from orchestrator.util import yamlio
from orchestrator.util.git import Git
from orchestrator.util.runner import Completed, Runner
from orchestrator.util.ssh import RemoteError

STATE_FILE = ".orchestrator/remote/synced.json"
LOCK_NAME = "dvc.lock"
IGNORE_NAME = ".gitignore"
MERGED_NAMES = (LOCK_NAME, IGNORE_NAME)
# Pathspecs that leave the merged files out of a diff of the workstation's changes.
NOT_MERGED = tuple(f":(exclude,glob)**/{name}" for name in MERGED_NAMES)
# Before a command that takes file names from the tree: a name such as `out/*.json` is that file, not a glob.
LITERAL = "--literal-pathspecs"
# What a sync sends (``git rev-parse`` and ``git commit-tree`` print them): full commit ids only.
# They reach git as revisions, where no ``--`` can stand before them; a value that starts with
# ``-`` would be taken as an option, and a name like ``HEAD~3`` would check out something else.
COMMIT_ID = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")


class ClusterChanges(RemoteError):
    """Tracked files were changed on the cluster; a checkout would lose them. Nothing changed."""


class CheckoutRefused(RemoteError):
    """git refused the checkout (files in the way); nothing changed."""


@dataclass(frozen=True)
class CheckoutOutcome:
    commit: str
    changes: str | None
    kept_entries: dict[str, list[str]] = field(default_factory=dict)  # lock file -> stages kept from the cluster
    kept_ignores: dict[str, list[str]] = field(default_factory=dict)  # .gitignore -> lines kept from the cluster
    kept_results: list[str] = field(default_factory=list)  # run results kept as the cluster's runs left them
    undone: bool = False  # the previous sync's uncommitted changes were taken out first


def merged_file(path: str) -> bool:
    return PurePosixPath(path).name in MERGED_NAMES


def merge_lock(base: str | None, ours: str | None, theirs: str | None) -> tuple[str | None, list[str]]:
    """The dvc.lock to leave after the checkout, and the stages whose entry is the cluster's.

    ``base``: the lock of the commit checked out before; ``ours``: the cluster's working
    copy; ``theirs``: the new commit's. None: no such file."""
    if ours is None or ours == base:
        return theirs, []
    b, o, t = _stages(base), _stages(ours), _stages(theirs)
    if o is None:  # not a lock DVC could read either: the commit's, and say nothing was kept
        return theirs, []
    b, t = b or {}, t or {}
    merged: dict = {}
    kept: list[str] = []
    for name in [*t, *(n for n in o if n not in t)]:
        if o.get(name) != b.get(name):  # a run there wrote (or DVC removed) it since the last checkout
            if name in o:
                merged[name] = o[name]
            if o.get(name) != t.get(name):
                kept.append(name)
        elif name in t:
            merged[name] = t[name]
    top = yamlio.parse(theirs) if theirs else None
    document = dict(top) if isinstance(top, dict) else {"schema": "2.0"}
    document["stages"] = merged
    return yamlio.dump(document), kept


def _stages(text: str | None) -> dict | None:
    if text is None:
        return None
    try:
        data = yamlio.parse(text)
    except yaml.YAMLError:
        return None
    if data is None:
        return {}
    stages = data.get("stages") if isinstance(data, dict) else None
    return stages if isinstance(stages, dict) else ({} if isinstance(data, dict) else None)


def merge_ignore(base: str | None, ours: str | None, theirs: str | None) -> tuple[str | None, list[str]]:
    """The .gitignore to leave: the new commit's lines, then those the cluster added that it lacks."""
    if ours is None or ours == base:
        return theirs, []
    had = set((base or "").splitlines())
    new = (theirs or "").splitlines()
    added = [line for line in ours.splitlines() if line not in had and line not in new and line.strip()]
    if not added:
        return theirs, []
    return "\n".join([*new, *added]) + "\n", added


@dataclass
class _Git:
    root: Path
    runner: Runner

    def __call__(self, *args: str, check: bool = True) -> Completed:
        done = Git(self.root, self.runner).run(*args)
        if check and done.returncode != 0:
            raise RemoteError(
                f"`git {' '.join(args)}` failed in {self.root} (exit {done.returncode})", done.stderr.strip().splitlines()[-8:]
            )
        return done

    def show(self, commit: str, path: str) -> str | None:
        done = self("show", f"{commit}:{path}", check=False)
        return done.stdout if done.returncode == 0 else None

    def diff_file(self, a: str, b: str) -> Path:
        """``git diff --binary A B`` (the merged files left out) in a file: bytes as they are, no decoding."""
        fd, name = tempfile.mkstemp(prefix="orchestrator-changes-", suffix=".diff")
        os.close(fd)
        self("diff", "--binary", "--no-color", "--no-ext-diff", f"--output={name}", a, b, "--", ".", *NOT_MERGED)
        return Path(name)


def read_state(root: Path) -> dict:
    try:
        data = json.loads((root / STATE_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def checkout(root: Path, commit: str, changes: str | None, runner: Runner) -> CheckoutOutcome:
    """Check out ``commit`` in the repository ``root`` (see the module's docstring)."""
    bad = [
        f"{what} {value!r}"
        for what, value in (("COMMIT", commit), ("--changes", changes))
        if value is not None and not COMMIT_ID.fullmatch(value)
    ]
    if bad:
        raise RemoteError(
            "remote checkout takes full commit ids (40 or 64 hexadecimal digits, as a sync sends them): nothing was changed",
            bad,
            hints=["send the project with `orchestrator remote sync` (or submit --remote) from the workstation"],
        )
    git = _Git(root, runner)
    state = read_state(root)
    undone = _undo_changes(git, state)
    modified = _modified(git)
    outputs = _Outputs(root)
    by_hand = {p: code for p, code in modified.items() if not merged_file(p) and not outputs.hold(p)}
    if by_hand:
        raise ClusterChanges(
            f"the project folder {root} has changes to tracked files that the checkout would lose: nothing was changed there",
            [f"{code} {path}" for path, code in by_hand.items()],
            [
                "keep them: commit them there and bring the commit to the workstation (git fetch over ssh), then submit again",
                f"drop them: `orchestrator remote shell`, then git -C {root} checkout -- FILE...",
                "a file a run writes: declare it in its stage's outs (a sync keeps results; `orchestrator fetch` brings them home)",
            ],
        )
    head = git("rev-parse", "--verify", "-q", "HEAD", check=False).stdout.strip() or None
    merged = [p for p in modified if merged_file(p)]
    saved = {path: _read(root / path) for path in merged}
    base = {path: git.show(head, path) if head else None for path in merged}
    # Untracked dvc.lock or .gitignore files the new commit brings would stop the checkout: merged as well.
    for path in _untracked_merged(git, commit):
        saved[path], base[path] = _read(root / path), None
    # Results as the runs left them (tracked and changed, or untracked where the commit tracks them),
    # and untracked files that already hold the commit's bytes: set aside, put back after the checkout.
    results = [p for p in modified if p not in saved]
    aside = {path: _read_bytes(root / path) for path in [*results, *_untracked_in_the_way(git, commit, set(saved), outputs)]}
    if results:
        git(LITERAL, "checkout", "-q", "HEAD", "--", *results)
    for path in aside:
        if path not in results:
            (root / path).unlink()
    tracked = [p for p in saved if base[p] is not None]
    if tracked:
        git(LITERAL, "checkout", "-q", "HEAD", "--", *tracked)
    for path in saved:
        if base[path] is None:
            (root / path).unlink(missing_ok=True)
    done = git("checkout", "-q", "--detach", commit, check=False)
    if done.returncode != 0:
        _restore(root, saved)
        _put_back(root, aside)
        raise CheckoutRefused(
            f"git refused to check out {commit[:12]} in {root}: nothing was changed there",
            done.stderr.strip().splitlines()[-12:],
            ["move or remove the files it names there (`orchestrator remote shell`), or stop tracking them on the workstation"],
        )
    _put_back(root, aside)
    kept_results = _differing(git, list(aside))
    kept_entries: dict[str, list[str]] = {}
    kept_ignores: dict[str, list[str]] = {}
    for path, ours in saved.items():
        theirs = git.show(commit, path)
        merge = merge_lock if PurePosixPath(path).name == LOCK_NAME else merge_ignore
        text, kept = merge(base[path], ours, theirs)
        if text is None:
            (root / path).unlink(missing_ok=True)
        elif text != theirs:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_text(text)
        if kept:
            (kept_entries if merge is merge_lock else kept_ignores)[path] = kept
    if changes:
        _apply(git, commit, changes)
    (root / STATE_FILE).parent.mkdir(parents=True, exist_ok=True)
    (root / STATE_FILE).write_text(json.dumps({"commit": commit, "changes": changes}) + "\n")
    return CheckoutOutcome(commit, changes, kept_entries, kept_ignores, kept_results, undone)


class _Outputs:
    """The pipeline's declared outputs there, resolved (by DVC) only when a file asks: most syncs
    meet no changed file and should not pay for resolving a large matrix."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._found: list[str] | None = None

    def hold(self, path: str) -> bool:
        if self._found is None:
            self._found = stages.run_outputs(self.root)
        return stages.written_by_runs(path, self._found) and not merged_file(path)


def _undo_changes(git: _Git, state: dict) -> bool:
    """Take the previous sync's uncommitted changes out of the working tree, if they are still as applied."""
    before, changes = state.get("commit"), state.get("changes")
    if not (isinstance(before, str) and isinstance(changes, str) and COMMIT_ID.fullmatch(before) and COMMIT_ID.fullmatch(changes)):
        return False  # none sent, or a state file that is not what a sync wrote: nothing of it goes to git
    try:
        diff = git.diff_file(before, changes)
    except RemoteError:  # the commits are gone (a new clone): nothing to take out
        return False
    try:
        if git("apply", "-R", "--check", str(diff), check=False).returncode != 0:
            return False  # edited since: the check that follows names the files
        git("apply", "-R", str(diff))
        return True
    finally:
        diff.unlink(missing_ok=True)


def _apply(git: _Git, commit: str, changes: str) -> None:
    diff = git.diff_file(commit, changes)
    try:
        done = git("apply", "--whitespace=nowarn", str(diff), check=False)
        if done.returncode != 0:
            raise RemoteError(
                f"the workstation's uncommitted changes did not apply on top of {commit[:12]} (the commit is checked out)",
                done.stderr.strip().splitlines()[-8:],
            )
    finally:
        diff.unlink(missing_ok=True)


def _modified(git: _Git) -> dict[str, str]:
    """Tracked files that differ from HEAD (in the index or the working tree): path -> status code."""
    if git("rev-parse", "--verify", "-q", "HEAD", check=False).returncode != 0:
        return {}  # a new repository: nothing checked out yet
    out = git("status", "--porcelain=v1", "-z", "--untracked-files=no", "--no-renames").stdout
    return {entry[3:]: entry[:2].strip() for entry in out.split("\0") if len(entry) > 3}


def _untracked_merged(git: _Git, commit: str) -> list[str]:
    listed = git("ls-tree", "-r", "--name-only", "-z", commit).stdout.split("\0")
    wanted = [p for p in listed if p and merged_file(p)]
    if not wanted:
        return []
    untracked = git(LITERAL, "ls-files", "--others", "-z", "--", *wanted).stdout.split("\0")
    return [p for p in untracked if p]


def _untracked_in_the_way(git: _Git, commit: str, merged: set[str], outputs: _Outputs) -> list[str]:
    """Untracked, unignored regular files here that ``commit`` tracks, and that are either a run's
    result (the cluster's, whatever the commit holds) or exactly the commit's bytes.

    Ignored files are left out: git replaces those itself. Anything else in the way (other
    bytes, a link, a folder) is left for git to refuse, so the user sees it."""
    untracked = [p for p in git("ls-files", "--others", "--exclude-standard", "-z").stdout.split("\0") if p and p not in merged]
    if not untracked:
        return []
    blobs = {}
    for entry in git("ls-tree", "-r", "-z", commit).stdout.split("\0"):
        meta, _, path = entry.partition("\t")
        mode, kind, blob = (meta.split() + ["", "", ""])[:3]
        if kind == "blob" and mode in ("100644", "100755"):
            blobs[path] = blob
    candidates = [p for p in untracked if p in blobs and (git.root / p).is_file() and not (git.root / p).is_symlink()]
    if not candidates:
        return []
    hashes = git("hash-object", "--no-filters", "--", *candidates).stdout.split()
    return [p for p, h in zip(candidates, hashes, strict=True) if h == blobs[p] or outputs.hold(p)]


def _differing(git: _Git, paths: list[str]) -> list[str]:
    """Those of ``paths`` that differ from the checked-out commit (changed, removed, untracked)."""
    if not paths:
        return []
    out = git(LITERAL, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames", "--", *paths).stdout
    return sorted(entry[3:] for entry in out.split("\0") if len(entry) > 3)


def _read_bytes(path: Path) -> bytes | None:
    """A result's bytes, None where the run removed it (DVC removes outputs before it runs a stage)."""
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def _put_back(root: Path, kept: dict[str, bytes | None]) -> None:
    for path, data in kept.items():
        if data is None:
            (root / path).unlink(missing_ok=True)
        else:
            (root / path).parent.mkdir(parents=True, exist_ok=True)
            (root / path).write_bytes(data)


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _restore(root: Path, saved: dict[str, str | None]) -> None:
    _put_back(root, {path: None if text is None else text.encode() for path, text in saved.items()})


def describe(outcome: CheckoutOutcome) -> Sequence[str]:
    """What the checkout did, for the workstation to print."""
    lines = [f"checked out {outcome.commit[:12]}" + (" with the workstation's uncommitted changes" if outcome.changes else "")]
    for path, names in outcome.kept_entries.items():
        lines.append(f"{path}: kept the cluster's entries of {len(names)} stage(s) its runs wrote: {', '.join(names[:6])}"
                     + (", ..." if len(names) > 6 else ""))  # fmt: skip
    if outcome.kept_results:
        names = outcome.kept_results
        lines.append(f"kept {len(names)} result file(s) as the cluster's runs left them (bring them home: orchestrator fetch): "
                     + ", ".join(names[:6]) + (", ..." if len(names) > 6 else ""))  # fmt: skip
    for path, added in outcome.kept_ignores.items():
        lines.append(f"{path}: kept {len(added)} line(s) DVC added there: {', '.join(added[:6])}")
    return lines
