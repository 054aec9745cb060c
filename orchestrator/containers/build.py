"""Container images: render a definition, build it only when its content changed.

``orchestrator container build [NAME]`` builds image NAME of ``containers/images.yaml``
(default ``ci``): a Jinja definition template in ``containers/`` rendered with that
image's values. The image is rebuilt only when its *content hash* changes: the hash
of the rendered definition (with the build-specific values, i.e. the staging folder,
the hash itself and the git commit, blanked) and of every file the build copies in
(the project source, the torch wheel, a CA bundle) or builds from (a localimage's
base), file contents hashed in sorted order. Files of 16 MiB and more (the torch
wheel, base images of gigabytes) are hashed once and then recognised by size, mtime
and inode, as make and DVC do, so the no-op check stays well under a second.

Layout of a build, for image ``ci`` with the default output:

- ``.orchestrator/images/ci.sif``: the image, moved into place by a rename only
  after ``apptainer build --fakeroot`` succeeded into a hidden temporary file beside
  it (jobs never see a half-written image; the temporary is removed on failure);
- ``.orchestrator/images/ci.sif.json``: the stamp (content hash, per-input hashes,
  git commit, runtime version, definition, the SIF's sha256, size and mtime);
- ``.orchestrator/images/ci.build.log``: the runtime's output of the last build;
- ``containers/ci.digest``: one line, ``sha256:<digest of the SIF>``, for DVC: a
  training stage that lists it under ``deps`` re-runs when the image really changed.

Every command (the runtime, git) runs through a :class:`~orchestrator.runner.Runner`
as an argv list.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import click

from orchestrator.errors import OrchestratorError
from orchestrator.util import files, git
from orchestrator.util.files import sha256_file
from orchestrator.util.runner import Runner

CONTAINERS_DIR = "containers"
IMAGES_FILE = f"{CONTAINERS_DIR}/images.yaml"
IMAGES_DIR = ".orchestrator/images"  # workspace-local default for built images (git-ignored)
DEFAULT_IMAGE = "ci"
RUNTIMES = ("apptainer", "singularity")
DEFAULT_SOURCE = ("pyproject.toml", "orchestrator", "experiments", "templates")
BIG_FILE = 16 << 20  # from this size on, a file's hash is reused while size/mtime/inode match
HASH_CONTEXT = "/build-context"  # the staging folder as the content hash sees it
BLANK = "-"  # the hash and commit labels as the content hash sees them
STAMP_VERSION = 1
DEFAULT_TIMEOUT = 7200.0
README_STUB = b"orchestrator: the project installed into a container image (README.md is not copied in).\n"

# The keys of an image in images.yaml, with what they mean (listed in errors).
KEYS = {
    "definition": "the template file in containers/ (required)",
    "description": "one line",
    "source": "project paths copied in and pip-installed",
    "base": "localimage: the base image file",
    "from": "docker: the registry image",
    "activate": "none | with-conda",
    "mirror": "debootstrap: the Debian mirror URL",
    "python": "the image's Python, e.g. 3.11 (the torch wheel's tag)",
    "wheels": "folder with the torch wheel",
    "ca_bundle": "CA bundle for pip during the build, or none",
}
DEFAULTS = {"activate": "none", "mirror": "http://deb.debian.org/debian", "python": "3.11"}

_SAFE_PATH = re.compile(r"[A-Za-z0-9._/+@%:,=~-]+")  # a %files path or header value: no quotes, $, globs, spaces
_LABEL = re.compile(r"[A-Za-z0-9._/+@:=~-]+")
_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@-]*")
_URL = re.compile(r"https?://[A-Za-z0-9._~:/@%+-]+")
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


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
    return Image(name, project / CONTAINERS_DIR / values["definition"], values, tuple(source))


def _images_file(project: Path) -> Mapping[str, object]:
    from orchestrator.util import yamlio

    path = project / IMAGES_FILE
    if not path.is_file():
        raise ContainerError(f"{path}: no such file (the images this project builds)")
    return yamlio.load_mapping(path)


def _check_values(project: Path, values: Mapping[str, object], source: Sequence[str]) -> list[str]:
    problems = []
    definition = values.get("definition")
    if not definition:
        problems.append("definition: required (a template file in containers/)")
    elif isinstance(definition, str) and (not _NAME.fullmatch(definition) or not (project / CONTAINERS_DIR / definition).is_file()):
        problems.append(f"definition: no template {definition!r} in {project / CONTAINERS_DIR}")
    checks = {
        "base": lambda v: _SAFE_PATH.fullmatch(v) is not None,
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


# --- inputs and the content hash --------------------------------------------------------


@dataclass(frozen=True)
class Input:
    """One file the build copies in (dest: its path in the staging folder) or builds
    from (dest ``base:`` ...); ``data`` for generated files."""

    dest: str
    path: Path | None = None
    data: bytes | None = None
    staged: bool = True


@dataclass(frozen=True)
class Prepared:
    image: Image
    inputs: tuple[Input, ...]
    variables: Mapping[str, object]  # template values except the build-specific ones
    hashed_definition: str  # rendered with the build-specific values blanked


def prepare(project: Path, image: Image) -> Prepared:
    """What the image is made of; reads files, runs nothing."""
    template, used = _template(image.template)
    variables: dict[str, object] = {"name": image.name}
    variables.update({("from_ref" if k == "from" else k): v for k, v in image.values.items()})
    inputs = []
    if "src_dir" in used:  # the definition copies the project source in
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
        variables["ca_bundle"] = "ca.crt" if bundle else ""
        if bundle:
            inputs.append(Input("ca.crt", bundle))
    if "base" in used and "base" in image.values:
        base = Path(str(image.values["base"]))
        base = base if base.is_absolute() else project / base
        if not base.is_file():
            raise ContainerError(
                f"image {image.name!r}: the base image {base} does not exist",
                hints=[f"set its path in {IMAGES_FILE} (key base) or with --set base=PATH"],
            )
        inputs.append(Input("base:" + str(base), base, staged=False))
        variables["base"] = str(base)
    missing = sorted({"from" if m == "from_ref" else m for m in used - set(variables) - {"content_hash", "git_commit", "src_dir"}})
    if missing:
        raise ContainerError(
            f"image {image.name!r}: {image.template.name} uses {', '.join(missing)}, which {IMAGES_FILE} does not set",
            hints=["valid keys: " + ", ".join(KEYS)],
        )
    hashed = render(template, variables, context=HASH_CONTEXT, content_hash=BLANK, git_commit=BLANK)
    return Prepared(image, tuple(sorted(inputs, key=lambda i: i.dest)), variables, hashed)


def render(template, variables: Mapping[str, object], *, context: str, content_hash: str, git_commit: str) -> str:
    """The definition text; staged inputs are named inside ``context``."""
    values = dict(variables)
    for key in ("torch_wheel", "ca_bundle"):
        if values.get(key):
            values[key] = f"{context}/{values[key]}"
    values.update(src_dir=f"{context}/src", content_hash=content_hash, git_commit=git_commit)
    import jinja2

    try:
        return template.render(**values)
    except jinja2.TemplateError as exc:  # e.g. an undefined attribute
        raise ContainerError(f"cannot render the definition: {exc}") from exc


def current_hash(project: Path, name: str | None = None, overrides: Sequence[str] = ()) -> str:
    """The content hash image NAME would have now (every input hashed; nothing run)."""
    prepared = prepare(project, select(project, name, overrides))
    return content_hash(prepared.hashed_definition, digest_inputs(prepared.inputs)[0])


def content_hash(hashed_definition: str, digests: Mapping[str, str]) -> str:
    h = hashlib.sha256(b"orchestrator-image\0")
    h.update(hashed_definition.encode())
    for dest in sorted(digests):
        h.update(f"\0{dest}\0{digests[dest]}".encode())
    return "sha256:" + h.hexdigest()


def digest_inputs(inputs: Iterable[Input], cache: Mapping[str, Sequence] | None = None) -> tuple[dict[str, str], dict[str, list]]:
    """``{dest: sha256}`` of every input, and the new stat cache of the big files
    (``{path: [size, mtime_ns, inode, sha256]}``; an entry of ``cache`` is reused while
    the file's size, mtime and inode are unchanged)."""
    cache = cache or {}
    digests: dict[str, str] = {}
    new_cache: dict[str, list] = {}
    for inp in inputs:
        if inp.data is not None:
            digests[inp.dest] = hashlib.sha256(inp.data).hexdigest()
            continue
        assert inp.path is not None
        st = inp.path.stat()
        if st.st_size < BIG_FILE:
            digests[inp.dest] = hashlib.sha256(inp.path.read_bytes()).hexdigest()
            continue
        key = str(inp.path)
        hit = cache.get(key)
        if hit and list(hit[:3]) == [st.st_size, st.st_mtime_ns, st.st_ino]:
            digest = str(hit[3])
        else:
            digest = sha256_file(inp.path)
        digests[inp.dest] = digest
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
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
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


def _template(path: Path):
    """The Jinja template (StrictUndefined; filters q, path, label) and the names it uses."""
    import jinja2
    from jinja2 import meta

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(path.parent)),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
    )
    env.filters.update(q=_q, path=_path, label=_label)
    try:
        source = path.read_text()
        used = meta.find_undeclared_variables(env.parse(source))
        return env.from_string(source), set(used)
    except jinja2.TemplateSyntaxError as exc:
        raise ContainerError(f"{path}:{exc.lineno}: {exc.message}") from exc


