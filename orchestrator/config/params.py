"""The project's params.yaml, as far as the orchestrator reads it.

Two sections belong to us:

``orchestrator``
    Settings for every item: the cluster profile this workspace runs on, the
    account, the container image, and defaults for partition and time.

``clusters``
    Per-profile changes to the params, e.g. the bigger device matrix and model
    of a GPU cluster (mappings merge key by key, anything else is replaced).
    DVC resolves dvc.yaml from params.yaml as written, before the orchestrator
    runs, so a cluster's values must be written there to run:
    ``orchestrator use NAME`` writes them (:func:`switch`), ``orchestrator exp
    run --cluster NAME`` passes them to ``dvc exp run -S``, and ``orchestrator
    render --cluster NAME`` previews the result. Whatever runs or submits jobs
    refuses a cluster whose values params.yaml does not hold (:func:`require_switched`).

    The values a switch replaces are kept under ``clusters.local`` (the default
    cluster's entry): ``orchestrator use local`` puts them back. While ``local``
    is active, params.yaml's own values are local's, and a switch away refreshes
    what is kept from them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import MISSING as dataclasses_MISSING
from dataclasses import dataclass, field, fields, replace
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator.config.profile_checks import HOST_PATTERN
from orchestrator.errors import ConfigError
from orchestrator.slurm import requests, times
from orchestrator.slurm.requests import Requests
from orchestrator.util import yamlio

PARAMS_FILE = "params.yaml"
DEFAULT_CLUSTER = "local"
ACCELERATORS = ("auto", "gpu", "cpu")


@dataclass(frozen=True)
class Settings:
    """The ``orchestrator`` section of params.yaml."""

    cluster: str | None = None
    account: str | None = None
    partition: str | None = None
    time: str | None = None
    # What the tasks run in on a profile with a container runtime: "none" (the host), a
    # containers/images.yaml entry (dvc.yaml's training stages depend on
    # containers/<image>.digest, the image's content hash: an image built from other inputs
    # makes them stale, a rebuild of the same inputs does not), or an image file of your
    # own, a path ending .sif (see image_file).
    image: str | None = None
    # Where the items' processes run: auto (on a profile's GPUs; on `local`, on this
    # machine's GPUs when every item of a stage fits on them, else all on CPU), gpu (refuse
    # to plan an item without a GPU per process) or cpu.
    accelerator: str | None = None
    # Names of environment variables a job needs and that must never be written down
    # (API tokens for loggers): each must be set where the job is submitted, and
    # reaches the tasks through the scheduler's environment, by name only.
    secrets: tuple[str, ...] = ()
    # At most this many tasks of one job array run at once (sbatch --array=...%K): a sweep
    # of hundreds of items then leaves room on the partition for others. None: no cap.
    array_parallel: int | None = None
    # Inputs a staged job reads where they are, linked into its copy on fast storage instead
    # of copied there (a corpus of many GB on a parallel file system built to serve it):
    # dependency paths, relative to the project, or folders above them. Set it per cluster
    # (clusters: NAME: orchestrator: read_in_place: [...]) where the shared storage is fast.
    read_in_place: tuple[str, ...] = ()
    # On a profile without a scheduler (local): run each item from a copy of its stage's deps
    # and outs in a temporary folder, copying its outs back, as a cluster that stages
    # (storage.workdir_root) runs it; a file the stage does not declare then fails here, not
    # after a queue wait. The folder: the profile's storage.workdir_root, else
    # /tmp/orchestrator-${USER}/stage. No effect on a Slurm profile, whose storage.workdir_root decides.
    stage_locally: bool = False
    # The cluster's login node for `--remote` (orchestrator.remote), in place of the profile's
    # login.host: an alias of your own ~/.ssh/config, or [user@]host.
    login_host: str | None = None
    # Memory per node (sbatch --mem), a Slurm size (64G, 500M). This and the six keys below are
    # what every job asks Slurm for beyond its layout, per cluster where it differs (clusters:
    # NAME: orchestrator: ...); a stage's own (`orchestrator run --mem ...`) replace them, and
    # they replace the partition's. Memory: one of mem, mem_per_gpu, mem_per_cpu, as in Slurm.
    mem: str | None = None
    mem_per_gpu: str | None = None  # memory per GPU (sbatch --mem-per-gpu), a Slurm size
    mem_per_cpu: str | None = None  # memory per CPU (sbatch --mem-per-cpu), a Slurm size
    qos: str | None = None  # the QOS of every job (sbatch --qos)
    reservation: str | None = None  # the reservation every job runs in (sbatch --reservation)
    constraint: str | None = None  # node features, Slurm's expression (sbatch --constraint: nvme, a&b, a|b)
    # sbatch options of your own, each --name or --name=value (--licenses=scratch:1); none that the
    # orchestrator sets itself (layout, memory, partition, account, QOS, time, log, array, dependency).
    sbatch_options: tuple[str, ...] = ()

    @property
    def requests(self) -> Requests:
        """The Slurm requests every job of the project makes (a stage's own replace them)."""
        return Requests(self.mem, self.mem_per_gpu, self.mem_per_cpu, self.qos, self.reservation, self.constraint, self.sbatch_options)

    @property
    def image_file(self) -> str | None:
        """The image file ``image`` names, as written; None for ``none`` or an images.yaml entry.

        A value ending in ``.sif`` is a file: absolute as written, or relative to the
        project (the folder of params.yaml and dvc.yaml; ``..`` may lead out of it, to an
        image several clones share). On a profile with a container runtime every task runs
        in it, in place of the profile's ``container.image``: a team's own SIF needs neither
        an images.yaml entry nor a profile file. It is written as it is (``$`` and ``~`` are
        refused, never expanded), so a path that differs per cluster goes in
        ``clusters.NAME.orchestrator.image``.

        Staleness is the user's choice, not a rule: a stage that lists
        ``containers/<name>.digest`` (:func:`digest_dep`; ``sha256sum klajster.sif >
        containers/klajster.digest``) among its deps goes stale when that file changes, as
        with a built image; a stage without it is planned all the same, with a note. The SIF
        itself is no good as a dependency: DVC would hash gigabytes, and a file that exists
        only on the cluster would break ``dvc status`` everywhere else.

        Whether the file exists is not checked when planning: it often lives only on the
        cluster, and ``render`` on a laptop must work. ``render --check`` looks for it where
        the profile's jobs run (:mod:`orchestrator.scripts.cluster_checks`).
        """
        image = self.image or NO_IMAGE
        return image if image.endswith(IMAGE_FILE_SUFFIX) else None


NO_IMAGE = "none"
IMAGE_FILE_SUFFIX = ".sif"
DIGEST_DIR = "containers"  # where `container build` writes an image's digest (containers.images.CONTAINERS_DIR)


def digest_dep(image_file: str) -> str:
    """The dependency that pins an image file: ``containers/<its name without .sif>.digest``."""
    return f"{DIGEST_DIR}/{PurePosixPath(image_file).name.removesuffix(IMAGE_FILE_SUFFIX)}.digest"


def image_problem(image: str) -> str | None:
    """Why ``image`` is neither ``none``, an images.yaml entry's name nor a usable .sif path; None if it is one."""
    if image.endswith(IMAGE_FILE_SUFFIX):
        if PurePosixPath(image).name == IMAGE_FILE_SUFFIX:
            return f"{image!r} has no file name before {IMAGE_FILE_SUFFIX}"
        if "$" in image or image.startswith("~"):
            return (
                f"{image!r}: params values are not expanded; write the image file's path as it is (absolute, or relative "
                "to the project), and a path that differs per cluster in clusters.NAME.orchestrator.image"
            )
        if any(ord(c) < 32 or ord(c) == 127 for c in image):
            return f"{image!r} has a control character"
        return None
    if "/" in image:
        return (
            f"{image!r} is a path, but an image file must end in {IMAGE_FILE_SUFFIX}; valid: {NO_IMAGE} (on the host), "
            f"a containers/images.yaml entry's name, or a .sif file (absolute, or relative to the project)"
        )
    return None


@dataclass(frozen=True)
class Params:
    data: Mapping[str, Any]
    settings: Settings
    overlays: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Whether clusters.local is the entry a switch away added (its line carries SWITCH_MARK),
    # which `use local` removes: with local named active, orchestrator.cluster was edited by hand.
    kept_by_switch: bool = False

    def named_cluster(self, given: str | None) -> str | None:
        """The profile ``given`` (--cluster), else params.yaml's orchestrator.cluster; None where neither
        names one: unset, or ``auto``, which Slurm's ClusterName settles, and only on the cluster."""
        name = given or self.settings.cluster
        return None if not name or name == "auto" else name

    def overlay_key(self, cluster: str) -> str | None:
        """The ``clusters`` entry for ``cluster``: its own name, else, for a profile file, the
        ``name`` it gives (a copy of lumi.yaml keeps ``name: lumi``); None where neither has one."""
        if cluster in self.overlays:
            return cluster
        if _is_file(cluster):
            from orchestrator.config import profile

            name = profile.load(cluster).profile.name
            if name in self.overlays:
                return name
        return None

    def overlay_for(self, cluster: str) -> Mapping[str, Any]:
        """The changes to make to the params to run on ``cluster``, as ``orchestrator use``
        would write them (empty where params.yaml holds its values and names it)."""
        return _changes(_top(self.data), switch(self, cluster).top)

    def for_cluster(self, cluster: str) -> Params:
        """These params as they would be with ``cluster`` active."""
        overlay = self.overlay_for(cluster)
        if not overlay:
            return self
        return from_data(merge(self.data, overlay), source=f"{PARAMS_FILE} with clusters.{cluster}")


def section_text(cluster: str, account_example: str | None = None, *, account: str | None = None, image: str | None = None) -> str:
    """The ``orchestrator`` section `orchestrator init` appends to a project's params.yaml:
    every key a new project must decide on, with what it may be (the account null unless given,
    the image ``none`` unless given)."""
    example = f", e.g. {account_example}" if account_example else ""
    return (
        "# How `orchestrator run` runs this project's stages (added by `orchestrator init`).\n"
        "orchestrator:\n"
        f"  cluster: {_yaml_scalar(cluster)}  # the profile jobs run on: local (this machine), a built-in "
        "(`orchestrator clusters`) or a profile file\n"
        f"  account: {_yaml_scalar(account) if account else 'null'}  # your Slurm account{example} (needed on a Slurm cluster)\n"
        f"  image: {_yaml_scalar(image or NO_IMAGE)}  # what the tasks run in on a cluster: {NO_IMAGE} (the host), "
        "a containers/images.yaml entry, or your own image file (a path ending .sif)\n"
    )


def _yaml_scalar(text: str) -> str:
    """``text`` as a YAML scalar: plain where it reads back as the same text, else double-quoted (JSON is YAML)."""
    if re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9._/+-]*", text) and yamlio.load_text(text, "a profile name") == text:
        return text
    return json.dumps(text)


