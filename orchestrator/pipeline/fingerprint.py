"""Fingerprints: when two submissions are "the same job".

An item's fingerprint hashes its rendered script (command, resources, profile)
and its inputs. A source input counts by its DVC hash. An input that another
orchestrated item produces counts by *that item's fingerprint*, not by its
content: ``orchestrator submit`` queues a whole chain before any output exists,
and ``dvc repro`` afterwards, with the outputs in place, must compute the same
fingerprints to attach to those jobs instead of submitting them again.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from orchestrator.errors import PipelineError
from orchestrator.pipeline import stages


def digest(script: str, inputs: list[tuple[str, str]]) -> str:
    h = hashlib.sha256(script.encode())
    for path, value in sorted(inputs):
        h.update(f"\0{path}\0{value}".encode())
    return h.hexdigest()


def producers(root: Path) -> dict[str, str]:
    """Output path (relative to the root) -> the orchestrated item producing it (cached by
    :func:`stages.by_pipeline`)."""

    def compute() -> dict[str, str]:
        jobs, _ = stages.jobs(stages.resolve(root))
        return {os.path.normpath(os.path.join(j.item.wdir, out)): j.item.name for j in jobs for out in j.item.outs}

    return stages.by_pipeline(root, "producers", compute)


def producers_of(path: str, outputs: dict[str, str]) -> list[str]:
    """The items producing ``path``, a folder holding it, or outputs inside it."""
    return sorted({item for out, item in outputs.items() if out == path or path.startswith(out + "/") or out.startswith(path + "/")})


class DvcStages:
    """DVC's stages by name (``stages("lm@tiny")``), as ``repo.stage.collect`` finds them.

    Each dvc.yaml is read once, with its lock and params, and only the stages asked for are
    resolved: one item inside `dvc repro` asks for itself and its orchestrated ancestors, and
    `collect` re-reads the whole pipeline per call (five times for an LM item, most of
    `orchestrator run`'s own CPU; for every item of a 1,000-item matrix, quadratic).
    ``every_stage``: DVC's index of the whole project instead, for callers that have built it
    already (``repo.status``) or need every item anyway.
    """

    def __init__(self, repo, every_stage: bool = False) -> None:
        self.repo = repo
        self._stages = {s.addressing: s for s in repo.index.stages} if every_stage else {}
        self._files: dict[str, Any] = {}  # a dvc.yaml's path -> DVC's loader of its stages

    def __call__(self, name: str):
        if name not in self._stages:
            from dvc.dvcfile import load_file
            from dvc.utils import parse_target

            path, key = parse_target(name)
            file = self.repo.fs.abspath(path) if path else stages.PIPELINE_FILE  # as collect: a bare name is the project's
            if file not in self._files:
                self._files[file] = load_file(self.repo, file).stages
            self._stages[name] = self._files[file][key]
        return self._stages[name]


class Fingerprinter:
    """Fingerprints of items, computed through their orchestrated ancestors (memoised).

    ``script_of(name)`` renders an item's script; ``stage(name)`` is DVC's stage
    (:class:`DvcStages`), which supplies each item's dependencies and their hashes.
    """

    def __init__(self, root: Path, stage: Callable[[str], Any], script_of: Callable[[str], str], outputs: dict[str, str]) -> None:
        self.root = root
        self.stage = stage
        self.script_of = script_of
        self.outputs = outputs
        self._memo: dict[str, str] = {}

    def of(self, name: str, _chain: tuple[str, ...] = ()) -> str:
        if name in self._memo:
            return self._memo[name]
        if name in _chain:
            raise PipelineError(f"dependency cycle through {' -> '.join((*_chain, name))}")
        stage = self.stage(name)
        wdir = os.path.relpath(stage.wdir, self.root)
        inputs = []
        for dep in stage.deps:
            path = os.path.normpath(os.path.join(wdir, dep.def_path))
            upstream = [u for u in producers_of(path, self.outputs) if u != name]
            if upstream:
                inputs += [(path, "item:" + self.of(u, (*_chain, name))) for u in upstream]
            else:
                inputs.append((path, str(dep.get_hash())))
        self._memo[name] = digest(self.script_of(name), inputs)
        return self._memo[name]
