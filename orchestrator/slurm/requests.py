"""What a job asks Slurm for beyond its layout: memory, QOS, reservation, constraint, and
sbatch options of the user's own, passed through.

A stage sets them with ``orchestrator run``'s options (``--mem 64G``, ``--qos high``,
``--sbatch-option=--licenses=scratch:1``), a project with params.yaml's ``orchestrator``
settings (``mem: 64G``, per cluster under ``clusters.NAME.orchestrator``); a stage's replace
the project's (:meth:`Requests.over`). Both are read in Slurm's own grammar and checked here,
with the same words, so a value one place refuses the other refuses too.

A passed-through option may not set what the orchestrator sets itself (the layout, the
partition, the log, the dependencies...): two values of one option would leave Slurm to
pick one, and the plan (its checks, its cost, ``render``'s table) would describe the other.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields

# A Slurm memory size: a whole number with an optional unit (Slurm's default unit is M).
MEMORY = re.compile(r"([1-9][0-9]{0,8})([KMGT]?)")
_MEMORY_GB = {"K": 1 / 1024**2, "M": 1 / 1024, "": 1 / 1024, "G": 1, "T": 1024}
# A QOS or reservation name: what a directive carries unquoted (patterns.DIRECTIVE_SAFE, less '=').
NAME = re.compile(r"[A-Za-z0-9._@%:/+,-]+")
# A constraint expression: features joined by & (and), | (or), [..] and *N counts (sbatch --constraint).
CONSTRAINT = re.compile(r"[A-Za-z0-9._:+,&|\[\]*-]+")

# The options the orchestrator sets itself, in the script (the plan) or on sbatch's command line.
# A profile's extra_options may not set them a second time, nor may a stage's or a project's
# passed-through options. --error would take the job's stderr away from the log that status,
# logs and a failed run show.
PLANNED_OPTIONS = frozenset(
    "job-name account partition qos constraint reservation time nodes ntasks-per-node gpus-per-node cpus-per-task exclusive "
    "signal requeue open-mode output error chdir dependency array mem mem-per-gpu mem-per-cpu".split()
)
# What else sets the job's layout or its submission another way (tasks, GPUs, CPUs, sharing of
# nodes; how sbatch answers and whether it waits). A site's profile may set some of them
# (--gpus=8 where a site counts GPUs so); a stage or a project may not: its layout is
# `orchestrator run`'s options, and the plan's checks and costs describe those.
LAYOUT_OPTIONS = frozenset(
    "ntasks ntasks-per-gpu ntasks-per-socket ntasks-per-core gpus gpus-per-task gpus-per-socket gres cpus-per-gpu mincpus "
    "oversubscribe overcommit exclude kill-on-invalid-dep parsable wrap wait test-only no-requeue export".split()
)
# sbatch's one-letter forms of options it manages, which it reads as the same options.
SHORT_OPTIONS = {
    "J": "job-name", "A": "account", "p": "partition", "q": "qos", "C": "constraint", "t": "time", "N": "nodes",
    "c": "cpus-per-task", "o": "output", "e": "error", "D": "chdir", "d": "dependency", "a": "array", "n": "ntasks",
    "G": "gpus", "x": "exclude", "s": "oversubscribe", "O": "overcommit", "W": "wait",
}  # fmt: skip
# sbatch options in their own right that are also the start of a planned one (sbatch takes any
# unambiguous start of a long option as the option: --err is --error).
_OWN_OPTIONS = frozenset({"gpus", "ntasks"})
OPTION = re.compile(r"--([a-z][a-z-]*)(=[A-Za-z0-9._@%:/+,-]+)?")
# Where a refused option has a spelling of its own in `orchestrator run`.
RUN_SPELLING = {
    "account": "--account",
    "partition": "--partition",
    "qos": "--qos",
    "constraint": "--constraint",
    "reservation": "--reservation",
    "time": "--time",
    "nodes": "--nodes",
    "gpus": "--gpus",
    "gpus-per-node": "--gpus-per-node",
    "cpus-per-task": "--cpus",
    "mem": "--mem",
    "mem-per-gpu": "--mem-per-gpu",
    "mem-per-cpu": "--mem-per-cpu",
}


def memory_gb(size: str) -> float:
    """A size as Slurm reads it (``60G``, ``491520M``, ``491520``: megabytes), in GiB."""
    m = MEMORY.fullmatch(size)
    if m is None:
        raise ValueError(size)
    return int(m.group(1)) * _MEMORY_GB[m.group(2)]


def planned(name: str, owned: Iterable[str] = PLANNED_OPTIONS, own: Iterable[str] = _OWN_OPTIONS) -> str | None:
    """The option(s) of ``owned`` that ``--name`` sets: itself, or those it is the start of."""
    owned = frozenset(owned)
    if name in owned:
        return name
    if name in own:
        return None
    return " or --".join(o for o in sorted(owned) if o.startswith(name)) or None


@dataclass(frozen=True)
class Requests:
    """A job's requests beyond its layout, each None (or empty) where not asked for."""

    mem: str | None = None  # --mem: memory per node
    mem_per_gpu: str | None = None  # --mem-per-gpu
    mem_per_cpu: str | None = None  # --mem-per-cpu
    qos: str | None = None  # --qos
    reservation: str | None = None  # --reservation
    constraint: str | None = None  # --constraint: node features, Slurm's expression (a&b, a|b)
    sbatch_options: tuple[str, ...] = ()  # --name[=value], passed through as directives

    @property
    def memory(self) -> tuple[str, str] | None:
        """The memory request as (Slurm option, size); None without one (the first, when a
        check let several through: :func:`problems` refuses that)."""
        for name in ("mem", "mem_per_gpu", "mem_per_cpu"):
            if (size := getattr(self, name)) is not None:
                return name.replace("_", "-"), size
        return None

    def over(self, base: Requests) -> Requests:
        """These requests, with ``base``'s where these ask for nothing: memory as one request
        (a stage's --mem-per-gpu replaces a project's mem), an option passed through by both
        as this one's."""
        memory = self if self.memory else base
        mine = {_option_name(o) for o in self.sbatch_options}
        return Requests(
            mem=memory.mem,
            mem_per_gpu=memory.mem_per_gpu,
            mem_per_cpu=memory.mem_per_cpu,
            qos=self.qos or base.qos,
            reservation=self.reservation or base.reservation,
            constraint=self.constraint or base.constraint,
            sbatch_options=(*(o for o in base.sbatch_options if _option_name(o) not in mine), *self.sbatch_options),
        )

    def shown(self) -> str:
        """One cell of ``render``'s table: ``mem=64G qos=high --licenses=scratch:1``; ``-`` for none."""
        words = [f"{f.name.replace('_', '-')}={v}" for f in fields(self) if f.name != "sbatch_options" and (v := getattr(self, f.name))]
        return " ".join([*words, *self.sbatch_options]) or "-"


