"""Which image a file is, and where the local image was pushed: the records beside images.

An image is known by its name in containers/images.yaml and its content hash, not by
the bytes of its SIF (every rebuild of the same content has other bytes). This module
reads and writes what says which image a file holds, wherever it lies:

- the image's own labels (``org.orchestrator.image``, ``org.orchestrator.content-hash``,
  set by the definition templates), parsed from the SIF's descriptors by
  :func:`sif_identity` from any bytes at hand: a file here, or the first
  :data:`HEAD_BYTES` of a file on a cluster (no container runtime needed);
- the local image's identity, :func:`identify`: its labels, else the build's stamp beside it;
- the record a push writes beside the image it installed, ``NAME.orchestrator.json``
  (:func:`sidecar_text`, read back by :func:`sidecar_identity` while it still describes
  the file beside it);
- the record beside the LOCAL image of where it was pushed, ``NAME.sif.pushes.json``
  (:func:`record_push`, :func:`read_pushes`), which ``orchestrator container list`` shows.

Separate from :mod:`~orchestrator.containers.push` (copying bytes, verifying them,
refusing to overwrite another image) because the listing of images
(:mod:`~orchestrator.containers.catalog`) reads these records too, and moves no bytes.
Reads and writes files only; runs nothing.
"""

from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from orchestrator.util import files

# --- what an image file holds: its name, content hash and build time ----------------------

NAME_LABEL = "org.orchestrator.image"
CONTENT_LABEL = "org.orchestrator.content-hash"
SIDECAR_SUFFIX = ".orchestrator.json"
PUSHES_SUFFIX = ".pushes.json"  # beside the local image: <image>.sif.pushes.json, {"host:path": {"sha256", "at", "name"}}
# Of a remote file that is not this image, read for its labels: a SIF's header and
# descriptor table take ~32 KiB, then come the definition and the metadata with the
# labels (38 KiB into the CI image). Labels further in read as "unknown name".
HEAD_BYTES = 64 << 10


@dataclass(frozen=True)
class Identity:
    """Which image a file is: its containers/images.yaml name (None: unknown), content hash, build time."""

    name: str | None
    content_hash: str | None = None
    built_at: str | None = None

    def describe(self) -> str:
        """``image 'ci' (built 2026-11-25T20:01:38+0000, content sha256:0ad704e9f635)``."""
        details = [f"built {self.built_at}"] if self.built_at else []
        details += [f"content {self.content_hash[:19]}"] if self.content_hash else []
        return f"image {self.name!r}" + (f" ({', '.join(details)})" if details else "")


# The SIF format (github.com/apptainer/sif, little-endian, packed): a 128-byte header, a
# table of 585-byte descriptors, then the data objects the descriptors point to.
_SIF_HEADER = struct.Struct("<32s10s3s3s16s8q")  # launch script, magic, version, arch, id; created, modified,
# descriptors free/total/offset/size, data offset/size
_SIF_DESCRIPTOR = struct.Struct("<iBIIIqqqqqqq128s384s")  # type, used, id, group, link; offset, size, padded size,
# created, modified, uid, gid; name, extra
_SIF_MAGIC = b"SIF_MAGIC\0"
_SIF_JSON = 0x4006  # a generic JSON object: Apptainer's and Singularity's inspect metadata, with the %labels
_SIF_MAX_DESCRIPTORS = 4096
_SIF_MAX_JSON = 1 << 20


def sif_identity(read: Callable[[int, int], bytes]) -> Identity | None:
    """What a SIF's own labels (``org.orchestrator.image``, ``...content-hash``) and header
    (its creation time) say it is; None when it is not a SIF or its metadata is out of reach.

    ``read(offset, size)`` gives the file's bytes there: fewer when the file, or the part
    of it at hand (the first 64 KiB of a remote file), ends before. Pure parsing, no
    runtime: the push host needs no Apptainer.
    """
    header = read(0, _SIF_HEADER.size)
    if len(header) < _SIF_HEADER.size:
        return None
    fields = _SIF_HEADER.unpack(header)
    magic, created, total, table_at, table_size = fields[1], fields[5], fields[8], fields[9], fields[10]
    if magic != _SIF_MAGIC or not 0 < total <= _SIF_MAX_DESCRIPTORS or table_size != total * _SIF_DESCRIPTOR.size:
        return None
    table = read(table_at, table_size)
    if len(table) < table_size:
        return None
    built = _utc(created)
    for i in range(total):
        kind, used, *_, at, size = _SIF_DESCRIPTOR.unpack_from(table, i * _SIF_DESCRIPTOR.size)[:7]
        if not used or kind != _SIF_JSON or not 0 < size <= _SIF_MAX_JSON:
            continue
        data = read(at, size)
        if len(data) < size:
            return None
        try:
            labels = json.loads(data)["data"]["attributes"]["labels"]
        except (ValueError, KeyError, TypeError):
            continue  # another JSON object
        if isinstance(labels, dict):
            return Identity(_text(labels.get(NAME_LABEL)), _text(labels.get(CONTENT_LABEL)), built)
    return Identity(None, None, built)  # a SIF without labels


