"""The images a project builds: ``containers/images.yaml``, read and validated.

Each image there names a Jinja definition template in ``containers/`` and the values
it is rendered with; :func:`select` picks one, applies ``--set KEY=VALUE`` overrides
and the defaults, and reports every problem at once with the valid keys. The errors
of the whole container subsystem live here too, since every other module of it
builds on this one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.errors import OrchestratorError

CONTAINERS_DIR = "containers"
IMAGES_FILE = f"{CONTAINERS_DIR}/images.yaml"
DEFAULT_IMAGE = "ci"
# The project's own code is not in an image by default: jobs import it from their workspace
# (plan.py binds it and puts the run dir first on PYTHONPATH), so a code change needs no rebuild.
DEFAULT_SOURCE: tuple[str, ...] = ()

# The keys of an image in images.yaml, with what they mean (listed in errors).
KEYS = {
    "definition": "the template file in containers/ (required)",
    "description": "one line",
    "source": "project paths copied in and pip-installed (opt-in: jobs import the code from their workspace)",
    "base": "localimage: the base image file",
    "from": "docker: the registry image",
    "activate": "none | with-conda",
    "mirror": "debootstrap: the Debian mirror URL",
    "python": "the image's Python, e.g. 3.11 (the torch wheel's tag)",
    "wheels": "folder with the torch wheel",
    "ca_bundle": "CA bundle for pip during the build, or none",
}
DEFAULTS = {"activate": "none", "mirror": "http://deb.debian.org/debian", "python": "3.11"}

# What `orchestrator init` writes where a project has no images.yaml: no image, and how to add one.
# Two examples, as comments: uncommented (the `#   ` in front of an entry's lines removed), each
# is a valid entry, and the repository's own `ci` image is the second one (the same definition and
# values, so the same content hash for the same train extra).
SKELETON = f"""\
# The images `orchestrator container build NAME` builds, each a Jinja definition
# template in this folder and the values it is rendered with (keys: definition,
# {", ".join(k for k in KEYS if k != "definition")}).
# Not needed to run in an image you already have: set params.yaml's
# orchestrator.image to its file (a path ending .sif) instead.
# The templates named below come with the orchestrator, in its package; a file of
# that name in this folder is used instead.
#
# For example, LUMI's PyTorch image plus this project's train extra:
#
#   lumi:
#     definition: localimage.def.j2
#     base: /appl/local/containers/sif-images/lumi-pytorch-rocm-6.2.1-python-3.12-pytorch-20240918-vllm-4075b35.sif
#     activate: with-conda
#
# Or a CPU image, to try the pipeline in an image on a workstation or in CI (not a GPU
# image: torch's CPU build). It needs no registry and no site image: Debian bookworm
# from a Debian mirror (debootstrap), Debian's Python 3.11 in a venv, and the `train`
# extra of this project's pyproject.toml ([project.optional-dependencies]), which must
# bring torch, pytorch-lightning and dvclive (the image's own test imports them).
# torch pinned as torch==VERSION is installed from a wheel of that version for Python
# 3.11 and this machine, found in `wheels:` (a folder), else in pip's find-links
# folders or /opt/wheels (it is copied in); without one, from PyTorch's CPU index.
# The rest comes from PyPI: the build must reach it, and the mirror (`mirror:`, e.g. a
# local one). It builds where `apptainer build --fakeroot` and debootstrap work, in
# minutes: `orchestrator container build ci` writes .orchestrator/images/ci.sif.
# To use it, remove the `#   ` in front of its four lines:
#
#   ci:
#     definition: ci.def.j2
#     description: Debian bookworm, Python 3.11, CPU torch; for a workstation or CI
#     mirror: {DEFAULTS["mirror"]}
#
# Add entries below these lines (the file holds only comments until then, which reads as no images).
"""

SAFE_PATH = re.compile(r"[A-Za-z0-9._/+@%:,=~-]+")  # a %files path or header value: no quotes, $, globs, spaces
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
_URL = re.compile(r"https?://[A-Za-z0-9._~:/@%+-]+")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# An image's name is part of file names (.orchestrator/images/NAME.sif, containers/NAME.digest,
# its job's script and log): a name, never a path, and short enough for all of them.
MAX_NAME = 100
# Where a definition template is found when the project's containers/ has none: the installed
# package's copy (a wheel carries containers/*.def.j2 there, see pyproject.toml), else the
# orchestrator's own repository (a source checkout). So a project of its own can name the
# shipped templates in its images.yaml without copying them; its own file of the name wins.
PACKAGE_DIR = Path(__file__).resolve().parent.parent
SHIPPED_DIRS = (PACKAGE_DIR / "_containers", PACKAGE_DIR.parent / CONTAINERS_DIR)
NAME_RULE = f"an image name is letters, digits, '.', '_' and '-', starting with a letter or digit, at most {MAX_NAME} characters"


# --- errors -----------------------------------------------------------------------------------


class ContainerError(OrchestratorError):
    """An image cannot be built: no runtime, a bad images.yaml, a missing input."""


class BuildError(ContainerError):
    """The container runtime failed to build the image."""

    exit_code = 1


# --- images.yaml: which image, with which values ------------------------------------------


@dataclass(frozen=True)
class Image:
    name: str
    template: Path  # containers/<definition>
    values: Mapping[str, str]  # validated, defaults applied
    source: tuple[str, ...]  # project-relative paths


def names(project: Path) -> list[str]:
    return sorted(_images_file(project))


def select(project: Path, name: str | None, overrides: Sequence[str] = ()) -> Image:
    """The image NAME of images.yaml with ``--set KEY=VALUE`` overrides, validated
    (every problem reported at once, with the valid keys)."""
    images = _images_file(project)
    name = name or DEFAULT_IMAGE
    if name not in images:
        raise ContainerError(f"no image {name!r} in {project / IMAGES_FILE}", hints=[f"images: {', '.join(sorted(images)) or 'none'}"])
    raw = images[name]
    problems: list[str] = []
    if not isinstance(raw, Mapping):
        raise ContainerError(f"{IMAGES_FILE}: image {name!r} must be a mapping of settings")
    merged = dict(raw)
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            problems.append(f"--set {item!r}: expected KEY=VALUE")
        else:
            merged[key.strip()] = value
    for key in merged:
        if key not in KEYS:
            problems.append(f"unknown key {key!r}")
    values = {**DEFAULTS, **{k: v for k, v in merged.items() if k in KEYS and k != "source"}}
    for key, value in values.items():
        if not isinstance(value, str):
            problems.append(f"{key}: expected text, found {type(value).__name__}")
    source = merged.get("source", list(DEFAULT_SOURCE))
    if isinstance(source, str):
        source = source.split()
    if not isinstance(source, list) or not all(isinstance(s, str) for s in source):
        problems.append("source: expected a list of project paths")
        source = []
    problems += _check_values(project, values, source)
    if problems:
        raise ContainerError(
            f"{IMAGES_FILE}: image {name!r} is invalid", problems, hints=["valid keys: " + "; ".join(f"{k} ({v})" for k, v in KEYS.items())]
        )
    return Image(
        name, template_path(project, values["definition"]) or project / CONTAINERS_DIR / values["definition"], values, tuple(source)
    )


def template_path(project: Path, definition: str) -> Path | None:
    """The definition template ``definition`` names: the project's containers/ first, then the
    orchestrator's own (:data:`SHIPPED_DIRS`); None where neither has it."""
    for folder in (project / CONTAINERS_DIR, *SHIPPED_DIRS):
        if (folder / definition).is_file():
            return folder / definition
    return None


