"""`orchestrator fetch` against the loopback sshd: a "cluster" project folder (sent by `remote sync`,
its items' outputs made there and recorded with `dvc commit`, as a run leaves them) fetched into the
workstation clone over the session's ssh: `dvc status` clean for them, `dvc metrics show` lists the
metrics; a file changed there after the lock recorded it is refused and its entry not written; an
unknown target, a project never sent, an unreachable host: one message, exit 2. The `login` fixture:
conftest.py beside this."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml
from support import one_error

pytestmark = pytest.mark.ssh

GIT_ID = ["git", "-c", "user.name=Test", "-c", "user.email=test@example.com"]


def dvc(where: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["dvc", *args], cwd=where, capture_output=True, text=True, check=False)


def finish_there(folder: Path) -> list[str]:
    """Outputs of every probe item in the cluster's folder, with metrics, then `dvc commit`: its dvc.lock as after a run."""
    data = yaml.safe_load((folder / "params.yaml").read_text())
    for layout in data["layouts"]:
        out = folder / "out" / str(layout["i"])
        out.mkdir(parents=True)
        (out / "rank0.txt").write_text("done")
        (out / "metrics.json").write_text(json.dumps({"loss": 1.5 + layout["i"]}) + "\n")
        (out / "provenance.json").write_text("{}\n")
    done = dvc(folder, "commit", "-f", "probe")
    assert done.returncode == 0, done.stdout + done.stderr
    return list(yaml.safe_load((folder / "dvc.lock").read_text())["stages"])


def test_fetch_brings_outputs_and_lock_entries_and_skips_a_changed_file(login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj", items=3)
    pipeline = yaml.safe_load((project / "dvc.yaml").read_text())
    pipeline["metrics"] = [f"out/{i}/metrics.json" for i in range(3)]  # top-level: the files inside the items' out folders
    (project / "dvc.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    subprocess.run([*GIT_ID, "commit", "-q", "-am", "metrics"], cwd=project, check=True, capture_output=True)
    one_error(login.orchestrator("fetch", cwd=project), "nothing to fetch: no project folder", "orchestrator submit --remote")
    synced = login.orchestrator("remote", "sync", cwd=project)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    folder = login.cluster_root / "proj"
    one_error(login.orchestrator("fetch", cwd=project), "no dvc.lock in the project folder")
    items = finish_there(folder)
    assert len(items) == 3, items
    (folder / "out/2/metrics.json").write_text('{"loss": 0.0}\n')  # changed after the lock recorded it

    one_error(login.orchestrator("fetch", "nope", cwd=project), "unknown target(s): nope", "stages: probe")
    done = login.orchestrator("fetch", cwd=project)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text  # two fetched, one skipped: a later run's doing, no refusal
    assert "Traceback" not in text
    fetched = [line for line in done.stdout.splitlines() if line.startswith("fetched ")]
    assert len(fetched) == 2 and all("3 file(s)" in line for line in fetched), text
    assert "out/2: hash mismatch" in text and f"skipped {items[2]}: its files there are not those" in text, text

    lock = yaml.safe_load((project / "dvc.lock").read_text())["stages"]
    there = yaml.safe_load((folder / "dvc.lock").read_text())["stages"]
    assert sorted(lock) == sorted(items[:2]) == sorted(name for name in there if name != items[2])
    assert all(lock[name] == there[name] for name in lock)
    assert not (project / "out/2").exists()
    assert (project / "out/1/rank0.txt").read_text() == "done"
    status = dvc(project, "status", *lock, "--json")
    assert status.returncode == 0 and json.loads(status.stdout) == {}, status.stdout + status.stderr

    shown = dvc(project, "metrics", "show", "--json")
    assert '"loss": 1.5' in shown.stdout and '"loss": 2.5' in shown.stdout, shown.stdout + shown.stderr

    again = login.orchestrator("fetch", items[0], cwd=project)  # a second fetch of a fetched item: the same files, in place
    assert again.returncode == 0 and f"\nfetched {items[0]}: 3 file(s)" in again.stdout, again.stdout + again.stderr


def test_fetch_from_an_unreachable_host_is_one_message(login, tmp_path):
    project = login.workstation(tmp_path / "ws" / "proj")
    login.add_host("closed-port", "127.0.0.1", port=1)
    login.set_login_host(project, "closed-port")
    one_error(login.orchestrator("fetch", cwd=project), "cannot reach closed-port: the connection was refused")


def test_cached_outs_come_through_a_shared_dvc_remote_and_cache_false_ones_by_rsync(login, tmp_path):
    """A default DVC remote in the committed .dvc/config, in a folder both sides reach (the login node is
    this machine, as a shared file system is): the cluster pushes, this side pulls; the items' out folders
    are gone from the cluster's workspace (in its DVC cache only), so rsync could not have brought them."""
    project = login.workstation(tmp_path / "ws" / "proj", items=2)
    pipeline = yaml.safe_load((project / "dvc.yaml").read_text())
    pipeline["stages"]["probe"]["metrics"] = [{"m/${item.layout.i}.json": {"cache": False}}]
    (project / "dvc.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    store = tmp_path / "dvc-store"
    assert dvc(project, "remote", "add", "-d", "shared", str(store)).returncode == 0
    subprocess.run([*GIT_ID, "commit", "-q", "-am", "a shared DVC remote"], cwd=project, check=True, capture_output=True)
    synced = login.orchestrator("remote", "sync", cwd=project)
    assert synced.returncode == 0, synced.stdout + synced.stderr
    folder = login.cluster_root / "proj"
    (folder / "m").mkdir()
    for i in range(2):
        (folder / f"m/{i}.json").write_text(json.dumps({"loss": 0.5 + i}) + "\n")
    items = finish_there(folder)
    for i in range(2):
        subprocess.run(["rm", "-rf", str(folder / "out" / str(i))], check=True)

    done = login.orchestrator("fetch", cwd=project)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text
    fetched = sorted(line for line in done.stdout.splitlines() if line.startswith("fetched "))
    assert len(fetched) == 2, text
    for i, (name, line) in enumerate(zip(sorted(items), fetched, strict=True)):
        assert line.startswith(f"fetched {name}: 4 file(s), "), text
        assert line.endswith(f"(m/{i}.json by rsync; out/{i} through the DVC remote 'shared')"), text
    assert any(store.rglob("*.dir")), "nothing was pushed to the shared remote"
    assert (project / "out/1/rank0.txt").read_text() == "done" and json.loads((project / "m/1.json").read_text()) == {"loss": 1.5}
    status = dvc(project, "status", *items, "--json")
    assert status.returncode == 0 and json.loads(status.stdout) == {}, status.stdout + status.stderr
    ignored = subprocess.run(["git", "check-ignore", "out/0", "out/1", "m/0.json"], cwd=project, capture_output=True, text=True)
    assert ignored.stdout.split() == ["out/0", "out/1"], ignored.stdout + ignored.stderr  # DVC's entries; m/ is not DVC-cached
    assert (project / "out/.gitignore").read_text().splitlines() == ["/0", "/1"]
