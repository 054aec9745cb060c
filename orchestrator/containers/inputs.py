"""What goes into an image, and its content hash: the image's identity.

:func:`prepare` gathers everything an image is made of: the files the build copies
in (the torch wheel; the project's own paths only for an image that asks for them
with images.yaml's ``source``) or builds from (a localimage's base), the template
values, and the definition rendered for the identity. The *content hash* is the
hash of that definition and of every input's contents, in sorted order, written
``content-sha256:<hex>``. An image is rebuilt only when it changes, and it is what
``containers/<name>.digest`` holds for DVC: the same inputs give the same digest
file on any machine, before and after a revert, however often the image is rebuilt
(the SIF itself differs every time: it carries its build time and a random id; its
own sha256 is in the stamp, for push and provenance).

What the identity leaves out, because it is not in the image or differs per machine:
the staging folder, the build's git commit and the hash itself (labels), the build
machine's CA bundle (given to pip during the build and removed at the end of %post),
and a base image's path (its content is in, by sha256, under the name ``base``).

What it does NOT capture: whatever the build resolves when it runs. debootstrap and
pip install the newest packages that satisfy the definition and the ``train`` extra,
so the same identity built a month later may hold newer Debian packages or a newer
release within ``pytorch-lightning>=2.5,<2.7``; a registry tag (``from:``) may move
(pin it by digest). Pin versions (``==``) where that matters. The runtime's version
is recorded in the stamp, not in the identity.

Files of 16 MiB and more (the torch wheel, base images of gigabytes) are hashed once
and then recognised by size, mtime and inode, as make and DVC do, so the no-op check
stays well under a second.

Reads files only; runs nothing.
"""

from __future__ import annotations

import hashlib
import os
import platform
import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.containers import definition
from orchestrator.containers.images import IMAGES_FILE, KEYS, ContainerError, Image, select
from orchestrator.util.files import sha256_file

BIG_FILE = 16 << 20  # from this size on, a file's hash is reused while size/mtime/inode match
HASH_CONTEXT = "/build-context"  # the staging folder as the content hash sees it
BLANK = "-"  # the hash and commit labels as the content hash sees them
HASH_BASE = "/base-image.sif"  # a base image's path as the content hash sees it (its content is an input)
HASH_PREFIX = "content-sha256:"  # the content hash's form; a SIF's own sha256 is written sha256:<hex>
CA_DEST = "ca.crt"  # the CA bundle in the staging folder: for pip during the build, not in the image
BASE_PREFIX = "base:"  # a base image's input: base:<its path>
README_STUB = b"orchestrator: the project installed into a container image (README.md is not copied in).\n"


@dataclass(frozen=True)
class Input:
    """One file the build copies in (dest: its path in the staging folder) or builds
    from (dest ``base:`` ...); ``data`` for generated files."""

    dest: str
    path: Path | None = None
    data: bytes | None = None
    staged: bool = True

    @property
    def identity(self) -> str | None:
        """Its name in the content hash: a base image by ``base`` (its path differs per
        machine, its content does not); None for what is not in the image (the CA bundle)."""
        if self.dest == CA_DEST:
            return None
        return "base" if self.dest.startswith(BASE_PREFIX) else self.dest


@dataclass(frozen=True)
class Prepared:
    image: Image
    inputs: tuple[Input, ...]
    variables: Mapping[str, object]  # template values except the build-specific ones
    hashed_definition: str  # rendered as the content hash sees it (build-specific values blanked, no CA bundle)


