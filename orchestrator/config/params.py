"""The project's params.yaml, as far as the orchestrator reads it.

Two sections belong to us:

``orchestrator``
    Settings for every item: the cluster profile this workspace runs on, the
    account, the container image, and defaults for partition and time.

``clusters``
    Per-profile changes to the params, e.g. the bigger device matrix and model
    of a GPU cluster. params.yaml as written is what ``dvc repro`` runs here;
    ``orchestrator render --cluster NAME`` for another profile resolves the
    pipeline with ``clusters.NAME`` merged on top (mappings merge key by key,
    anything else is replaced), i.e. as it would run once params.yaml says
    ``orchestrator.cluster: NAME`` with those values.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.slurm import times
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
    # The containers/images.yaml entry the jobs run in ("none": on the host). dvc.yaml's
    # training stages depend on containers/<image>.digest, so a new image makes them stale.
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


@dataclass(frozen=True)
class Params:
    data: Mapping[str, Any]
    settings: Settings
    overlays: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def overlay_for(self, cluster: str) -> Mapping[str, Any]:
        """The changes to make to the params to run on ``cluster`` (empty if it is active)."""
        if cluster == (self.settings.cluster or DEFAULT_CLUSTER):
            return {}
        overlay = dict(self.overlays.get(cluster, {}))
        orchestrator = dict(overlay.get("orchestrator", {}))
        orchestrator["cluster"] = cluster
        overlay["orchestrator"] = orchestrator
        return overlay

    def for_cluster(self, cluster: str) -> Params:
        """These params as they would be with ``cluster`` active."""
        overlay = self.overlay_for(cluster)
        if not overlay:
            return self
        return from_data(merge(self.data, overlay), source=f"{PARAMS_FILE} with clusters.{cluster}")


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
    data = yamlio.load_mapping(path) if path.exists() else {}
    return from_data(data, source=str(path))


def from_data(data: Mapping[str, Any], source: str) -> Params:
    section = _mapping(data, "orchestrator", source, "settings for every item, e.g. orchestrator: {cluster: lumi, account: project_123}")
    settings = yamlio.structure(section, Settings, f"{source}: section 'orchestrator'")
    if settings.time is not None and (why := times.problem(settings.time)):
        raise ConfigError(f"{source}: orchestrator.time: {why}")
    if settings.accelerator is not None and settings.accelerator not in ACCELERATORS:
        raise ConfigError(f"{source}: orchestrator.accelerator is {settings.accelerator!r}; valid: {', '.join(ACCELERATORS)}")
    if settings.array_parallel is not None and settings.array_parallel < 1:
        raise ConfigError(
            f"{source}: orchestrator.array_parallel is {settings.array_parallel!r}; "
            "give the most tasks of one job array to run at once, a whole number of at least 1 (or leave it out: no cap)"
        )
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