def _no_newline(value: object) -> str:
    text = str(value)
    if "\n" in text or "\r" in text or "\0" in text:
        raise ContainerError(f"value {text!r} holds a line break: it cannot go into a definition file")
    return text


def _q(value: object) -> str:
    """A shell word for %post."""
    return shlex.quote(_no_newline(value))


def _path(value: object) -> str:
    """A %files path. Apptainer splits %files lines itself (double quotes only) and
    expands sources with bash, so only plain characters are accepted."""
    text = _no_newline(value)
    if not _SAFE_PATH.fullmatch(text):
        raise ContainerError(f"path {text!r} cannot go into a definition file (only letters, digits and ._/+@%:,=~- are safe)")
    return f'"{text}"'


def _label(value: object) -> str:
    text = _no_newline(value)
    if not _LABEL.fullmatch(text):
        raise ContainerError(f"value {text!r} cannot go into a definition file's header or labels")
    return text


# --- the stamp: is the image up to date? ------------------------------------------------------


def stamp_path(image_path: Path) -> Path:
    return image_path.with_name(image_path.name + ".json")


def read_stamp(image_path: Path) -> dict:
    try:
        data = json.loads(stamp_path(image_path).read_text())
        return data if isinstance(data, dict) and data.get("version") == STAMP_VERSION else {}
    except (OSError, ValueError):
        return {}


