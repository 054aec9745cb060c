"""Building an image: only when its content changed, into place atomically, with a stamp.

``orchestrator container build [NAME]`` builds image NAME of ``containers/images.yaml``
(default ``ci``, see :mod:`~orchestrator.containers.images`), rendered from its
definition template (:mod:`~orchestrator.containers.definition`). The image is rebuilt
only when its content hash (:mod:`~orchestrator.containers.inputs`) differs from the
one in the stamp beside it.

Layout of a build, for image ``ci`` with the default output:

- ``.orchestrator/images/ci.sif``: the image, moved into place by a rename only
  after ``apptainer build --fakeroot`` (or the ``proot`` builder's build) succeeded into a hidden temporary file beside
  it (jobs never see a half-written image; the temporary is removed on failure);
- ``.orchestrator/images/ci.sif.json``: the stamp (content hash, per-input hashes,
  git commit, runtime version, definition, the SIF's own sha256 under ``digest``, size
  and mtime);
- ``.orchestrator/images/ci.build.log``: the runtime's output of the last build, written
  as it comes (the build shows its phase meanwhile: :mod:`~orchestrator.containers.progress`);
- ``.orchestrator/images/.build-ci-PID/``: while building, the staging context and the
  runtime's own temporary folder, removed at the end however the build ends; what a
  killed build left is removed by the next (:mod:`~orchestrator.containers.leftovers`);
- ``containers/ci.digest``: one line, the image's content hash
  (``content-sha256:<hex>``), for DVC: a training stage that lists it under ``deps``
  re-runs when what went into the image changed, and only then. Not the SIF's sha256:
  a SIF carries its build time and a random id, so every rebuild, a revert, another
  workstation or CI would each make every stage stale. The SIF's sha256 is what a push
  verifies and what a job's provenance names (``image_sha256``); it is remembered beside
  the image (:func:`orchestrator.util.files.cached_sha256`), so neither hashes it again.

The image holds no project code (see containers/images.yaml): a change to
``experiments/`` leaves the content hash as it is, and the build says "up to date".

Every command (the runtime, git) runs through a :class:`~orchestrator.util.runner.Runner`
as an argv list.
"""

from __future__ import annotations

import collections
import glob
import hashlib
import json
import os
import shlex
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from orchestrator.config.profile_schema import BUILDERS
from orchestrator.containers import definition, leftovers, progress
from orchestrator.containers.images import CONTAINERS_DIR, SAFE_PATH, BuildError, ContainerError, select
from orchestrator.containers.inputs import BIG_FILE, Input, Prepared, content_hash, digest_inputs, prepare
from orchestrator.util import files, git
from orchestrator.util.files import sha256_file
from orchestrator.util.runner import Runner, Stopped

IMAGES_DIR = ".orchestrator/images"  # workspace-local default for built images (git-ignored)
Runtime = Literal["apptainer", "singularity"]
RUNTIMES: tuple[Runtime, ...] = ("apptainer", "singularity")
STAMP_VERSION = 2  # 2: content-sha256 identity (no CA bundle, base by content); 1's images are rebuilt once
DEFAULT_TIMEOUT = 7200.0


# --- the stamp: is the image up to date? ------------------------------------------------------


def stamp_path(image_path: Path) -> Path:
    return image_path.with_name(image_path.name + ".json")


def read_stamp(image_path: Path) -> dict:
    """The stamp beside the image ({} when there is none); an older version's too, whose
    big-file hashes are still good (:func:`stale_reason` never finds its image up to date)."""
    try:
        data = json.loads(stamp_path(image_path).read_text())
        return data if isinstance(data, dict) and isinstance(data.get("version"), int) else {}
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
    if stamp.get("version") != STAMP_VERSION:
        return "built by an older orchestrator, whose content hash had another form"
    if stamp.get("content_hash") == chash:
        return None
    old = stamp.get("inputs", {})
    changed = sorted({d for d in set(old) | set(digests) if old.get(d) != digests.get(d)})
    what = ["the definition"] if stamp.get("definition_sha256") != definition_sha else []
    shown = ["the base image" if c == "base" else c.removeprefix("src/") for c in changed[:5]]
    what += shown + ([f"{len(changed) - 5} more"] if len(changed) > 5 else [])
    return "changed: " + ", ".join(what) if what else "content hash differs"


# --- freshness: what the inputs hash to now, against the stamp -----------------------------------

Digests = tuple[dict[str, str], dict[str, list]]  # what digest_inputs returns: the digests, the stat cache
# Per input, what digest_inputs gives for it alone: several images share inputs (the
# project source), which a listing of every image then hashes once.
DigestMemo = dict[Input, Digests]


