"""Real image pushes (orchestrator/containers/push.py) over ssh + rsync to an sshd on loopback
(the ``sshd`` fixture; marked ssh): sent once then skipped, killed and resumed (with the mode of
an uninterrupted push), a stale partial, the guard against another image, a full disk (a small
tmpfs), a corrupted transfer, an unreachable port, a wrong key, a directory that cannot be made, scp."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import stat
import subprocess
import time
from pathlib import Path

import pytest
from fakes import CorruptingRunner, KillingRunner, NoRsyncRunner
from support import HOSTILE_DIR, sha, skip_or_fail

from orchestrator.containers import push
from orchestrator.util import ssh
from orchestrator.util.runner import SubprocessRunner

BIG = 20 << 20

SMALL = 2 << 20


def make_image(where: Path, size: int, name: str | None = None) -> Path:
    """Random bytes; with ``name``, a build stamp beside them naming the image (as `container build` writes)."""
    path = where / "build" / "img.sif"
    path.parent.mkdir(parents=True)
    path.write_bytes(os.urandom(size))
    if name is not None:
        from orchestrator.containers import build

        st = path.stat()
        stamp = {
            "version": build.STAMP_VERSION,
            "name": name,
            "content_hash": f"sha256:{name[0] * 64}",
            "built_at": "2026-11-20T10:00:00+0100",
        }
        build.stamp_path(path).write_text(json.dumps(stamp | {"size": st.st_size, "mtime_ns": st.st_mtime_ns}))
    return path


@pytest.fixture
def big_image(tmp_path) -> Path:
    return make_image(tmp_path, BIG)


@pytest.fixture
def small_image(tmp_path) -> Path:
    """For the tests whose point is not the size: each ssh here costs the remote login shell's start-up."""
    return make_image(tmp_path, SMALL)


@pytest.fixture(autouse=True)
def no_master_left(sshd):
    """A push leaves its master connection for ten idle minutes: ended after each test, so the
    next one logs in afresh (a wrong key would otherwise ride on the master of a right one)."""
    yield
    stop = ["ssh", *sshd.options, "-o", f"ControlPath={ssh.CONTROL_PATH}", "-O", "exit", "--", sshd.host]
    subprocess.run(stop, capture_output=True, timeout=30, check=False)


def target(sshd, path: Path) -> str:
    return f"{sshd.host}:{path}"


@pytest.mark.ssh
def test_push_over_ssh_then_again_transfers_nothing(sshd, big_image, tmp_path):
    remote_dir = tmp_path / "remote" / HOSTILE_DIR
    final = remote_dir / "img.sif"
    runner = SubprocessRunner()
    # The key in a folder rsync's -e must keep in one word: its own quoting, not a shell's.
    key = tmp_path / "keys with space 'q'" / "id"
    key.parent.mkdir()
    shutil.copy(sshd.key, key)
    options = [str(key) if o == str(sshd.key) else o for o in sshd.options]
    start = time.monotonic()
    first = push.push(big_image, target(sshd, final), runner, ssh_options=options)
    took = time.monotonic() - start
    assert first.transferred and first.method == "rsync"
    assert first.bytes_transferred == BIG and first.sha256 == sha(big_image) == sha(final)
    assert first.remote_path == str(final)
    assert sorted(p.name for p in remote_dir.iterdir()) == ["img.sif", "img.sif.orchestrator.json"]
    sidecar = json.loads((remote_dir / "img.sif.orchestrator.json").read_text())
    assert (sidecar["sha256"], sidecar["size"]) == (sha(big_image), BIG)

    second = push.push(big_image, target(sshd, final), runner, ssh_options=sshd.options)
    assert (second.transferred, second.bytes_transferred, second.method) == (False, 0, "skip")
    assert sha(final) == sha(big_image)
    home = Path(pwd.getpwuid(os.geteuid()).pw_dir)
    assert not (home / "ship-canary").exists() and not list(tmp_path.rglob("ship-canary"))
    assert took < 15, took


def settle(path: Path) -> int:
    """The size of ``path`` once the remote rsync stopped writing it."""
    size, still = -1, 0
    deadline = time.monotonic() + 5
    while still < 3 and time.monotonic() < deadline:
        now = path.stat().st_size
        still = still + 1 if now == size else 0
        size = now
        time.sleep(0.1)
    return size