def stale_reason(stamp: Mapping, image_path: Path, chash: str, digests: Mapping[str, str], definition_sha: str) -> str | None:
    """None when the image at ``image_path`` is the one the stamp describes and has this content hash."""
    if not image_path.is_file():
        return "no image yet"
    if not stamp:
        return "no stamp beside the image"
    st = image_path.stat()
    if [st.st_size, st.st_mtime_ns] != [stamp.get("size"), stamp.get("mtime_ns")]:
        return "the image file changed since it was built"
    if stamp.get("content_hash") == chash:
        return None
    old = stamp.get("inputs", {})
    changed = sorted({d for d in set(old) | set(digests) if old.get(d) != digests.get(d)})
    what = ["the definition"] if stamp.get("definition_sha256") != definition_sha else []
    what += [c.removeprefix("src/") for c in changed[:5]] + ([f"{len(changed) - 5} more"] if len(changed) > 5 else [])
    return "changed: " + ", ".join(what) if what else "content hash differs"


# --- building ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Result:
    name: str
    image: Path
    built: bool  # False: was up to date
    content_hash: str
    digest: str  # sha256:... of the SIF
    digest_file: Path
    seconds: float
    reason: str | None = None


def find_runtime(runner: Runner) -> str:
    """The runtime's name (argv[0]): apptainer, else singularity."""
    for name in RUNTIMES:
        if runner.which(name):
            return name
    raise ContainerError(
        "no container runtime: neither apptainer nor singularity is on PATH",
        hints=["install Apptainer (as root on Debian: containers/install-apptainer.sh) or load your site's module"],
    )