@dataclass(frozen=True)
class Freshness:
    """Whether the image at ``out`` is what its inputs make now: the check a build makes
    before it decides to build, and what ``container list`` shows."""

    stamp: dict  # the stamp beside out ({} when none)
    digests: dict[str, str]  # digest_inputs: {identity: sha256} of the inputs now
    cache: dict[str, list]  # the stat cache of the big files, for the next stamp
    content_hash: str  # content-sha256:... of the definition and the inputs now
    definition_sha: str  # sha256 of the definition as hashed
    reason: str | None  # why out is not up to date (stale_reason); None: it is


def freshness(prepared: Prepared, out: Path, memo: DigestMemo | None = None, stamp: dict | None = None) -> Freshness:
    """Hash ``prepared``'s inputs (big files known to the stamp beside ``out`` are not hashed
    again) and compare with that stamp (``stamp``: read already). ``memo``: inputs hashed for
    another image already."""
    stamp = read_stamp(out) if stamp is None else stamp
    digests, cache = _digest(prepared.inputs, stamp.get("stat_cache"), memo)
    chash = content_hash(prepared.hashed_definition, digests)
    definition_sha = hashlib.sha256(prepared.hashed_definition.encode()).hexdigest()
    return Freshness(stamp, digests, cache, chash, definition_sha, stale_reason(stamp, out, chash, digests, definition_sha))


def _digest(inputs: Sequence[Input], cache: Mapping[str, Sequence] | None, memo: DigestMemo | None) -> Digests:
    """digest_inputs of ``inputs``; with ``memo``, each input hashed once across calls."""
    if memo is None:
        return digest_inputs(inputs, cache)
    digests: dict[str, str] = {}
    new_cache: dict[str, list] = {}
    for inp in inputs:
        if inp not in memo:
            memo[inp] = digest_inputs([inp], cache)
        digests.update(memo[inp][0])
        new_cache.update(memo[inp][1])
    return digests, new_cache


# --- building ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BuildResult:
    name: str
    image: Path
    built: bool  # False: was up to date
    content_hash: str  # content-sha256:...: what the digest file holds
    digest: str  # sha256:... of the SIF (push, provenance)
    digest_file: Path
    seconds: float
    reason: str | None = None


def builder_flags(builder: str) -> list[str]:
    """The runtime's build flags for ``builder`` (:data:`~orchestrator.config.profile_schema.BUILDERS`):
    ``fakeroot`` maps root in the image to the user (user namespaces or the site's fakeroot);
    ``proot`` passes none, so that SingularityCE, run by a user without them, builds through ``proot``."""
    if builder not in BUILDERS:
        raise ContainerError(f"unknown builder {builder!r}: expected one of {', '.join(BUILDERS)}")
    return ["--fakeroot"] if builder == "fakeroot" else []


def find_runtime(runner: Runner, builder: str = "fakeroot") -> Runtime:
    """The runtime's name (argv[0]): apptainer, else singularity; for the ``proot`` builder
    singularity only (SingularityCE's proot builds; Apptainer has none), with ``proot`` on PATH."""
    if builder == "proot":
        missing = [name for name in ("singularity", "proot") if not runner.which(name)]
        if missing:
            raise ContainerError(
                f"the proot builder needs {' and '.join(missing)} on PATH (SingularityCE 4.1+ builds unprivileged through proot)",
                hints=["on LUMI: module load LUMI systools (it provides proot); in a profile: container.build.setup"],
            )
        return "singularity"
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
    display: progress.Display | None = None,
    builder: str = "fakeroot",
) -> BuildResult:
    """Build image NAME unless its stamp says it is up to date (see the module doc), with
    ``builder``'s flags (:func:`builder_flags`)."""
    start = time.monotonic()
    flags = builder_flags(builder)
    runtime = find_runtime(runner, builder)
    image = select(project, name, overrides)
    out = (output or project / IMAGES_DIR / f"{image.name}.sif").absolute()
    digest_file = (digest_file or project / CONTAINERS_DIR / f"{image.name}.digest").absolute()
    prepared = prepare(project, image)
    fresh = freshness(prepared, out)
    reason = "--force" if force else fresh.reason
    if reason is None:
        write_digest(digest_file, fresh.content_hash, say)
        return BuildResult(image.name, out, False, fresh.content_hash, fresh.stamp["digest"], digest_file, time.monotonic() - start)

    out.parent.mkdir(parents=True, exist_ok=True)
    with _lock(out):
        # Built meanwhile, by a build that held the lock before us?
        if not force and stale_reason(read_stamp(out), out, fresh.content_hash, fresh.digests, fresh.definition_sha) is None:
            return build(
                project,
                name,
                runner,
                output=output,
                digest_file=digest_file,
                overrides=overrides,
                timeout=timeout,
                builder=builder,
                say=say,
                display=display,
            )
        how = shlex.join([Path(runtime).name, "build", *flags]) + (" (proot)" if builder == "proot" else "")
        say(f"{image.name}: building ({reason}) with {how}; this can take minutes")
        commit = git_commit(project, _git_paths(project, image), runner)
        version = _runtime_version(runner, runtime)
        sif_digest, chash, digests, cache = _build_into_place(
            runtime, runner, prepared, out, commit, fresh.cache, timeout, say, display, flags
        )
        stamp = {
            "version": STAMP_VERSION,
            "name": image.name,
            "definition": image.template.name,
            "content_hash": chash,
            "definition_sha256": fresh.definition_sha,
            "git_commit": commit,
            "runtime": version,
            "builder": builder,
            "digest": sif_digest,
            "size": out.stat().st_size,
            "mtime_ns": out.stat().st_mtime_ns,
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "build_seconds": round(time.monotonic() - start, 1),
            "inputs": digests,
            "stat_cache": cache,
        }
        files.atomic_write(stamp_path(out), json.dumps(stamp, indent=1, sort_keys=True) + "\n")
        files.remember_sha256(out, sif_digest.removeprefix("sha256:"))  # a push or a job's provenance need not hash it again
        write_digest(digest_file, chash, say)
    return BuildResult(image.name, out, True, chash, sif_digest, digest_file, time.monotonic() - start, reason)