@pytest.mark.ssh
def test_a_push_logs_in_once(sshd, small_image, tmp_path):
    """Probe, rsync and commit ride on one master connection: one login, however many connections
    (a second factor is asked for once); the master stays for the next push or remote command."""

    def logins() -> int:
        return sshd.log.read_text(errors="replace").count("Accepted publickey")

    before = logins()
    result = push.push(small_image, target(sshd, tmp_path / "remote" / "img.sif"), SubprocessRunner(), ssh_options=sshd.options)
    assert result.transferred and result.method == "rsync"
    deadline = time.monotonic() + 5
    while logins() == before and time.monotonic() < deadline:  # sshd writes its log as it goes
        time.sleep(0.05)
    assert logins() - before == 1
    check = ["ssh", *sshd.options, "-o", f"ControlPath={ssh.CONTROL_PATH}", "-O", "check", "--", sshd.host]
    assert subprocess.run(check, capture_output=True, timeout=30, check=False).returncode == 0


@pytest.mark.ssh
def test_killed_push_leaves_nothing_at_the_final_path_and_resumes(sshd, big_image, tmp_path):
    remote_dir = tmp_path / "remote dir"
    final, part = remote_dir / "img.sif", remote_dir / ".img.sif.part"
    killer = KillingRunner(part, kill_at=4 << 20)
    with pytest.raises(push.ShipError, match="interrupted") as err:
        push.push(big_image, target(sshd, final), killer, ssh_options=sshd.options)
    assert killer.killed_at, f"rsync finished before it could be killed: {err.value}"
    assert not final.exists()
    arrived = settle(part)
    assert 0 < arrived < BIG

    assert stat.S_IMODE(part.stat().st_mode) == 0o600  # what rsync leaves while it writes: the cause of the 0600 below

    result = push.push(big_image, target(sshd, final), SubprocessRunner(), ssh_options=sshd.options)
    assert result.transferred and result.resumed_from == arrived, (result, arrived)
    print(f"killed at {killer.killed_at:,} bytes, {arrived:,} kept, resumed sending {result.bytes_transferred:,} of {BIG:,}")
    assert result.bytes_transferred <= BIG - arrived + (1 << 20)  # only the rest crossed again
    assert sha(final) == sha(big_image) and not part.exists()

    # The same mode as a push that was never interrupted: group- and world-readable as the
    # local image is (0644 less the remote umask), not rsync's 0600 of the partial file.
    uninterrupted = tmp_path / "uninterrupted" / "img.sif"
    push.push(big_image, target(sshd, uninterrupted), SubprocessRunner(), ssh_options=sshd.options)
    modes = stat.S_IMODE(final.stat().st_mode), stat.S_IMODE(uninterrupted.stat().st_mode)
    assert modes[0] == modes[1] and modes[0] & stat.S_IRGRP, [oct(m) for m in modes]


@pytest.mark.ssh
def test_a_stale_partial_of_another_image_does_not_matter(sshd, small_image, tmp_path):
    remote_dir = tmp_path / "remote"
    remote_dir.mkdir()
    (remote_dir / ".img.sif.part").write_bytes(os.urandom(SMALL + 12345))  # larger and different
    (remote_dir / "img.sif").write_bytes(b"an older image")  # of unknown name: replaced only when asked
    options = {"ssh_options": sshd.options, "replace_other_image": True}
    result = push.push(small_image, target(sshd, remote_dir / "img.sif"), SubprocessRunner(), **options)
    assert result.transferred and sha(remote_dir / "img.sif") == sha(small_image)
    assert sorted(p.name for p in remote_dir.iterdir()) == ["img.sif", "img.sif.orchestrator.json"]


@pytest.mark.ssh
def test_guard_refuses_another_image_and_lets_the_same_one_through(sshd, tmp_path):
    final = tmp_path / "remote" / HOSTILE_DIR / "img.sif"
    where = target(sshd, final)
    ci = make_image(tmp_path / "ci", SMALL, "ci")
    push.push(ci, where, SubprocessRunner(), ssh_options=sshd.options)
    lumi = make_image(tmp_path / "lumi", SMALL, "lumi")
    with pytest.raises(push.OtherImageThere) as err:
        push.push(lumi, where, SubprocessRunner(), ssh_options=sshd.options)
    assert str(err.value) == (
        f"{where} holds image 'ci' (built 2026-11-20T10:00:00+0100, content sha256:cccccccccccc), you gave 'lumi'; "
        "pass --replace-other-image to overwrite"
    )
    assert err.value.exit_code == 2 and sha(final) == sha(ci) and not (final.parent / ".img.sif.part").exists()
    newer_ci = make_image(tmp_path / "ci2", SMALL, "ci")  # a new build of the same image: the usual update
    assert push.push(newer_ci, where, SubprocessRunner(), ssh_options=sshd.options).transferred and sha(final) == sha(newer_ci)
    replaced = push.push(lumi, where, SubprocessRunner(), ssh_options=sshd.options, replace_other_image=True)
    assert replaced.transferred and sha(final) == sha(lumi)
    assert json.loads(Path(f"{final}.orchestrator.json").read_text())["name"] == "lumi"
    Path(f"{final}.orchestrator.json").unlink()  # no record and no label in random bytes: unknown, refused
    with pytest.raises(push.OtherImageThere, match="holds an image of unknown name"):
        push.push(newer_ci, where, SubprocessRunner(), ssh_options=sshd.options)
    assert sha(final) == sha(lumi)
    assert not list(tmp_path.rglob("ship-canary"))