def build(
    project: Path,
    name: str | None,
    runner: Runner,
    *,
    output: Path | None = None,
    digest_file: Path | None = None,
    force: bool = False,
    overrides: Sequence[str] = (),
    timeout: float = DEFAULT_TIMEOUT,
    say: Callable[[str], None] = lambda line: None,
) -> Result:
    """Build image NAME unless its stamp says it is up to date (see the module doc)."""
    start = time.monotonic()
    runtime = find_runtime(runner)
    image = select(project, name, overrides)
    out = (output or project / IMAGES_DIR / f"{image.name}.sif").absolute()
    digest_file = (digest_file or project / CONTAINERS_DIR / f"{image.name}.digest").absolute()
    prepared = prepare(project, image)
    stamp = read_stamp(out)
    digests, cache = digest_inputs(prepared.inputs, stamp.get("stat_cache"))
    chash = content_hash(prepared.hashed_definition, digests)
    definition_sha = hashlib.sha256(prepared.hashed_definition.encode()).hexdigest()
    reason = "--force" if force else stale_reason(stamp, out, chash, digests, definition_sha)
    if reason is None:
        files.write_if_changed(digest_file, f"{stamp['digest']}\n")
        return Result(image.name, out, False, chash, stamp["digest"], digest_file, time.monotonic() - start)

    out.parent.mkdir(parents=True, exist_ok=True)
    with _lock(out):
        if not force and stale_reason(read_stamp(out), out, chash, digests, definition_sha) is None:  # built meanwhile
            return build(project, name, runner, output=output, digest_file=digest_file, overrides=overrides, say=say)
        for stale in out.parent.glob(glob.escape(f".{out.name}.") + "*.tmp"):  # left by a build that was killed (we hold the lock)
            stale.unlink(missing_ok=True)
        say(f"{image.name}: building ({reason}) with {Path(runtime).name} build --fakeroot; this can take minutes")
        commit = git_commit(project, image.source, runner)
        version = _runtime_version(runner, runtime)
        sif_digest, chash, digests, cache = _build_into_place(runtime, runner, prepared, out, commit, cache, timeout, say)
        stamp = {
            "version": STAMP_VERSION,
            "name": image.name,
            "definition": image.template.name,
            "content_hash": chash,
            "definition_sha256": definition_sha,
            "git_commit": commit,
            "runtime": version,
            "digest": sif_digest,
            "size": out.stat().st_size,
            "mtime_ns": out.stat().st_mtime_ns,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "build_seconds": round(time.monotonic() - start, 1),
            "inputs": digests,
            "stat_cache": cache,
        }
        files.atomic_write(stamp_path(out), json.dumps(stamp, indent=1, sort_keys=True) + "\n")
        files.write_if_changed(digest_file, f"{sif_digest}\n")
    return Result(image.name, out, True, chash, sif_digest, digest_file, time.monotonic() - start, reason)


