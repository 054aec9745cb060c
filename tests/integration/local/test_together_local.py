"""`orchestrator run --together` on the local profile: `dvc repro` runs a stage's items as
parallel processes (as many as the cores hold), each once, and records them all."""

from __future__ import annotations

import json
import os
import subprocess

import yaml
from support import dvc, make_project, skip_or_fail

# Each item notes when it started and ended (one short O_APPEND write per item), sleeps,
# and writes its output.
WORK = """\
import json, os, sys, time
item = sys.argv[1]
start = time.time()
time.sleep(2)
with open({runs!r}, "a") as f:
    f.write(json.dumps([item, start, time.time()]) + "\\n")
os.makedirs("out", exist_ok=True)
open(f"out/{{item}}", "w").write("done")
"""


def project_of(where, count: int, together: bool = True):
    flag = " --together" if together else ""
    stages = {
        "work": {
            "matrix": {"i": list(range(count))},
            "cmd": f"orchestrator run --cpus 1{flag} -- python3 work.py ${{item.i}}",
            "deps": ["work.py"],
            "outs": [{"out/${item.i}": {"persist": True}}],
        }
    }
    params = {"orchestrator": {"cluster": "local"}}
    project = make_project(where, dvc_yaml=yaml.safe_dump({"stages": stages}), params_yaml=yaml.safe_dump(params))
    (project / "work.py").write_text(WORK.format(runs=str(where / "runs.log")))
    return project


def runs(where) -> list[list]:
    path = where / "runs.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_stage_runs_together_in_parallel_processes_each_item_once(tmp_path):
    cores = len(os.sched_getaffinity(0))
    if cores < 2:
        skip_or_fail("two items at once need two cores")
    project = project_of(tmp_path / "p", 4)
    done = dvc(project, "repro", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"running 4 items of work here, {min(cores, 4)} at a time" in done.stdout + done.stderr
    ran = runs(tmp_path / "p")
    assert sorted(r[0] for r in ran) == ["0", "1", "2", "3"]  # each once
    spans = sorted((r[1], r[2]) for r in ran)
    assert any(b_start < a_end for (_, a_end), (b_start, _) in zip(spans, spans[1:], strict=False)), spans  # some overlapped
    assert all((project / f"out/{i}").read_text() == "done" for i in range(4))
    status = dvc(project, "status")
    assert "up to date" in status.stdout, status.stdout
    again = dvc(project, "repro")
    assert again.returncode == 0 and len(runs(tmp_path / "p")) == 4  # nothing ran again


def test_a_failed_item_fails_its_stage_and_alone_runs_again(tmp_path):
    """The failed item is tried again when DVC reaches it (and fails the stage); the next
    `dvc repro` runs it alone: the others' jobs succeeded with their outputs there."""
    project = project_of(tmp_path / "p", 3)
    work = project / "work.py"
    fail_once = "item = sys.argv[1]\nif item == '1' and not os.path.exists('ok'): sys.exit(3)"
    work.write_text(work.read_text().replace("item = sys.argv[1]", fail_once))
    failed = dvc(project, "repro", timeout=600)
    assert failed.returncode != 0
    assert "work@1" in failed.stdout + failed.stderr
    assert sorted(r[0] for r in runs(tmp_path / "p")) == ["0", "2"]
    (project / "ok").write_text("")  # not a dep: the same script and inputs, run again
    done = dvc(project, "repro", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(r[0] for r in runs(tmp_path / "p")) == ["0", "1", "2"]  # only the failed one again
    assert subprocess.run(["dvc", "status"], cwd=project, capture_output=True, text=True).stdout.strip().endswith("up to date.")
