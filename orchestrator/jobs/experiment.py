"""DVC experiment copies: where a queued or temporary experiment's jobs are remembered.

``dvc exp run --queue``/``--temp`` runs an experiment in DVC's own copy of the project
(``.dvc/tmp/exps/<random>/``), and a second run of the same experiment (its worker
died, the login node rebooted) gets a new copy. The copy's own ledger would be gone
with it, and its scripts name the copy's path, so the second run would submit a second
job beside the first, still queued or running. Inside such a copy, then:

* the ledger lives in the project the experiment came from, one per experiment name
  (``DVC_EXP_NAME``, which DVC gives every queued and temporary experiment), so a re-run
  of the experiment finds its jobs, and two experiments never share (or adopt) a job;
* the fingerprint reads the copy's path as a placeholder, so the same experiment in
  another copy is the same job;
* a job that ran in an earlier copy is followed, and its outputs are brought from that
  copy when it has ended (:func:`orchestrator.jobs.submission.bring_outputs`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from orchestrator.scripts.job_environment import workspace_tag
from orchestrator.scripts.plan import safe_name

EXPS_DIR = ".orchestrator/exps"
PLACEHOLDER = "${ORCH_EXPERIMENT_COPY}"


@dataclass(frozen=True)
class ExperimentCopy:
    name: str  # DVC_EXP_NAME
    parent: Path  # the project the experiment came from (DVC_ROOT)
    root: Path  # this copy

    @property
    def ledger_dir(self) -> Path:
        return self.parent / EXPS_DIR / safe_name(self.name) / "ledger"

    def normalise(self, script: str) -> str:
        """The script as any copy of this experiment would render it: the copy's path (and
        the tag made from it) as a placeholder."""
        root = str(self.root)
        return script.replace(root, PLACEHOLDER).replace(workspace_tag(root), PLACEHOLDER)


def detect(root: Path) -> ExperimentCopy | None:
    """The experiment ``root`` is a DVC copy for, when it is one (below DVC_ROOT's ``.dvc/tmp/exps``)."""
    name, parent = os.environ.get("DVC_EXP_NAME"), os.environ.get("DVC_ROOT")
    if not name or not parent:
        return None
    exps = Path(parent).resolve() / ".dvc" / "tmp" / "exps"
    here = root.resolve()
    if exps not in here.parents:
        return None
    return ExperimentCopy(name, Path(parent).resolve(), here)
