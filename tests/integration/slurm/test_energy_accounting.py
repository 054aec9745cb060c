"""Energy from Slurm's accounting (orchestrator/analysis/energy.py) on the real testbed: what
sacct records for a job, and never a 0 passed off as a measurement."""

from __future__ import annotations

import subprocess
import time

import pytest

from orchestrator.analysis import energy
from orchestrator.slurm import config as slurm_config


@pytest.mark.slurm
def test_accounting_path_on_the_testbed(slurm_testbed, tmp_path):
    from orchestrator.util.runner import SubprocessRunner

    argv = [
        "sbatch",
        "--parsable",
        "-A",
        "project_465000858",
        "-p",
        "debug",
        "-N",
        "1",
        "-n",
        "1",
        "-t",
        "1",
        f"--chdir={tmp_path}",
        "--output=/dev/null",
        "--wrap",
        "sleep 1",
    ]
    job = subprocess.run(argv, capture_output=True, text=True, check=True).stdout.strip().split(";")[0]
    runner = SubprocessRunner()
    deadline = time.monotonic() + 120
    while True:
        acct = energy.query_accounting(runner, [job])
        runs = acct.jobs.get(job, ())
        if runs and runs[-1].state == "COMPLETED":
            break
        assert time.monotonic() < deadline, f"job {job} did not complete: {runs}"
        time.sleep(1)
    config = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, check=True).stdout
    assert acct.problem is None and acct.cluster_name == "testbed"
    assert acct.plugin == slurm_config.parse_config_value(config, "AcctGatherEnergyType")
    joules, note = energy.from_accounting(acct, job)
    chosen = energy.choose((joules, note), (None, "no samples"), (None, "no power_w"), acct.plugin)
    if acct.records_energy and all((r.energy_j or 0) > 0 for r in runs):
        assert joules == sum(r.energy_j for r in runs) and chosen.source == "accounting"
    else:
        # The testbed has no energy plugin: sacct prints 0 or nothing, which must not pass for a measurement.
        assert joules is None and chosen.source != "accounting" and chosen.kwh is None
        assert "no energy" in note