OLD_DIGEST_PREFIX = "sha256:"  # the digest file's form before it held the content hash: the SIF's sha256


def write_digest(path: Path, chash: str, say: Callable[[str], None]) -> bool:
    """Write the content hash to the digest file unless it holds it already (its mtime then
    stays); say so when it held the old form. True when it wrote."""
    try:
        old = path.read_text().strip()
    except OSError:
        old = ""
    wrote = files.write_if_changed(path, f"{chash}\n")
    if wrote and old.startswith(OLD_DIGEST_PREFIX):
        shown = files.display_path(path)
        say(f"{shown} now holds the image's content hash instead of the SIF's sha256: stages that depend on it run once more")
    return wrote


def _git_paths(project: Path, image) -> tuple[str, ...]:
    """What an image is built from in the project: when one differs from HEAD, its commit label says ``-dirty``."""
    from orchestrator.containers.images import IMAGES_FILE

    template = image.template.relative_to(project).as_posix() if image.template.is_relative_to(project) else str(image.template)
    return (*image.source, "pyproject.toml", IMAGES_FILE, template)


def _build_into_place(
    runtime, runner, prepared: Prepared, out: Path, commit: str, cache, timeout: float, say, display=None, flags=("--fakeroot",)
):
    """Stage the inputs, build into a temporary file beside ``out``, rename it into place.

    Every temporary thing of the build lives in ``.build-NAME-PID/`` beside the image
    (:mod:`~orchestrator.containers.leftovers`), the runtime's own folder included, and
    is removed on success, failure, time-out or a stop signal (:class:`Stopped`); the log,
    written from the first second, stays. ``display`` shows the progress
    (:mod:`~orchestrator.containers.progress`; default: one line per phase, to ``say``)."""
    name = prepared.image.name
    _remove_leftovers(out, name, say)
    log = _Log(out.with_name(f"{out.stem}.build.log"))
    say(f"{name}: log: {log.path}")
    tmp = leftovers.temp_image(out)
    work: Path | None = None
    stop: BaseException | None = None
    try:
        work = _work_dir(out, name, say)
        context = work / "context"
        context.mkdir()
        _stage(prepared.inputs, context)
        # Hash what was staged: that, not the working tree a moment earlier, is what goes in.
        digests, cache = digest_inputs(_staged(prepared.inputs, context), cache)
        chash = content_hash(prepared.hashed_definition, digests)
        template, _ = definition.load(prepared.image.template)
        text = definition.render(template, prepared.variables, context=str(context), content_hash=chash, git_commit=commit)
        def_file = context / f"{name}.def"
        def_file.write_text(text)
        argv = [runtime, "build", *flags, "--force", str(tmp), str(def_file)]
        rc = _run_logged(runner, argv, name, log, display or progress.Lines(say), timeout, work / "tmp")
        if rc != 0:
            raise BuildError(
                f"building image {name!r} failed: {Path(runtime).name} build "
                + (f"exited with {rc}" if rc is not None else f"timed out after {timeout:.0f} s"),
                hints=[f"log: {log.path}", "last lines:", *[f"  {line}" for line in log.tail], f"nothing was written to {out}"],
            )
        if not tmp.is_file() or tmp.stat().st_size == 0:
            what = f"building image {name!r}: {Path(runtime).name} build succeeded but wrote no image"
            raise BuildError(what, hints=[f"log: {log.path}"])
        sif_digest = "sha256:" + sha256_file(tmp)
        os.chmod(tmp, 0o644)
        os.replace(tmp, out)
        return sif_digest, chash, digests, cache
    except (Stopped, KeyboardInterrupt) as exc:
        stop = exc
        raise
    finally:
        tmp.unlink(missing_ok=True)
        if work is not None:
            leftovers.remove_tree(work)
        if stop is not None:  # said once all is removed, so that it is true
            signame = stop.name if isinstance(stop, Stopped) else "SIGINT"
            kept = "the old image is kept" if out.is_file() else f"there was no image at {out} before"
            line = f"build of {name} stopped by {signame}: nothing was installed, {kept}"
            log.write(line)
            say(line)
            if isinstance(stop, Stopped):
                stop.reported = True
        log.close()