def prepare(project: Path, image: Image) -> Prepared:
    """What the image is made of; reads files, runs nothing."""
    template, used = definition.load(image.template)
    variables: dict[str, object] = {"name": image.name}
    variables.update({("from_ref" if k == "from" else k): v for k, v in image.values.items()})
    inputs: list[Input] = []
    # The project's own code reaches jobs from their workspace (bound, first on PYTHONPATH), not
    # from the image; an image copies it in only when images.yaml's `source` asks for it.
    variables["src_dir"] = "src" if image.source and "src_dir" in used else ""
    if variables["src_dir"]:
        missing = [p for p in image.source if not (project / p).exists()]
        if missing:
            raise ContainerError(f"image {image.name!r}: source paths missing in {project}: {', '.join(missing)}")
        inputs += _source_inputs(project, image.source)
    if {"requirements", "requirements_without_torch"} & used:
        reqs = train_requirements(project)
        variables["requirements"] = reqs
        variables["requirements_without_torch"] = [r for r in reqs if _req_name(r) != "torch"]
    if "torch_wheel" in used:
        wheel = find_torch_wheel(train_requirements(project), image.values.get("wheels"), image.values["python"])
        variables["torch_wheel"] = f"wheels/{wheel.name}" if wheel else ""
        if wheel:
            inputs.append(Input(f"wheels/{wheel.name}", wheel))
    if "ca_bundle" in used:
        bundle = find_ca_bundle(image.values.get("ca_bundle"))
        variables["ca_bundle"] = CA_DEST if bundle else ""
        if bundle:
            inputs.append(Input(CA_DEST, bundle))
    if "base" in used and "base" in image.values:
        base = Path(str(image.values["base"]))
        base = base if base.is_absolute() else project / base
        if not base.is_file():
            raise ContainerError(
                f"image {image.name!r}: the base image {base} does not exist",
                hints=[f"set its path in {IMAGES_FILE} (key base) or with --set base=PATH"],
            )
        inputs.append(Input(BASE_PREFIX + str(base), base, staged=False))
        variables["base"] = str(base)
    missing = sorted({"from" if m == "from_ref" else m for m in used - set(variables) - {"content_hash", "git_commit"}})
    if missing:
        raise ContainerError(
            f"image {image.name!r}: {image.template.name} uses {', '.join(missing)}, which {IMAGES_FILE} does not set",
            hints=["valid keys: " + ", ".join(KEYS)],
        )
    as_hashed = {**variables, "ca_bundle": "", **({"base": HASH_BASE} if "base" in variables else {})}
    hashed = definition.render(template, as_hashed, context=HASH_CONTEXT, content_hash=BLANK, git_commit=BLANK)
    return Prepared(image, tuple(sorted(inputs, key=lambda i: i.dest)), variables, hashed)


def current_hash(project: Path, name: str | None = None, overrides: Sequence[str] = ()) -> str:
    """The content hash image NAME would have now (every input hashed; nothing run)."""
    prepared = prepare(project, select(project, name, overrides))
    return content_hash(prepared.hashed_definition, digest_inputs(prepared.inputs)[0])


def content_hash(hashed_definition: str, digests: Mapping[str, str]) -> str:
    """``content-sha256:<hex>`` of the definition as hashed and the inputs' digests (:func:`digest_inputs`)."""
    h = hashlib.sha256(b"orchestrator-image\0")
    h.update(hashed_definition.encode())
    for name in sorted(digests):
        h.update(f"\0{name}\0{digests[name]}".encode())
    return HASH_PREFIX + h.hexdigest()


def digest_inputs(inputs: Iterable[Input], cache: Mapping[str, Sequence] | None = None) -> tuple[dict[str, str], dict[str, list]]:
    """``{identity: sha256}`` of every input that is in the image (:attr:`Input.identity`), and
    the new stat cache of the big files (``{path: [size, mtime_ns, inode, sha256]}``; an entry
    of ``cache`` is reused while the file's size, mtime and inode are unchanged)."""
    cache = cache or {}
    digests: dict[str, str] = {}
    new_cache: dict[str, list] = {}
    for inp in inputs:
        name = inp.identity
        if name is None:
            continue
        if inp.data is not None:
            digests[name] = hashlib.sha256(inp.data).hexdigest()
            continue
        assert inp.path is not None
        st = inp.path.stat()
        if st.st_size < BIG_FILE:
            digests[name] = hashlib.sha256(inp.path.read_bytes()).hexdigest()
            continue
        key = str(inp.path)
        hit = cache.get(key)
        if hit and list(hit[:3]) == [st.st_size, st.st_mtime_ns, st.st_ino]:
            digest = str(hit[3])
        else:
            digest = sha256_file(inp.path)
        digests[name] = digest
        new_cache[key] = [st.st_size, st.st_mtime_ns, st.st_ino, digest]
    return digests, new_cache