def merge(base: Mapping[str, Any], overlay: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in overlay.items():
        if isinstance(out.get(key), Mapping) and isinstance(value, Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def load(root: Path) -> Params:
    path = root / PARAMS_FILE
    if not path.exists():
        return from_data({}, source=str(path))
    return from_text(yamlio.read_file(path), str(path))


def from_text(text: str, source: str) -> Params:
    """params.yaml's ``text`` read as DVC reads it."""
    prm = from_data(yamlio.mapping_of(yamlio.load_text(text, source), source), source)
    return replace(prm, kept_by_switch=kept_by_switch(text)) if SWITCH_MARK in text else prm


# The comment on each line a switch adds (orchestrator.config.switching): the way back removes them.
SWITCH_MARK = "# added by orchestrator use; use local removes it"


def kept_by_switch(text: str) -> bool:
    """Whether the ``clusters.local`` entry of params.yaml's ``text`` is one a switch added."""
    return any(line.lstrip(" ").startswith(f"{HOME}:") and line.rstrip().endswith(SWITCH_MARK) for line in text.splitlines())


def from_data(data: Mapping[str, Any], source: str) -> Params:
    section = _mapping(data, "orchestrator", source, "settings for every item, e.g. orchestrator: {cluster: lumi, account: project_123}")
    settings = yamlio.structure(section, Settings, f"{source}: section 'orchestrator'")
    if settings.time is not None and (why := times.problem(settings.time)):
        raise ConfigError(f"{source}: orchestrator.time: {why}")
    if settings.image is not None and (why := image_problem(settings.image)):
        raise ConfigError(f"{source}: orchestrator.image: {why}")
    if settings.accelerator is not None and settings.accelerator not in ACCELERATORS:
        raise ConfigError(f"{source}: orchestrator.accelerator is {settings.accelerator!r}; valid: {', '.join(ACCELERATORS)}")
    if settings.array_parallel is not None and settings.array_parallel < 1:
        raise ConfigError(
            f"{source}: orchestrator.array_parallel is {settings.array_parallel!r}; "
            "give the most tasks of one job array to run at once, a whole number of at least 1 (or leave it out: no cap)"
        )
    if settings.login_host is not None and not HOST_PATTERN.fullmatch(settings.login_host):
        raise ConfigError(
            f"{source}: orchestrator.login_host is {settings.login_host!r}; give the login node as ssh takes it: "
            "[user@]host, or an alias of your ~/.ssh/config (no options, no spaces)"
        )
    if found := requests.problems(settings.requests, lambda name: f"orchestrator.{name}"):
        raise ConfigError(f"{source}: section 'orchestrator': Slurm requests that cannot be submitted", found)
    for path in settings.read_in_place:
        parts = Path(path).parts
        if not path or Path(path).is_absolute() or ".." in parts:
            raise ConfigError(
                f"{source}: orchestrator.read_in_place: {path!r} is not a path inside the project; "
                "give dependency paths relative to it, e.g. read_in_place: [data/lm/tokens]"
            )
    overlays = _mapping(data, "clusters", source, "profile names mapped to params changes, e.g. clusters: {lumi: {...}}")
    for name, overlay in overlays.items():
        if not isinstance(overlay, Mapping):
            raise ConfigError(
                f"{source}: clusters.{name} is {_shape(overlay)}; expected the params changes for profile {name}, e.g. clusters: "
                f"{{{name}: {{orchestrator: {{...}}}}}}"
            )
        _mapping(overlay, "orchestrator", f"{source}: clusters.{name}", "the settings that change on this profile")
    return Params(data=data, settings=settings, overlays=overlays)


def _mapping(data: Mapping[str, Any], key: str, source: str, expected: str) -> Mapping[str, Any]:
    """``data[key]`` when it is a mapping, {} when absent; else one error naming the key and the shape expected.

    An empty ``key:`` (YAML null) is refused too: it most often means the settings under
    it were indented wrongly or commented out, and silently ignoring them would run
    with defaults the user did not choose."""
    if key not in data:
        return {}
    value = data[key]
    if not isinstance(value, Mapping):
        raise ConfigError(f"{source}: '{key}' is {_shape(value)}; expected a mapping: {expected} (or leave '{key}' out)")
    return value


def _shape(value: Any) -> str:
    if value is None:
        return "empty (null)"
    kind = {list: "a list", str: "text", bool: "a boolean", int: "a number", float: "a number"}.get(type(value), type(value).__name__)
    shown = repr(value)
    return f"{kind} {shown if len(shown) <= 40 else shown[:40] + '...'}"


# Switching the project to a cluster: its values written where DVC reads them.

HOME = DEFAULT_CLUSTER  # the entry that keeps the values a switch replaces
Key = tuple[str, ...]


@dataclass(frozen=True)
class Switch:
    """params.yaml with ``cluster`` active: ``top``, its values outside ``clusters``, and
    ``kept``, ``clusters.local`` as it must then be (None: as it is)."""

    cluster: str
    key: str | None  # the clusters entry applied, if any
    top: dict[str, Any]
    kept: dict[str, Any] | None

    def changes(self, prm: Params) -> list[tuple[Key, Any]]:
        """(path, new value) of each value of ``prm``'s own that the switch changes."""
        return list(_leaves(_changes(_top(prm.data), self.top)))


def switch(prm: Params, cluster: str) -> Switch:
    """params.yaml with ``cluster``'s values: back to the kept values (unless ``local`` is
    active: then its values are the ones to keep), then ``clusters.<cluster>`` merged on top.
    Refuses, with every problem at once, an entry naming no known cluster, a value of
    another type than the one it replaces, and one that could not be put back."""
    if not prm.overlays:
        top = _top(prm.data)
        if (top.get("orchestrator") or {}).get("cluster") == cluster:
            return Switch(cluster, None, top, None)
    _check_names(prm, cluster)
    key = prm.overlay_key(cluster)
    overlay = _plain(prm.overlays.get(key, {})) if key else {}
    overlay.get("orchestrator", {}).pop("cluster", None)  # the switch names the cluster itself
    kept_now = _plain(prm.overlays.get(HOME, {}))
    active = prm.settings.cluster if prm.settings.cluster not in (None, "auto") else HOME
    top = _top(prm.data)
    problems: list[str] = []
    if active == HOME:
        kept = _keep(top, [*(k for k, _ in _leaves(kept_now)), *(k for k, _ in _leaves(overlay))], {}, problems)
        if key == HOME:  # staying: params.yaml's values are local's, edits included
            overlay = _plain(kept)
    else:
        top = merge(top, kept_now)
        kept = _keep(top, [k for k, _ in _leaves(overlay)], kept_now, problems)
    problems += _type_problems(top, overlay, key)
    if problems:
        raise ConfigError(f"cannot switch {PARAMS_FILE} to {cluster}: clusters.{key or HOME} does not fit it", problems)
    top = merge(top, overlay)
    top["orchestrator"] = {**(top.get("orchestrator") or {}), "cluster": cluster}
    if (source := f"{PARAMS_FILE} with clusters.{key}" if key else None) is not None:
        from_data(top, source)  # the settings as they would be, checked as params.yaml's are
    return Switch(cluster, key, top, kept if kept != kept_now else None)


def require_switched(prm: Params, cluster: str, doing: str) -> None:
    """Refuse to run or submit on ``cluster`` unless params.yaml, as DVC resolved it, holds
    its values: else DVC's matrix is another cluster's (one message, naming the switch)."""
    active = prm.settings.cluster if prm.settings.cluster not in (None, "auto") else HOME
    if prm.kept_by_switch and (active == HOME or prm.overlay_key(active) == HOME):
        raise hand_edit_error(prm)
    wanted = switch(prm, cluster)
    differ = [(k, v) for k, v in wanted.changes(prm) if k != ("orchestrator", "cluster")]
    if not differ:
        return
    if active == cluster and HOME in prm.overlays:  # switched to it (values kept): one side was edited since
        require_agreement(prm, cluster, doing)
    here = _top(prm.data)
    shown = [f"{'.'.join(k)}: {_short(_get(here, k))} here, {_short(v)} on {cluster}" for k, v in differ]
    raise ConfigError(
        f"{PARAMS_FILE} holds other values than {cluster}'s (clusters.{wanted.key or HOME}): DVC resolved the pipeline "
        f"from them, so nothing was {doing}",
        shown,
        hints=[
            f"switch with `orchestrator use {_shell(cluster)}` (it writes {cluster}'s values into {PARAMS_FILE}; "
            f"`orchestrator render --cluster {_shell(cluster)}` previews them), or for one experiment "
            f"`orchestrator exp run --cluster {_shell(cluster)}` (dvc exp run with those values)"
        ],
    )


def require_agreement(prm: Params, active: str, doing: str) -> None:
    """While ``active`` is switched to, each value its entry sets must be the one params.yaml
    holds: one that differs was edited in one place or the other, and which one is meant cannot
    be known. Refused, naming each, rather than one of them dropped."""
    key = prm.overlay_key(active)
    top = _top(prm.data)
    overlay = _plain(prm.overlays.get(key, {})) if key else {}
    differ = [
        f"{'.'.join(k)}: {_short(_get(top, k))} here, {_short(v)} in clusters.{key}"
        for k, v in _leaves(overlay)
        if k != ("orchestrator", "cluster") and not (_has(top, k) and same(_get(top, k), v))
    ]
    if differ:
        raise ConfigError(
            f"{PARAMS_FILE}: {active} is active, but some of its values here differ from clusters.{key}: one or the other was "
            f"edited, so nothing was {doing} (either could be the one meant)",
            differ,
            hints=[
                f"write the value {active} should run with in both places (params.yaml's is what DVC runs, clusters.{key}'s "
                "what a switch writes), then switch again"
            ],
        )


def same(a: Any, b: Any) -> bool:
    """Equal and of one type, all the way down (1, 1.0 and true differ to DVC)."""
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def hand_edit_error(prm: Params) -> ConfigError:
    """params.yaml names ``local`` but holds another cluster's values, kept ones under clusters.local."""
    top = _top(prm.data)
    likely = [
        name
        for name, overlay in prm.overlays.items()
        if name != HOME and all(_has(top, k) and _get(top, k) == v for k, v in _leaves(_plain(overlay)) if k != ("orchestrator", "cluster"))
    ]
    back = f"set orchestrator.cluster back to {likely[0]} (its values are the ones here)" if likely else "set orchestrator.cluster back"
    return ConfigError(
        f"{PARAMS_FILE} names {HOME} as its cluster, but clusters.{HOME} holds the values `orchestrator use` keeps while "
        f"another cluster is active (`orchestrator use {HOME}` removes them as it puts them back): orchestrator.cluster was "
        "changed by hand, and the values here are another cluster's",
        hints=[f"{back}, then run `orchestrator use {HOME}`"],
    )


def dvc_sets(prm: Params, cluster: str) -> list[str]:
    """``dvc exp run -S`` overrides (Hydra's syntax) that give an experiment ``cluster``'s values,
    each written so that DVC writes back exactly that value; ConfigError, naming each, for the
    values and keys Hydra's grammar cannot carry."""
    here = _top(prm.data)
    sets, problems = [], []
    # DVC applies -S through OmegaConf, which resolves every ${...} of the whole file as it
    # writes it back: an ${oc.env:TOKEN} anywhere in params.yaml would land, expanded, in the
    # experiment's params.yaml and its commit. Escaped in what is sent, not in the user's file.
    for key, value in _leaves(_plain(prm.data)):
        for text in _texts(value):
            if "${" in text:
                problems.append(
                    f"{'.'.join(map(str, key))}: {_short(text)} holds ${{...}}, which DVC's -S resolves (OmegaConf) "
                    "and writes back expanded"
                )
                break
    for key, value in switch(prm, cluster).changes(prm):
        try:
            sets.append(f"{'' if _has(here, key) else '+'}{_hydra_key(key)}={_hydra(value)}")
        except ValueError as exc:
            problems.append(f"{'.'.join(map(str, key))}: {exc}")
    if problems:
        raise NotSendable(
            f"cannot pass {cluster}'s values to `dvc exp run -S`: nothing was run",
            problems,
            hints=[f"switch the workspace instead: `orchestrator use {_shell(cluster)}`, then `dvc exp run`"],
        )
    return sets


class NotSendable(ConfigError):
    """Values ``dvc exp run -S`` cannot carry as they are (:func:`dvc_sets`)."""


def _texts(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for v in value.values():
            yield from _texts(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _texts(v)


# A key Hydra's override grammar addresses: dotted paths of these words (no dot, space or
# punctuation inside a key).
_HYDRA_KEY = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_\-]*")


def _hydra_key(key: Key) -> str:
    for part in key:
        if not isinstance(part, str) or not _HYDRA_KEY.fullmatch(part):
            raise ValueError(f"the key {part!r} cannot be named in a -S override (letters, digits, '_' and '-' only)")
    return ".".join(key)


def _check_names(prm: Params, cluster: str) -> None:
    """Each ``clusters`` entry must name a cluster: a built-in, ``local``, a profile file, or
    the ``name`` of the profile file switched to or active."""
    from orchestrator.config import profile

    known = {*profile.builtin_names(), DEFAULT_CLUSTER}
    for given in (cluster, prm.settings.cluster):
        if given and _is_file(given) and Path(given).is_file():
            known |= {given, profile.load(given).profile.name}
    unknown = [name for name in prm.overlays if name not in known and not (_is_file(name) and Path(name).is_file())]
    if unknown:
        raise ConfigError(
            f"{PARAMS_FILE}: clusters has an entry for no known cluster: {', '.join(map(str, unknown))}",
            hints=[
                f"valid: a built-in ({', '.join(sorted(known))}), or a profile file (its path, or the name it gives "
                "when it is the cluster used)"
            ],
        )


def _keep(top: Mapping[str, Any], keys: list[Key], kept: Mapping[str, Any], problems: list[str]) -> dict[str, Any]:
    """``kept`` with ``top``'s value at each of ``keys`` it lacks (an orchestrator setting
    absent from ``top`` is kept as its default)."""
    out = _plain(kept)
    defaults = {f.name: f.default if f.default is not dataclasses_MISSING else None for f in fields(Settings)}
    for key in keys:
        if _has(out, key) or key == ("orchestrator", "cluster"):
            continue
        if _has(top, key):
            _put(out, key, _get(top, key))
        elif len(key) == 2 and key[0] == "orchestrator" and key[1] in defaults:
            default = defaults[key[1]]
            _put(out, key, list(default) if isinstance(default, tuple) else default)
        else:
            problems.append(
                f"{'.'.join(key)} is set per cluster but not in {PARAMS_FILE} itself: add it there with the value for "
                f"{HOME}, so that `orchestrator use {HOME}` can put it back"
            )
    return out


def _type_problems(top: Mapping[str, Any], overlay: Mapping[str, Any], key: str | None) -> list[str]:
    found = []
    for path, value in _leaves(overlay):
        if not _has(top, path):
            continue
        base = _get(top, path)
        if value is not None and base is not None and _kind(value) != _kind(base):
            found.append(
                f"clusters.{key}.{'.'.join(path)} is {_shape(value)}, but {'.'.join(path)} is {_shape(base)}: "
                f"give {_kind(base)} (or fix the one in {PARAMS_FILE})"
            )
    return found


def _kind(value: Any) -> str:
    if isinstance(value, Mapping):
        return "a mapping"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "text" if isinstance(value, str) else type(value).__name__


def _is_file(cluster: str) -> bool:
    """Whether ``--cluster`` names a profile file (a path) rather than a built-in."""
    return "/" in cluster or cluster.endswith((".yaml", ".yml"))


def _top(data: Mapping[str, Any]) -> dict[str, Any]:
    return {k: _plain(v) for k, v in data.items() if k != "clusters"}


def _plain(value: Any) -> Any:
    """A copy that shares nothing (YAML aliases become values of their own)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _leaves(data: Mapping[str, Any], prefix: Key = ()) -> Iterator[tuple[Key, Any]]:
    """(path, value) of each value :func:`merge` replaces: mappings are merged key by key."""
    for k, v in data.items():
        if isinstance(v, Mapping) and v:
            yield from _leaves(v, (*prefix, k))
        else:
            yield (*prefix, k), v


def _changes(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """What to :func:`merge` into ``old`` to make it ``new`` (which has every key of ``old``)."""
    out: dict[str, Any] = {}
    for k, v in new.items():
        if k in old and isinstance(old[k], Mapping) and isinstance(v, Mapping):
            if sub := _changes(old[k], v):
                out[k] = sub
        elif k not in old or old[k] != v or type(old[k]) is not type(v):
            out[k] = v
    return out


def _has(data: Any, key: Key) -> bool:
    for part in key:
        if not isinstance(data, Mapping) or part not in data:
            return False
        data = data[part]
    return True


def _get(data: Any, key: Key) -> Any:
    for part in key:
        data = data[part] if isinstance(data, Mapping) and part in data else None
    return data


def _put(data: dict[str, Any], key: Key, value: Any) -> None:
    for part in key[:-1]:
        data = data.setdefault(part, {})
    data[key[-1]] = _plain(value)


def _short(value: Any) -> str:
    shown = json.dumps(value, default=str)
    return shown if len(shown) <= 60 else shown[:57] + "..."


def _shell(text: str) -> str:
    import shlex

    return shlex.quote(text)


def _hydra(value: Any) -> str:
    """``value`` in Hydra's override grammar, which ``dvc exp run -S`` parses: what DVC then
    writes into params.yaml reads back as ``value`` (ValueError for what the grammar cannot carry)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} cannot be sent as a number")
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{_hydra_key((k,))}:{_hydra(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_hydra(v) for v in value) + "]"
    if not isinstance(value, str):
        raise ValueError(f"a {type(value).__name__} value cannot be sent")
    if re.fullmatch(r"[A-Za-z_][\w.\-/]*", value) and value.lower() not in ("true", "false", "null", "nan", "inf"):
        return value  # Hydra reads it back as this text
    return _hydra_quoted(value)


def _hydra_quoted(text: str) -> str:
    """``text`` (no ``${``: :func:`dvc_sets` refuses it) as a double-quoted Hydra string. Hydra
    keeps a backslash as it is except in a run of them before a quote or the closing quote,
    where each is written twice; ``"`` is escaped."""
    if any(ord(c) < 32 or c == "\x7f" for c in text):
        raise ValueError(f"{_short(text)} has a line break or a control character, which -S cannot carry")
    out: list[str] = []
    i = 0
    while i < len(text):
        j = i
        while j < len(text) and text[j] == "\\":
            j += 1
        if j > i:
            special = j == len(text) or text[j] == '"'
            out.append("\\" * ((j - i) * (2 if special else 1)))
            i = j
        elif text[i] == '"':
            out.append('\\"')
            i += 1
        else:
            out.append(text[i])
            i += 1
    return '"' + "".join(out) + '"'