class _Log:
    """The build's log: emptied when the build starts, each line written (and flushed) as it comes;
    the last non-empty lines kept for the error message."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.file = path.open("w", encoding="utf-8", errors="replace")
        self.tail: collections.deque[str] = collections.deque(maxlen=15)
        self.write(f"# build started {time.strftime('%Y-%m-%dT%H:%M:%S%z')} by process {os.getpid()} on {socket.gethostname()}")

    def write(self, line: str) -> None:
        self.file.write(line + "\n")
        self.file.flush()
        if line.strip():
            self.tail.append(line)

    def close(self) -> None:
        self.file.close()


def _run_logged(runner: Runner, argv: list[str], name: str, log: _Log, display, timeout: float, runtime_tmp: Path) -> int | None:
    """Run the runtime, its output to the log and the display as it comes; its exit status
    (None: timed out, stopped and its process group with it). Its temporary folder is
    ``runtime_tmp``, where a killed build's leftovers are found again."""
    runtime_tmp.mkdir()
    env = {"APPTAINER_TMPDIR": str(runtime_tmp), "SINGULARITY_TMPDIR": str(runtime_tmp)}
    log.write(f"$ {' '.join(f'{k}={shlex.quote(v)}' for k, v in env.items())} {shlex.join(argv)}")

    def on_line(line: str) -> None:
        log.write(line)
        display.line(line)

    def on_start(pid: int) -> None:  # a runtime our death left running keeps its folder alive (leftovers)
        (runtime_tmp.parent / leftovers.RUNTIME_FILE).write_text(f"{pid}\n")

    display.begin(name)
    try:
        rc: int | None = runner.stream(argv, on_line, timeout=timeout, env=env, on_start=on_start)
    except subprocess.TimeoutExpired:
        rc = None
        log.write(f"(timed out after {timeout:.0f} s)")
    finally:
        display.end()
    log.write(f"(exit {rc})")
    return rc


def _work_dir(out: Path, name: str, say) -> Path:
    """``.build-NAME-PID/`` beside the image, or in the fallback folder where the image's
    folder has a path %files cannot take (and the build says so)."""
    work = leftovers.build_dir(out.parent, name)
    if not SAFE_PATH.fullmatch(str(work)):
        work = leftovers.build_dir(leftovers.fallback_dir(), name)
        say(f"{name}: {out.parent} has characters Apptainer's %files cannot take: the build's temporary files go to {work}")
    leftovers.remove_tree(work)  # a process of our id that was killed: it is gone
    return leftovers.make_build_dir(work)


def _remove_leftovers(out: Path, name: str, say) -> None:
    """Remove what killed builds left (their process is gone) and, since we hold this
    image's lock, its temporary images named by builds of older versions; say how much."""
    items = leftovers.find(out.parent)
    named = {item.path for item in items}
    for old in out.parent.glob(glob.escape(f".{out.name}.") + "*.tmp"):
        if old not in named and leftovers.owner(old) is None and old.is_file():
            items.append(leftovers.Leftover(old, leftovers.disk_bytes(old), f"unfinished image of {name} from an older build"))
    if items:
        freed = leftovers.remove(items)
        paths = ", ".join(item.path.name if item.path.parent == out.parent else str(item.path) for item in items)
        say(f"{name}: removed what stopped builds left in {out.parent}, {progress.size_text(freed)} freed: {paths}")


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


def _lock(image_path: Path):
    """An exclusive flock beside the image, so two builds of one image run one after
    the other (the second then finds it up to date)."""
    return files.locked(image_path.with_name(f".{image_path.name}.lock"))
