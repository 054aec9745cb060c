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
from orchestrator.util import yamlio

PARAMS_FILE = "params.yaml"
DEFAULT_CLUSTER = "local"


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
    # Names of environment variables a job needs and that must never be written down
    # (API tokens for loggers): each must be set where the job is submitted, and
    # reaches the tasks through the scheduler's environment, by name only.
    secrets: tuple[str, ...] = ()


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
    settings = yamlio.structure(data.get("orchestrator") or {}, Settings, f"{source}: section 'orchestrator'")
    overlays = data.get("clusters") or {}
    if not isinstance(overlays, Mapping) or not all(isinstance(v, Mapping) for v in overlays.values()):
        raise ConfigError(f"{source}: 'clusters' maps profile names to params changes, e.g. clusters: {{lumi: {{...}}}}")
    return Params(data=data, settings=settings, overlays=overlays)
