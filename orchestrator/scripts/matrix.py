"""The matrix: every orchestrated item of a project, planned and rendered for one profile.

This is what ``orchestrator render`` does, and what submission will do before it
submits anything: resolve dvc.yaml (with the profile's params overlay), plan each
item, render its script. Problems are collected across all items and reported
together; files are written only when there are none, and all at once.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.config import binding
from orchestrator.config.profile_schema import LoadedProfile
from orchestrator.errors import CheckError, PlanError
from orchestrator.pipeline import stages
from orchestrator.scripts import devices, lint, render
from orchestrator.scripts.plan import Form, Plan
from orchestrator.scripts.workspace import Workspace
from orchestrator.util import files
from orchestrator.util.runner import Runner


class Scripts(Mapping[str, str]):
    """Script texts by file name, rendered when read and not kept: 100,000 scripts of
    6 kB would hold more memory than DVC needs to resolve the whole matrix."""

    def __init__(self, plans: dict[str, Plan]) -> None:
        self._plans = plans

    def __getitem__(self, fname: str) -> str:
        return render.render(self._plans[fname])

    def __iter__(self) -> Iterator[str]:
        return iter(self._plans)

    def __len__(self) -> int:
        return len(self._plans)

    def __contains__(self, fname: object) -> bool:
        return fname in self._plans  # without rendering it


@dataclass(frozen=True)
class Rendered:
    """The scripts of a matrix for one profile, keyed by file name."""

    profile: LoadedProfile
    plans: tuple[Plan, ...]
    scripts: Mapping[str, str]
    devices: Mapping[str, devices.Devices] = dataclasses.field(default_factory=dict)  # by stage: where its items run, and why


def render_matrix(root: Path, cluster: str | None, runner: Runner, targets: Sequence[str] = (), form: Form | None = None) -> Rendered:
    """Plan and render every orchestrated item; PlanError lists every problem found."""
    stages.require_pipeline(root)
    ws = Workspace.open(root, cluster, runner, form)
    jobs, item_problems = stages.jobs(ws.items(targets))
    if not targets:  # every item of every stage: each stage's choice of devices is known (scripts.devices)
        ws.know(jobs)
    jobs.reverse()
    plans = tuple(ws.plan(jobs.pop()) for _ in range(len(jobs)))  # each item let go once planned
    problems = _grouped(item_problems + [(p.item, msg) for p in plans for msg in p.problems])
    by_name: dict[str, Plan] = {}
    for plan in plans:
        fname = render.filename(plan)
        if fname in by_name:  # file names are unique per item name (plan.safe_name): a guard, not an expected case
            problems.append(f"{plan.item}: its script name {fname} collides with another item's")
        by_name[fname] = plan
    if problems:
        raise PlanError(f"cannot plan the pipeline for cluster {ws.cluster!r}", problems)
    return Rendered(ws.profile, plans, Scripts(by_name), ws.chosen_devices)


def check_rendered(rendered: Rendered, runner: Runner, shellcheck: bool = True) -> list[str]:
    """Problems found by bash and shellcheck (and in the profile's full-node binding)."""
    node = rendered.profile.profile.node
    found = []
    if rendered.profile.profile.uses_slurm and node.gpus:
        full = binding.problems(node.binding(node.gpus), node.gpus, node.logical_cpus, node.reserved)
        found += [f"profile {rendered.profile.name}, full node: {p}" for p in full]
    found += lint.bash_problems(rendered.scripts, runner)
    if shellcheck:
        sc = lint.shellcheck_problems(rendered.scripts, runner)
        if sc is None:
            found.append("shellcheck is not installed (apt-get install shellcheck), or pass --no-shellcheck")
        else:
            found += sc
    return found


def check_or_raise(rendered: Rendered, runner: Runner, shellcheck: bool = True, more: Sequence[str] = ()) -> Rendered:
    """``rendered`` with its texts kept (checked once, written as checked), or CheckError
    listing every problem, ``more`` (found by other checks, e.g. scripts.cluster_checks) too."""
    rendered = dataclasses.replace(rendered, scripts=dict(rendered.scripts))
    found = [*more, *check_rendered(rendered, runner, shellcheck)]
    if found:
        raise CheckError(f"{len(rendered.scripts)} script(s) for cluster {rendered.profile.name!r} failed their checks", found)
    return rendered


@contextlib.contextmanager
def scripts_folder(out: Path) -> Iterator[Path]:
    """``out`` made ready for the scripts before the work that fills it, and taken back if
    that work fails.

    Entering creates it (with missing parents) and writes and removes a file there, so
    a place nothing can be written (a read-only or pseudo file system, a path through
    a file) raises OSError before a matrix is planned. If the block raises, the folders
    entering created are removed again with the scripts written into them, so a failed
    render leaves no empty folder and no part of a matrix behind. (In a folder that was
    already there, scripts written before the failure stay: each is whole, and is the
    current text of its item.)
    """
    missing = files.missing_folders(out)
    try:
        files.make_dirs(out)
        fd, probe = tempfile.mkstemp(prefix=".orchestrator-probe.", suffix=".tmp", dir=out)
        os.close(fd)
        os.unlink(probe)
        yield out
    except BaseException:
        if missing:
            _take_back(out, missing)
        raise


def _take_back(out: Path, created: list[Path]) -> None:
    """Remove the scripts in ``out`` and the (then empty) folders this run created."""
    with contextlib.suppress(OSError):
        for entry in os.scandir(out):
            if entry.is_file(follow_symlinks=False) and entry.name.endswith((".sh", ".sbatch", ".tmp")):
                os.unlink(entry.path)
    for folder in created:  # deepest first
        try:
            folder.rmdir()
        except OSError:
            return  # not empty (someone else's file) or not ours to remove: leave the rest


def write(rendered: Rendered, out: Path, replace_all: bool) -> None:
    """Write the scripts into ``out``; with ``replace_all`` remove scripts no item has any more.

    Unchanged scripts are not rewritten (a re-render of a big matrix then costs
    reads, not writes).
    """
    files.make_dirs(out)
    for fname, text in rendered.scripts.items():  # one text at a time
        write_script(out / fname, text)
    if replace_all:
        for stale in out.iterdir():
            if stale.name not in rendered.scripts and stale.suffix in (".sh", ".sbatch"):
                stale.unlink()


def write_script(path: Path, text: str) -> None:
    """Write one script beside its final name and rename it into place, so it is
    never half-written; leave it alone if it already holds ``text``."""
    files.write_if_changed(path, text, mode=0o755)


def _grouped(pairs: list[tuple[str, str]], shown: int = 3) -> list[str]:
    """One line per distinct problem, naming the items it affects."""
    by_problem: dict[str, list[str]] = {}
    for item, msg in pairs:
        by_problem.setdefault(msg, []).append(item)
    lines = []
    for msg, items in by_problem.items():
        who = ", ".join(items[:shown]) + (f" (+{len(items) - shown} more)" if len(items) > shown else "")
        lines.append(f"{who}: {msg}")
    return lines
