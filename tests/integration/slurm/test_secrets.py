"""Secrets are passed by environment-variable name: a job gets the value, and no file
the orchestrator writes (scripts, ledger, logs, provenance, DVC's lock) holds it."""

from __future__ import annotations

import hashlib
import secrets
import time
from pathlib import Path

import pytest
import yaml
from support import ACCOUNT, dvc, jobs_of, make_project

PROBE = """\
import hashlib, os, sys
os.makedirs(sys.argv[1], exist_ok=True)
token = os.environ["ORCH_TEST_TOKEN"]
open(os.path.join(sys.argv[1], "token.sha256"), "w").write(hashlib.sha256(token.encode()).hexdigest())
print("probe: got a token of", len(token), "characters")
"""


def secret_project(root: Path) -> Path:
    params = {"orchestrator": {"cluster": "testbed", "account": ACCOUNT, "secrets": ["ORCH_TEST_TOKEN"]}}
    stages = {
        "probe": {
            "cmd": "orchestrator run --nodes 2 --gpus-per-node 1 -- python probe.py out",
            "deps": ["probe.py"],
            "outs": [{"out": {"persist": True}}],
        }
    }
    project = make_project(root, dvc_yaml=yaml.safe_dump({"stages": stages}), params_yaml=yaml.safe_dump(params))
    (project / "probe.py").write_text(PROBE)
    return project


@pytest.mark.slurm
def test_a_secret_reaches_the_job_and_no_written_file(slurm_testbed, tmp_path):
    project = secret_project(tmp_path / "p")
    token = "tok-" + secrets.token_hex(16)
    done = dvc(project, "repro", env={"ORCH_TEST_TOKEN": token})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    # The job had it (both nodes ran the probe; the staged output came back) ...
    assert (project / "out/token.sha256").read_text() == hashlib.sha256(token.encode()).hexdigest()
    # ... and nothing written holds it: scripts, ledger, Slurm log, provenance, dvc.lock.
    written = [p for p in project.rglob("*") if p.is_file() and ".dvc/cache" not in str(p)]
    assert any(".orchestrator/logs" in str(p) for p in written) and any(p.name.endswith(".sbatch") for p in written)
    leaked = [str(p) for p in written if token.encode() in p.read_bytes()]
    assert leaked == []
    # Nothing we wrote may be changed by other users (scripts run as the job).
    ours = [p for p in (project / ".orchestrator").rglob("*")]
    assert [str(p) for p in ours if p.stat().st_mode & 0o002] == []
    script = next(p for p in written if p.name.endswith(".sbatch")).read_text()
    assert '"${ORCH_TEST_TOKEN:?' in script  # by name only


@pytest.mark.slurm
def test_a_missing_secret_stops_before_anything_is_submitted(slurm_testbed, tmp_path, monkeypatch):
    monkeypatch.delenv("ORCH_TEST_TOKEN", raising=False)
    project = secret_project(tmp_path / "p")
    since = time.time()
    done = dvc(project, "repro")
    assert done.returncode != 0
    assert "secret ORCH_TEST_TOKEN (orchestrator.secrets) is not set in this environment" in done.stderr + done.stdout
    assert "Traceback" not in done.stderr
    assert jobs_of(ACCOUNT, since, project) == []
