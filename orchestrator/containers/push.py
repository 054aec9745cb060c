"""Shipping a built container image to where the jobs read it: rsync over ssh, verified, atomic.

``push(image, "user@host:/project/x/containers/orchestrator.sif", runner)`` makes the file
at the remote path byte-identical to the local image, or raises :class:`ShipError` and
leaves whatever was at that path before untouched. A push is three ssh connections with
a check here after the first (jobs only ever open the final path), all riding on one
master connection of the ssh transport (:mod:`orchestrator.util.ssh`), so a login that
prompts is asked for once:

1. probe: create the remote directory; if a file is already at the final path, its size,
   its sha256 when the size is the image's, the record beside it (below) and, when it is
   not this image, its first 64 KiB. Equal sha256: nothing to transfer
   (``PushResult.transferred`` is False).
2. guard, here: a file at the final path that holds ANOTHER image is never overwritten
   unless the caller says so (``replace_other_image``, the CLI's ``--replace-other-image``):
   :class:`OtherImageThere` names what is there and what was given, and nothing is sent.
   What is there is read from the record the last push wrote beside the image,
   ``NAME.orchestrator.json`` (name, sha256, content hash, size, build and push times),
   trusted only while the file is not newer than it and has its size; else from the
   image's own ``org.orchestrator.image`` label, parsed from the SIF's descriptors in
   those 64 KiB (no container runtime needed on the host; both are read by
   :mod:`~orchestrator.containers.identity`). A file whose name neither
   gives is "of unknown name" and refused the same way. The same name with other
   content (a newer build of the same image) is the usual update and goes ahead.
3. transfer to a hidden temporary name beside the final one, ``.NAME.part``, with
   ``rsync --inplace`` (which keeps what arrived when it is interrupted): the next push
   uses that file as the basis of rsync's delta transfer, so only what is missing
   crosses the network again. ``--ignore-times``: never trust a leftover's size and
   mtime, always let the checksums decide.
4. verify and commit: the sha256 of ``.NAME.part``, computed on the remote host, must
   equal the local one; it is given the mode an uninterrupted rsync gives a new file
   (the local image's mode less the remote umask: rsync writes into 0600 and sets the
   mode only when a transfer ends, and never touches an existing file's mode without
   ``-p``, so a part resumed after Ctrl-C would stay 0600, unreadable to the project
   group); then ``mv -f`` renames it over the final path, an atomic rename within one
   directory, and the record is written beside it (a temporary file and a rename). Jobs
   that have the old image open keep reading the old file. On a mismatch the temporary
   file is removed and :class:`ChecksumMismatch` raised; the final path is not touched.

A transfer that stops on a full disk (or quota) removes its partial file and says so
with its size; one that was interrupted keeps it for the next push to resume (see
``push_remote._Session.disk_full`` for why the two differ).

Each successful push (or a verified "nothing to push") is also recorded beside the
LOCAL image, in ``NAME.sif.pushes.json``: ``{target: {"sha256", "at", "name"}}``, which
``orchestrator container list`` shows (:func:`~orchestrator.containers.identity.record_push`).

The remote steps, and how their commands are quoted: :mod:`~orchestrator.containers.push_remote`.
Where the image goes and what may be replaced there: :mod:`~orchestrator.containers.push_target`.

The local image's sha256 is computed once, streaming, and cached beside the image in
``.NAME.sha256`` keyed by size, mtime and inode (the build writes it), so pushing a big
image again (the usual case: nothing changed) costs one remote hash and no local one.

A target without ``host:`` is a path on this machine: the image is copied there with
the same temporary name, guard, mode, verification, rename and record, in Python
(:mod:`~orchestrator.containers.push_local`).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

from orchestrator.containers import push_local, push_remote
from orchestrator.containers.identity import identify, record_push

# tests/integration/ssh/test_push_over_ssh.py still names these two as push.X: remove once it imports them from push_target.
from orchestrator.containers.push_target import ChecksumMismatch as ChecksumMismatch
from orchestrator.containers.push_target import OtherImageThere as OtherImageThere
from orchestrator.containers.push_target import PushResult, ShipError, parse_target
from orchestrator.util import files, ssh
from orchestrator.util.runner import Runner

# --- the local image and its sha256 -------------------------------------------------------


def cache_path(image: Path) -> Path:
    return files.sha256_cache_path(image)


def local_sha256(image: Path) -> str:
    """The image's sha256 (:func:`orchestrator.util.files.cached_sha256`: remembered beside it
    while its size, mtime and inode match; the build leaves it there)."""
    image = Path(image)
    _stat_image(image)
    try:
        return files.cached_sha256(image)
    except OSError as exc:
        raise ShipError(f"cannot read the image {image}: {exc.strerror or exc}") from exc


def _stat_image(image: Path) -> os.stat_result:
    try:
        st = image.stat()
    except FileNotFoundError:
        raise ShipError(f"the image {image} does not exist", hints=["build it first (`orchestrator container build`)"]) from None
    except OSError as exc:
        raise ShipError(f"cannot read the image {image}: {exc.strerror or exc}") from exc
    if not image.is_file():
        raise ShipError(f"the image {image} is not a file")
    return st


def push(
    image: Path,
    target: str,
    runner: Runner,
    *,
    ssh_options: Sequence[str] = (),
    say: Callable[[str], None] | None = None,
    replace_other_image: bool = False,
    interactive: bool | None = None,
) -> PushResult:
    """Make ``target`` (``[user@]host:/dir/name.sif`` or a local path) hold exactly ``image``.

    ``ssh_options`` are ssh's own (``-p 2222``, ``-i KEY``, ``-o Name=value``, ``-J jump``);
    they are given to every ssh, rsync and scp this runs, before the transport's own
    (:class:`orchestrator.util.ssh.Transport`; ``interactive``: whether a login may prompt,
    by default when stdin is a terminal). ``replace_other_image``: overwrite a file there
    that holds another image (or one of unknown name) instead of raising
    :class:`OtherImageThere`. Raises :class:`ShipError`.
    """
    image = Path(image).absolute()  # a path with ':' before any '/' would be a host to rsync
    t = parse_target(target)
    if isinstance(ssh_options, str):
        raise TypeError("ssh_options is a sequence of words, e.g. ['-p', '2222']")
    say = say or (lambda _: None)
    before = _stat_image(image)
    digest = local_sha256(image)
    ours = identify(image)
    if t.host is None:
        result = push_local.copy_here(image, t, target, digest, before, ours, replace_other_image, say)
    else:
        transport = ssh.Transport.here(interactive=interactive, extra=ssh_options)
        result = push_remote.push_remote(image, t, target, runner, transport, digest, before, ours, replace_other_image, say)
    record_push(image, target, digest, ours.name, say)
    return result
