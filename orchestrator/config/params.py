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

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from orchestrator.config.profile import HOST_PATTERN
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
    # The cluster's login node for `--remote` (orchestrator.remote), in place of the profile's
    # login.host: an alias of your own ~/.ssh/config, or [user@]host.
    login_host: str | None = None

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

    def named_cluster(self, given: str | None) -> str | None:
        """The profile ``given`` (--cluster), else params.yaml's orchestrator.cluster; None where neither
        names one: unset, or ``auto``, which Slurm's ClusterName settles, and only on the cluster."""
        name = given or self.settings.cluster
        return None if not name or name == "auto" else name

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
    data = yamlio.load_mapping(path) if path.exists() else {}
    return from_data(data, source=str(path))


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