def identify(image: Path) -> Identity:
    """The local image's identity: its own labels, else the build stamp beside it (which
    also gives the build time, when it describes this very file)."""
    from orchestrator.containers.build import read_stamp

    try:
        sif = _sif_file(image) or Identity(None)
    except OSError:
        sif = Identity(None)
    stamp = read_stamp(image)
    try:
        st = image.stat()
        if [st.st_size, st.st_mtime_ns] != [stamp.get("size"), stamp.get("mtime_ns")]:
            stamp = {}  # it describes an earlier file at this path
    except OSError:
        stamp = {}
    return Identity(
        sif.name or _text(stamp.get("name")),
        sif.content_hash or _text(stamp.get("content_hash")),
        _text(stamp.get("built_at")) or sif.built_at,
    )


def sidecar_text(ours: Identity, digest: str, size: int) -> str:
    """The record a push writes beside the image it installed: one line of ASCII JSON."""
    record = {
        "name": ours.name,
        "sha256": digest,
        "content_hash": ours.content_hash,
        "built_at": ours.built_at,
        "size": size,
        "pushed_at": _now(),
        "pushed_from": socket.gethostname(),
    }
    return json.dumps(record, sort_keys=True)


def sidecar_identity(text: str | None, size: int | None, sha256: str | None) -> Identity | None:
    """The identity a sidecar gives, while it still describes the file beside it: same
    size, and same sha256 when that is known. None: no sidecar, or a stale or broken one."""
    if text is None or size is None:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        return None
    if not isinstance(data, dict) or data.get("size") != size or (sha256 and data.get("sha256") != sha256):
        return None
    return Identity(_text(data.get("name")), _text(data.get("content_hash")), _text(data.get("built_at")))


def identity_at(dest: Path, sidecar: Path, size: int, sha: str | None) -> Identity:
    """What the file ``dest`` on this machine holds, as a push's remote probe reads a file
    there: the sidecar while ``dest`` is not newer than it, else its own labels."""
    there = None
    try:
        if dest.stat().st_mtime_ns <= sidecar.stat().st_mtime_ns:
            there = sidecar_identity(sidecar.read_text(errors="replace"), size, sha)
    except OSError:
        pass
    if there is None:
        there = _sif_file(dest)
    return there or Identity(None)


def _sif_file(path: Path) -> Identity | None:
    """:func:`sif_identity` of a file on this machine (raises OSError when it cannot be read)."""
    with open(path, "rb") as f:

        def read(offset: int, size: int) -> bytes:
            f.seek(offset)
            return f.read(size)

        return sif_identity(read)


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _utc(seconds: int) -> str | None:
    if not 0 < seconds < 1 << 34:
        return None
    return datetime.fromtimestamp(seconds, timezone.utc).isoformat(timespec="seconds")


def _now() -> str:
    return datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")


# --- where the local image was pushed (for `orchestrator container list`) -------------------


def pushes_path(image: Path) -> Path:
    return image.with_name(image.name + PUSHES_SUFFIX)


def read_pushes(image: Path) -> dict[str, dict]:
    """``{target: {"sha256": HEX, "at": ISO-8601, "name": NAME}}``; {} when never pushed (or unreadable)."""
    try:
        data = json.loads(pushes_path(image).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)} if isinstance(data, dict) else {}


def record_push(image: Path, target: str, digest: str, name: str | None, say: Callable[[str], None]) -> None:
    """Add ``target`` to the image's push record. Read, update, rename: two pushes of one
    image ending in the same instant could lose one entry, which only `list` shows."""
    pushes = read_pushes(image)
    pushes[target] = {"sha256": digest, "at": _now(), "name": name}
    try:
        files.atomic_write(pushes_path(image), json.dumps(pushes, indent=1, sort_keys=True) + "\n")
    except OSError as exc:  # a read-only image folder: the push itself succeeded
        say(f"note: could not record the push in {pushes_path(image)}: {exc.strerror or exc}")