def _images_file(project: Path) -> Mapping[str, object]:
    from orchestrator.util import yamlio

    path = project / IMAGES_FILE
    if not path.is_file():
        raise ContainerError(f"{path}: no such file (the images this project builds)")
    images = yamlio.load_mapping(path)
    bad = [key for key in images if not is_name(key)]
    if bad:
        valid = sorted(key for key in images if is_name(key))
        raise ContainerError(
            f"{path}: invalid image names",
            [f"{key!r} is not a name" for key in bad],
            hints=[NAME_RULE, f"valid images: {', '.join(valid) or 'none'}"],
        )
    return images


def is_name(name: object) -> bool:
    """Whether ``name`` can name an image (see NAME_RULE): no path, no option, no empty name."""
    return isinstance(name, str) and len(name) <= MAX_NAME and _NAME.fullmatch(name) is not None


def _check_values(project: Path, values: Mapping[str, object], source: Sequence[str]) -> list[str]:
    problems = []
    definition = values.get("definition")
    if not definition:
        problems.append("definition: required (a template file in containers/)")
    elif isinstance(definition, str) and (not _NAME.fullmatch(definition) or template_path(project, definition) is None):
        shipped = sorted({p.name for d in SHIPPED_DIRS if d.is_dir() for p in d.glob("*.def.j2")})
        problems.append(
            f"definition: no template {definition!r} in {project / CONTAINERS_DIR} nor among the orchestrator's own "
            f"({', '.join(shipped) or 'none found'})"
        )
    checks = {
        "base": lambda v: SAFE_PATH.fullmatch(v) is not None,
        "from": lambda v: _REF.fullmatch(v) is not None,
        "activate": lambda v: v in ("none", "with-conda"),
        "mirror": lambda v: _URL.fullmatch(v) is not None,
        "python": lambda v: re.fullmatch(r"3\.\d+", v) is not None,
        "description": lambda v: "\n" not in v,
    }
    for key, ok in checks.items():
        value = values.get(key)
        if isinstance(value, str) and not ok(value):
            problems.append(f"{key}: invalid value {value!r}")
    for path in source:
        parts = Path(path).parts
        if not path or Path(path).is_absolute() or ".." in parts:
            problems.append(f"source: {path!r} must be a path inside the project")
    return problems