@pytest.mark.ssh
def test_full_disk_names_the_partial_file_and_removes_it(sshd, tmp_path):
    """A 2 MiB tmpfs as the remote folder, an image of 3 MiB: rsync stops on ENOSPC."""
    image = make_image(tmp_path, 3 << 20, "ci")
    full = tmp_path / "full"
    full.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(full)], capture_output=True, text=True, check=False)
    if mounted.returncode != 0:
        skip_or_fail(f"cannot mount a small tmpfs (needs root): {mounted.stderr.strip()}")
    try:
        final, part = full / "img.sif", full / ".img.sif.part"
        with pytest.raises(push.ShipError) as err:
            push.push(image, target(sshd, final), SubprocessRunner(), ssh_options=sshd.options)
        headline = str(err.value).splitlines()[0]
        assert headline.startswith(
            f"push of {image} to {sshd.host}:{final} failed: no space left on the device of {full}: the partial file {part} ("
        ), headline
        assert headline.endswith(" bytes) was removed (3 problems):"), headline
        kept = int(headline.split(f"{part} (")[1].split(" bytes")[0].replace(",", ""))
        assert 1 << 20 < kept <= 2 << 20  # it filled the disk
        assert "No space left on device" in str(err.value) and "make room for the image's 3,145,728 bytes there" in str(err.value)
        assert list(full.iterdir()) == []  # nothing installed, the space given back
    finally:
        subprocess.run(["umount", str(full)], check=True)


@pytest.mark.ssh
def test_checksum_mismatch_over_ssh_installs_nothing(sshd, small_image, tmp_path):
    remote_dir = tmp_path / "remote"
    final, part = remote_dir / "img.sif", remote_dir / ".img.sif.part"
    remote_dir.mkdir()
    final.write_bytes(b"the image jobs use now")
    with pytest.raises(push.ChecksumMismatch, match="checksum mismatch"):
        push.push(small_image, target(sshd, final), CorruptingRunner(part), ssh_options=sshd.options, replace_other_image=True)
    assert final.read_bytes() == b"the image jobs use now" and not part.exists()


@pytest.mark.ssh
def test_unreachable_port_is_one_clear_error(sshd, small_image, tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    options = [o if o != str(sshd.port) else str(closed) for o in sshd.options]
    final = tmp_path / "remote" / "img.sif"
    with pytest.raises(push.ShipError) as err:
        push.push(small_image, target(sshd, final), SubprocessRunner(), ssh_options=options)
    text = str(err.value)
    assert text.startswith(f"push of {small_image} to {sshd.host}:{final} failed: cannot reach {sshd.host} over ssh")
    assert "Connection refused" in text and "command (exit 255): ssh " in text
    assert not final.exists()


@pytest.mark.ssh
def test_wrong_key_is_a_refused_login(sshd, small_image, tmp_path):
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    options = [o if o != str(sshd.key) else str(other) for o in sshd.options]
    with pytest.raises(push.ShipError, match=f"{sshd.host} refused the ssh login"):
        push.push(small_image, target(sshd, tmp_path / "r" / "img.sif"), SubprocessRunner(), ssh_options=options)


@pytest.mark.ssh
def test_remote_directory_that_cannot_be_made(sshd, small_image, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with pytest.raises(push.ShipError, match="cannot create the remote directory") as err:
        push.push(small_image, target(sshd, blocker / "sub" / "img.sif"), SubprocessRunner(), ssh_options=sshd.options)
    assert "Not a directory" in str(err.value)


@pytest.mark.ssh
def test_scp_fallback_over_ssh(sshd, small_image, tmp_path):
    final = tmp_path / "remote-scp" / "img.sif"
    runner = NoRsyncRunner()
    result = push.push(small_image, target(sshd, final), runner, ssh_options=sshd.options)
    assert (result.method, result.bytes_transferred) == ("scp", SMALL) and sha(final) == sha(small_image)
    again = push.push(small_image, target(sshd, final), runner, ssh_options=sshd.options)
    assert again.method == "skip"
