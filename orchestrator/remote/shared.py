"""A DVC remote both sides reach: the road of cached outs for ``orchestrator fetch``.

Where the project's committed DVC config (``.dvc/config``, which travels with git, so the
cluster's copy names the same one) has a default remote (``dvc remote default NAME``),
cached outs go through it rather than rsync: deduplicated against what the remote holds
already, resumable, and readable by anyone else who clones the project.

1. there: ``orchestrator remote push NAME STAGE...`` (:func:`push`): those stages' cached
   outs from the cluster's DVC cache to the remote, with DVC's own transfer, run through the
   session with login.setup like every remote command;
2. here: exactly the objects the cluster's dvc.lock entries name, by hash (a folder's
   ``.dir`` listing and its files), copied from the remote into a throwaway object
   store (:class:`Puller`), then laid out as files in fetch's staging folder. From there
   they go through fetch's one verify-then-place path: hashed again, refused on a
   mismatch, the stage taken whole or not at all. Nothing reaches this side's DVC cache
   before it was verified, so a corrupt or tampered remote object cannot hide in it.

``cache: false`` outs (metrics, plots, provenance.json as the pipeline declares them) are
never in a DVC remote: they still come by rsync.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path

from orchestrator.remote.trust import MD5
from orchestrator.util.ssh import RemoteError


class SharedRemoteError(RemoteError):
    """The DVC remote the project names cannot be used from here (config, credentials, reach)."""


def default_remote(repo) -> str | None:
    """The default remote that the project's COMMITTED config names (``.dvc/config``): one the
    cluster sees too. A default set only in this side's config.local or user config is not
    shared, so it does not count; its URL and credentials may still come from there."""
    core = repo.config.read("repo").get("core") or {}
    name = core.get("remote")
    return str(name) if name else None


def push(project: Path, remote: str, stages: Sequence[str]) -> tuple[int, str | None]:
    """(On the cluster) the stages' cached outs from the DVC cache to the remote. Returns how many
    objects went and what failed (None: nothing): a stage whose objects did not all go is found
    out on the other side, object by object.

    Not ``dvc push STAGE...``: DVC collects each target named apart, which for the items of a
    1,000-item matrix parses dvc.yaml and dvc.lock a thousand times (minutes). Here the stages
    are resolved in one pass and their objects (a folder's ``.dir`` with its files) go in one
    transfer per hash kind, the objects the remote holds already skipped, as DVC's push does."""
    from dvc.exceptions import DvcException
    from dvc.repo import Repo
    from dvc_data.hashfile.transfer import transfer

    with Repo(str(project)) as repo:
        top = os.path.join(repo.root_dir, "dvc.yaml")
        by_name = {s.name: s for s in repo.index.stages if getattr(s, "dvcfile", None) and os.path.abspath(s.dvcfile.path) == top}
        unknown = [name for name in stages if name not in by_name]
        wanted: dict[str, set] = {}
        for name in stages:
            for out in by_name[name].outs if name in by_name else ():
                if out.use_cache and out.hash_info and out.hash_info.value:
                    wanted.setdefault(out.hash_info.name, set()).add(out.hash_info)
        count, failed = 0, 0
        try:
            for hash_name, ids in wanted.items():
                source = repo.cache.local if hash_name == "md5" else repo.cache.legacy
                result = transfer(source, repo.cloud.get_remote_odb(remote, "push", hash_name=hash_name), ids, shallow=False)
                count, failed = count + len(result.transferred), failed + len(result.failed)
        except DvcException as exc:
            return count, str(exc)
    problems = [f"no stage {', '.join(unknown)} in dvc.yaml here"] if unknown else []
    problems += [f"{failed} object(s) failed to go (missing from the cache here?)"] if failed else []
    return count, "; ".join(problems) or None


class Puller:
    """Objects by hash from the remote ``name`` of ``repo`` into a throwaway store under ``into``,
    and files laid out from them."""

    def __init__(self, repo, name: str, into: Path) -> None:
        from dvc_data.hashfile.db.local import LocalHashFileDB
        from dvc_objects.fs.local import LocalFileSystem

        self.repo, self.name = repo, name
        fs = LocalFileSystem()
        # verify=False: the objects are hashed once, as files laid out, by fetch's check, whose refusal names the out
        self._stores = {h: LocalHashFileDB(fs, str(into / h), hash_name=h, verify=False) for h in ("md5", "md5-dos2unix")}
        self._remotes: dict[str, object] = {}

    def _remote(self, hash_name: str):
        from dvc.exceptions import DvcException

        if hash_name not in self._remotes:
            try:  # DVC 3 entries live under files/md5/ there, DVC 2 ones (md5-dos2unix) at its top
                self._remotes[hash_name] = self.repo.cloud.get_remote_odb(self.name, "fetch", hash_name=hash_name)
            except DvcException as exc:
                raise SharedRemoteError(
                    f"the project's DVC remote {self.name!r} cannot be used from here: {exc}",
                    hints=["check it: dvc remote list; dvc status -c", "credentials go in .dvc/config.local (dvc remote modify --local)"],
                ) from exc
        return self._remotes[hash_name]

    def pull(self, objects: Iterable[tuple[str, str]]) -> None:
        """Copy the objects ``(hash_name, md5)`` (a folder's ``.dir`` with its files) that the
        remote has into the store; the ones it lacks are found missing when laid out."""
        from dvc.exceptions import DvcException
        from dvc_data.hashfile.hash_info import HashInfo
        from dvc_data.hashfile.transfer import transfer
        from dvc_objects.errors import ObjectFormatError

        wanted: dict[str, set] = {}
        for hash_name, md5 in objects:
            wanted.setdefault(hash_name, set()).add(HashInfo(hash_name, md5))
        for hash_name, ids in wanted.items():
            store, remote = self._stores[hash_name], self._remote(hash_name)
            for hash_info in sorted(ids, key=str):  # one by one: an object the remote lacks stops only its own
                try:
                    transfer(remote, store, {hash_info}, shallow=False)
                except (OSError, ObjectFormatError, DvcException):
                    continue

    def lay_out(self, hash_name: str, md5: str, dest: Path) -> bool:
        """The file (or folder, for a ``.dir`` hash) ``md5`` as plain files at ``dest``; False when
        an object of it is not there (not pushed, or the remote lacks it)."""
        from dvc_data.hashfile.hash_info import HashInfo
        from dvc_data.hashfile.tree import Tree
        from dvc_objects.errors import ObjectFormatError

        store = self._stores[hash_name]
        try:
            if not md5.endswith(".dir"):
                return _copy(Path(store.oid_to_path(md5)), dest)
            tree = Tree.load(store, HashInfo(hash_name, md5))
        except (FileNotFoundError, ObjectFormatError):
            return False
        files = [(key, hi) for key, _, hi in tree]
        if not all(_inside(key) and MD5.fullmatch(str(hi.value)) for key, hi in files):
            return False  # a listing naming a file outside its folder (the cluster wrote it): nothing laid out
        dest.mkdir(parents=True, exist_ok=True)
        return all(_copy(Path(store.oid_to_path(hi.value)), dest.joinpath(*key)) for key, hi in files)


def _inside(key: tuple) -> bool:
    """A ``.dir`` listing's path, split: one that stays inside the folder it lists."""
    return bool(key) and all(isinstance(part, str) and part not in ("", ".", "..") and "/" not in part and "\0" not in part for part in key)


def _copy(src: Path, dst: Path) -> bool:
    if not src.is_file():
        return False
    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dst)  # not the store's read-only mode: these become workspace files
    return True