def _source_inputs(project: Path, source: Sequence[str]) -> Iterable[Input]:
    """The project files under ``source``, as ``src/<path>``; no caches, no hidden files.
    A README stub stands in for README.md (pyproject names it; it only feeds package
    metadata, and a docs change should not rebuild images)."""
    yield Input("src/README.md", data=README_STUB)
    for entry in source:
        top = project / entry
        if top.is_file():
            yield Input(f"src/{entry}", top)
            continue
        for root, dirs, names in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for f in sorted(names):
                if f.startswith(".") or f.endswith((".pyc", ".pyo")):
                    continue
                path = Path(root, f)
                if path.is_file():
                    yield Input(f"src/{path.relative_to(project).as_posix()}", path)


def train_requirements(project: Path) -> list[str]:
    """The ``train`` extra of the project's pyproject.toml."""
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # the backport, a dependency on 3.10
        import tomli as tomllib
    path = project / "pyproject.toml"
    try:
        data = tomllib.loads(path.read_text())
        reqs = data["project"]["optional-dependencies"]["train"]
    except (OSError, KeyError, ValueError) as exc:
        raise ContainerError(f"{path}: cannot read the train extra ([project.optional-dependencies] train): {exc}") from exc
    bad = [r for r in reqs if not isinstance(r, str) or "\n" in r]
    if bad:
        raise ContainerError(f"{path}: invalid train requirements {bad!r}")
    return list(reqs)


def _req_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;@(]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def find_torch_wheel(requirements: Sequence[str], wheels: str | None, python: str) -> Path | None:
    """The local torch wheel for the pinned version (``torch==X``), this machine's
    architecture and the image's Python, from ``wheels`` or pip's find-links folders."""
    pins = [r for r in requirements if _req_name(r) == "torch"]
    m = re.fullmatch(r"torch\s*==\s*([0-9][0-9a-z.]*)", pins[0].strip()) if pins else None
    if not m:
        return None
    tag = "cp" + python.replace(".", "")
    pattern = re.compile(rf"torch-{re.escape(m.group(1))}(\+[a-z0-9.]+)?-{tag}-{tag}-.*{re.escape(platform.machine())}\.whl")
    folders = [Path(wheels)] if wheels else _find_links()
    for folder in folders:
        if folder.is_dir():
            found = sorted(p for p in folder.iterdir() if pattern.fullmatch(p.name))
            if found:
                return found[0]
    return None


def _pip_config_values(key: str) -> list[str]:
    """``key`` from the environment (PIP_<KEY>) and pip's config files, read as text
    (running ``pip config`` would cost half a second)."""
    import configparser

    found = os.environ.get("PIP_" + key.upper().replace("-", "_"), "").split()
    files = [
        Path("/etc/pip.conf"),
        Path(os.environ.get("XDG_CONFIG_HOME", Path.home() / ".config")) / "pip/pip.conf",
        Path.home() / ".pip/pip.conf",
    ]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    for path in files:
        parser = configparser.ConfigParser(interpolation=None)
        try:
            parser.read(path)
        except (OSError, configparser.Error):
            continue
        for section in ("global", "install"):
            if parser.has_option(section, key):
                found += parser.get(section, key).split()
    return found


def _find_links() -> list[Path]:
    folders = [Path(v.removeprefix("file://")) for v in _pip_config_values("find-links") if "://" not in v or v.startswith("file://")]
    return folders + [Path("/opt/wheels")]


def find_ca_bundle(setting: str | None) -> Path | None:
    """The CA bundle pip uses here (PIP_CERT, pip's ``cert``, REQUESTS_CA_BUNDLE,
    SSL_CERT_FILE), so pip inside the build trusts what pip outside trusts (a
    TLS-intercepting proxy); ``none`` turns it off."""
    if setting == "none":
        return None
    candidates = (
        [setting] if setting else [*_pip_config_values("cert"), os.environ.get("REQUESTS_CA_BUNDLE"), os.environ.get("SSL_CERT_FILE")]
    )
    for c in candidates:
        if c and Path(c).is_file():
            return Path(c)
    if setting:
        raise ContainerError(f"ca_bundle: no such file {setting!r}")
    return None