def problems(r: Requests, spelled: Callable[[str], str]) -> list[str]:
    """Every way ``r`` is not Slurm's grammar; ``spelled(field)`` names a field as the user wrote it."""
    found = []
    given = [name for name in ("mem", "mem_per_gpu", "mem_per_cpu") if getattr(r, name) is not None]
    if len(given) > 1:
        found.append(
            f"{' and '.join(map(spelled, given))} exclude each other (as in Slurm): "
            "give the memory per node, per GPU or per CPU, one of them"
        )
    for name in given:
        size = getattr(r, name)
        if not MEMORY.fullmatch(size):
            found.append(f"{spelled(name)} {size!r}: expected a Slurm memory size, a whole number with K, M, G or T (such as 64G or 500M)")
    for name, pattern, allowed in (
        ("qos", NAME, "._@%:/+,-"),
        ("reservation", NAME, "._@%:/+,-"),
        ("constraint", CONSTRAINT, "._:+,-&|[]*"),
    ):
        value = getattr(r, name)
        if value is not None and not pattern.fullmatch(value):
            found.append(f"{spelled(name)} {value!r}: allowed are letters, digits and {allowed}")
    if why := option_problem(r.sbatch_options, spelled("sbatch_options")):
        found.append(why)
    return found


def option_problem(options: Iterable[str], where: str) -> str | None:
    """One message for every option of ``options`` that is malformed or sets what the
    orchestrator sets itself (with the option of `orchestrator run` that does it, where one does)."""
    malformed, refused = [], []
    for option in options:
        short = re.match(r"-([A-Za-z])", option)
        if short and not option.startswith("--"):
            if (long := SHORT_OPTIONS.get(short.group(1))) is not None:
                refused.append((option, long))
            else:
                malformed.append(option)
            continue
        match = OPTION.fullmatch(option)
        if match is None:
            malformed.append(option)
        elif (owner := planned(match.group(1), PLANNED_OPTIONS | LAYOUT_OPTIONS, ())) is not None:
            refused.append((option, owner))
    parts = []
    if malformed:
        parts.append(
            f"{', '.join(map(repr, malformed))}: write each as --name or --name=value (an sbatch option's long form; "
            "letters, digits and ._@%:/+,- in the value)"
        )
    if refused:
        it = "it" if len(refused) == 1 else "them"
        shown = [_refused(o, owner) for o, owner in refused]
        parts.append(
            f"{', '.join(shown)}: the orchestrator sets {'this' if len(refused) == 1 else 'these'} itself (the job's layout, "
            f"partition, account, time, log, array and dependencies); leave {it} out, or give {it} with `orchestrator run`'s own option"
        )
    return f"{where}: {'; '.join(parts)}" if parts else None


def _refused(option: str, owner: str) -> str:
    """``'--time=1:00' (use --time)``, ``'--acc=x' (is --account: use --account)``, ``'--array=1-3'``."""
    said = [] if _option_name(option) == owner else [f"is --{owner}"]
    if (own := RUN_SPELLING.get(owner.split(" or --")[0])) is not None:
        said.append(f"use {own}")
    return f"{option!r} ({': '.join(said)})" if said else repr(option)


def _option_name(option: str) -> str:
    return option.removeprefix("--").partition("=")[0]
