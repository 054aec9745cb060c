"""Building an image: only when its content changed, into place atomically, with a stamp.

``orchestrator container build [NAME]`` builds image NAME of ``containers/images.yaml``
(default ``ci``, see :mod:`~orchestrator.containers.images`), rendered from its
definition template (:mod:`~orchestrator.containers.definition`). The image is rebuilt
only when its content hash (:mod:`~orchestrator.containers.inputs`) differs from the
one in the stamp beside it.

Layout of a build, for image ``ci`` with the default output:

- ``.orchestrator/images/ci.sif``: the image, moved into place by a rename only
  after ``apptainer build --fakeroot`` succeeded into a hidden temporary file beside
  it (jobs never see a half-written image; the temporary is removed on failure);
- ``.orchestrator/images/ci.sif.json``: the stamp (content hash, per-input hashes,
  git commit, runtime version, definition, the SIF's sha256, size and mtime);
- ``.orchestrator/images/ci.build.log``: the runtime's output of the last build;
- ``containers/ci.digest``: one line, ``sha256:<digest of the SIF>``, for DVC: a
  training stage that lists it under ``deps`` re-runs when the image really changed.

Every command (the runtime, git) runs through a :class:`~orchestrator.util.runner.Runner`
as an argv list.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.containers import definition
from orchestrator.containers.images import CONTAINERS_DIR, SAFE_PATH, BuildError, ContainerError, select
from orchestrator.containers.inputs import BIG_FILE, Input, Prepared, content_hash, digest_inputs, prepare
from orchestrator.util import files, git
from orchestrator.util.files import sha256_file
from orchestrator.util.runner import Runner

IMAGES_DIR = ".orchestrator/images"  # workspace-local default for built images (git-ignored)
RUNTIMES = ("apptainer", "singularity")
STAMP_VERSION = 1
DEFAULT_TIMEOUT = 7200.0


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
        template, _ = definition.load(prepared.image.template)
        text = definition.render(template, prepared.variables, context=str(context), content_hash=chash, git_commit=commit)
        def_file = context / f"{prepared.image.name}.def"
        def_file.write_text(text)
        argv = [runtime, "build", "--fakeroot", "--force", str(tmp), str(def_file)]
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
    return tmp if SAFE_PATH.fullmatch(tmp) else "/tmp"


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
