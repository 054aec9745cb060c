"""dvc.lock cut short as a `dvc repro` killed while DVC dumped it leaves it, on the local
profile with real DVC: at each class of byte offset (nothing written yet, mid-key, mid-value,
between stages), the way the guarantees page gives (`orchestrator record` where DVC cannot
read the file, then `dvc repro`) ends with every item recorded once and nothing run again:
the last item from the ledger, the plain stage not rerun, one job per item."""

from __future__ import annotations

import pytest
import yaml
from support import dvc, make_project, run_orchestrator

from orchestrator.jobs import ledger
from orchestrator.pipeline import dvcfiles

NAMES = ["a", "b"]
# Each command appends a line to runs/ (not an output: DVC neither deletes nor hashes it),
# so a line too many is a stage that ran again.
WORK = """\
import os, sys
name = sys.argv[1]
os.makedirs(f"out/{name}", exist_ok=True)
open(f"out/{name}/x.txt", "w").write(name)
open(f"runs/{name}.log", "a").write("ran\\n")
"""
PIPELINE = {
    "stages": {
        "prep": {
            "cmd": "python3 -c \"open('prep.txt', 'w').write('p'); open('runs/prep.log', 'a').write('ran\\n')\"",
            "outs": ["prep.txt"],
        },
        "work": {
            "matrix": {"name": "${items}"},
            "cmd": "orchestrator run -- python3 work.py ${item.name}",
            "deps": ["work.py", "prep.txt"],
            "outs": [{"out/${item.name}": {"persist": True}}],
        },
    }
}
LAST = f"work@{NAMES[-1]}"


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A project after one whole `dvc repro`: (it, dvc.lock as DVC wrote it last, the copy the
    tool kept as the last item started)."""
    params = {"orchestrator": {"cluster": "local"}, "items": NAMES}
    pipeline = yaml.safe_dump(PIPELINE, sort_keys=False)
    project = make_project(tmp_path_factory.mktemp("cut"), dvc_yaml=pipeline, params_yaml=yaml.safe_dump(params))
    (project / "work.py").write_text(WORK)
    (project / "runs").mkdir()
    done = dvc(project, "repro")
    assert done.returncode == 0, done.stdout + done.stderr
    lock = (project / "dvc.lock").read_text()
    kept = (project / dvcfiles.KEPT_DIR / "dvc.lock").read_text()
    # The copy is the lock the last item's `orchestrator run` found: everything but that item.
    assert list(yaml.safe_load(kept)["stages"]) == ["prep", *(f"work@{n}" for n in NAMES[:-1])]
    return project, lock, kept


def offset(text: str, where: str) -> int:
    stage = text.index(f"  {LAST}:")
    if where == "empty":
        return 0
    if where == "mid-key":
        return stage + 6
    if where == "between stages":
        return stage
    outs = text.index("outs:", stage)
    if where == "mid-value, cut to nothing":  # the last item's output size: no value, which DVC refuses
        return text.index("size: ", outs) + len("size: ")
    return text.index("md5: ", outs) + len("md5: ") + 10  # inside the last item's output hash: DVC reads a changed hash


@pytest.mark.parametrize("where", ["empty", "mid-key", "mid-value, cut to nothing", "mid-value, inside a hash", "between stages"])
def test_a_cut_dvc_lock_is_mended_and_nothing_runs_again(finished, where):
    project, whole, kept = finished
    (project / "dvc.lock").write_text(whole[: offset(whole, where)])
    (project / dvcfiles.KEPT_DIR / "dvc.lock").write_text(kept)
    readable = dvcfiles.lock_problem((project / "dvc.lock").read_text()) is None
    assert readable == (where in ("mid-value, inside a hash", "between stages"))  # both kinds of cut are met
    mends = 0
    first = dvc(project, "repro")
    if first.returncode != 0:
        # DVC's own words, which the guarantees page lists; every orchestrator command says more.
        said = first.stdout + first.stderr
        assert not readable and ("dvc.lock" in said or "Could not find expected" in said), said
        refused = run_orchestrator("exp", "run", "--cluster", "local", cwd=project)
        assert refused.returncode == 2 and "run `orchestrator record`" in refused.stderr, refused.stderr
        mended = run_orchestrator("record", cwd=project)
        assert mended.returncode == 0, mended.stdout + mended.stderr
        assert "could not be read" in mended.stdout and "put back the last readable copy" in mended.stdout, mended.stdout
        assert f"{LAST}  recorded" in mended.stdout, mended.stdout  # finished after the copy: from the ledger
        mends += 1
        again = dvc(project, "repro")
        assert again.returncode == 0, again.stdout + again.stderr
    assert mends == (0 if readable else 1)
    assert dvc(project, "status").stdout.strip() == "Data and pipelines are up to date."
    lock = yaml.safe_load((project / "dvc.lock").read_text())
    assert list(lock["stages"]) == ["prep", *(f"work@{n}" for n in NAMES)]
    for name in ["prep", *NAMES]:
        assert (project / f"runs/{name}.log").read_text() == "ran\n", f"{name} ran again"
    book = ledger.Ledger(project)
    assert {n: len(book.records(f"work@{n}")) for n in NAMES} == dict.fromkeys(NAMES, 1)