def _build_into_place(runtime, runner, prepared: Prepared, out: Path, commit: str, cache, timeout: float, say):
    """Stage the inputs, build into a temporary file beside ``out``, rename it into
    place. Nothing is left behind on failure (the log excepted)."""
    log = out.with_name(f"{out.stem}.build.log")
    context = Path(tempfile.mkdtemp(prefix=f"orchestrator-{prepared.image.name}-", dir=_safe_tmpdir()))
    fd, tmp_name = tempfile.mkstemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        _stage(prepared.inputs, context)
        # Hash what was staged: that, not the working tree a moment earlier, is what goes in.
        digests, cache = digest_inputs(_staged(prepared.inputs, context), cache)
        chash = content_hash(prepared.hashed_definition, digests)
        template, _ = _template(prepared.image.template)
        text = render(template, prepared.variables, context=str(context), content_hash=chash, git_commit=commit)
        definition = context / f"{prepared.image.name}.def"
        definition.write_text(text)
        argv = [runtime, "build", "--fakeroot", "--force", str(tmp), str(definition)]
        say(f"{prepared.image.name}: log: {log}")
        try:
            done = runner.run(argv, timeout=timeout)
            rc, output = done.returncode, (done.stdout or "") + (done.stderr or "")
        except subprocess.TimeoutExpired as exc:
            rc, output = None, _text(exc.stdout) + _text(exc.stderr) + f"\n(timed out after {timeout:.0f} s)\n"
        log.write_text(f"$ {shlex.join(argv)}\n{output}\n(exit {rc})\n")
        if rc != 0:
            tail = [line for line in output.splitlines() if line.strip()][-15:]
            raise BuildError(
                f"building image {prepared.image.name!r} failed: {Path(runtime).name} build "
                + (f"exited with {rc}" if rc is not None else f"timed out after {timeout:.0f} s"),
                hints=[f"log: {log}", "last lines:", *[f"  {line}" for line in tail], f"nothing was written to {out}"],
            )
        if not tmp.is_file() or tmp.stat().st_size == 0:
            raise BuildError(
                f"building image {prepared.image.name!r}: {Path(runtime).name} build succeeded but wrote no image", hints=[f"log: {log}"]
            )
        sif_digest = "sha256:" + sha256_file(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
        return sif_digest, chash, digests, cache
    finally:
        tmp.unlink(missing_ok=True)
        shutil.rmtree(context, ignore_errors=True)


def _stage(inputs: Iterable[Input], context: Path) -> None:
    for inp in inputs:
        if not inp.staged:
            continue
        dest = context / inp.dest
        dest.parent.mkdir(parents=True, exist_ok=True)
        if inp.data is not None:
            dest.write_bytes(inp.data)
            continue
        assert inp.path is not None
        try:
            os.link(inp.path, dest)  # big wheels: no copy when on the same file system
        except OSError:
            shutil.copy2(inp.path, dest)


def _staged(inputs: Iterable[Input], context: Path) -> list[Input]:
    """The inputs as staged: small files are read back from the staging folder; big
    ones (hard links or copies of wheels, base images) keep their source path, so the
    big-file cache, keyed by source path, still applies."""
    result = []
    for inp in inputs:
        staged = context / inp.dest
        if inp.staged and inp.data is None and staged.stat().st_size < BIG_FILE:
            result.append(Input(inp.dest, staged))
        else:
            result.append(inp)
    return result


def _safe_tmpdir() -> str:
    tmp = tempfile.gettempdir()
    return tmp if _SAFE_PATH.fullmatch(tmp) else "/tmp"


def git_commit(project: Path, source: Sequence[str], runner: Runner) -> str:
    """HEAD's commit, with ``-dirty`` when the copied-in paths differ from it; ``unknown`` outside git."""
    code = git.state(project, runner, source)
    if code is None:
        return "unknown"
    return code.commit + ("-dirty" if code.dirty else "")


def _runtime_version(runner: Runner, runtime: str) -> str:
    try:
        done = runner.run([runtime, "--version"], timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return Path(runtime).name
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else Path(runtime).name


def _text(data) -> str:
    if data is None:
        return ""
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data)


def _lock(image_path: Path):
    """An exclusive flock beside the image, so two builds of one image run one after
    the other (the second then finds it up to date)."""
    return files.locked(image_path.with_name(f".{image_path.name}.lock"))


# --- command line -----------------------------------------------------------------------------


@click.group()
def container() -> None:
    """Container images: build the image jobs run in (containers/images.yaml)."""


@container.command("build")
@click.argument("name", required=False)
@click.option("--force", is_flag=True, help="Build even when the image is up to date.")
@click.option(
    "--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None, help=f"Image file [default: {IMAGES_DIR}/NAME.sif]."
)
@click.option(
    "--digest-file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help=f"Where the image's sha256 goes, for DVC [default: {CONTAINERS_DIR}/NAME.digest].",
)
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="Override a value of the image in images.yaml (e.g. base=/path/to/base.sif).",
)
@click.option("--timeout", type=float, default=DEFAULT_TIMEOUT, show_default=True, help="Give up on a build after this many seconds.")
@click.option("--push", is_flag=True, help="Then copy the image to the profile's container.image path on its push_host (rsync over ssh).")
@click.option("--cluster", "-c", default=None, help="With --push: the profile (default: as `orchestrator run` picks it).")
@click.option("--ssh-option", "ssh_options", multiple=True, help="With --push: an option for ssh (repeatable), e.g. --ssh-option=-p2222.")
@click.option(
    "--project",
    type=click.Path(file_okay=False, path_type=Path),
    default=".",
    show_default=True,
    help="The project (folder with containers/).",
)
def build_command(name, force, output, digest_file, overrides, timeout, push, cluster, ssh_options, project) -> None:
    """Build image NAME of containers/images.yaml (default: ci) unless it is up to date.

    Up to date means: the image beside its stamp has the content hash of the
    rendered definition and every file it copies in. The build runs
    `apptainer build --fakeroot` (or singularity) into a temporary file and renames
    it into place only on success; the image's sha256 goes to the digest file.
    """
    import signal

    from orchestrator.util.runner import SubprocessRunner

    # SIGTERM (scancel, timeout) unwinds like Ctrl-C: the runtime is killed, the
    # temporary image and the staging folder are removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        result = build(
            project,
            name,
            SubprocessRunner(),
            output=output,
            digest_file=digest_file,
            force=force,
            overrides=overrides,
            timeout=timeout,
            say=lambda line: click.echo(line, err=True),
        )
    except OSError as exc:  # an unwritable image folder, a full disk (our own errors: the main CLI reports them)
        click.secho(f"error: {exc}", err=True, fg="red")
        sys.exit(1)
    where = _display(result.image)
    if result.built:
        click.echo(f"{result.name}: built {where} ({result.digest}, {result.seconds:.0f} s); digest in {_display(result.digest_file)}")
    else:
        click.echo(f"{result.name}: up to date ({where}, {result.digest})")
    if push:
        from orchestrator.containers import push

        target = push_target(project, cluster, SubprocessRunner())
        pushed = push.push(result.image, target, SubprocessRunner(), ssh_options=ssh_options, say=lambda line: click.echo(line, err=True))
        how = f"{pushed.bytes_transferred} bytes sent ({pushed.method})" if pushed.transferred else "already there, nothing sent"
        click.echo(f"{result.name}: pushed to {target}: {how}; sha256 verified")


def push_target(project: Path, cluster: str | None, runner) -> str:
    """``host:path`` where jobs of the profile find the image (its container.image, with
    the account filled in from params.yaml)."""
    import getpass

    from orchestrator.containers import push
    from orchestrator.scripts.workspace import Workspace

    ws = Workspace.open(project, cluster, runner)
    c = ws.profile.profile.container
    if not (c.push_host and c.image):
        raise ContainerError(
            f"profile {ws.cluster!r} says nowhere to push: it needs container.push_host and container.image",
            hints=["set them in a copy of the profile (orchestrator clusters show NAME --format yaml)"],
        )
    user = c.push_host.split("@", 1)[0] if "@" in c.push_host else getpass.getuser()
    values = {"USER": user, **({"SLURM_JOB_ACCOUNT": ws.params.settings.account} if ws.params.settings.account else {})}
    return f"{c.push_host}:{push.remote_image_path(c.image, values)}"


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)

