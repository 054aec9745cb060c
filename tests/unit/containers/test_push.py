"""Pushing an image to a cluster (orchestrator/containers/push.py): argv and quoting, error
mapping, skipping, with a FakeRunner. Real pushes over ssh + rsync to an sshd on loopback:
tests/integration/ssh/test_push_over_ssh.py."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
from fakes import FakeRunner, ok
from support import HOSTILE_DIR, sha

from orchestrator.containers import push
from orchestrator.util.runner import Completed

STATS = """
Number of files: 1 (reg: 1)
Number of regular files transferred: 1
Total file size: 20,971,520 bytes
Total transferred file size: 20,971,520 bytes
Literal data: 20,971,520 bytes
Matched data: 0 bytes
Total bytes sent: 20,976,736
"""


@pytest.fixture
def image(tmp_path) -> Path:
    path = tmp_path / "build" / "img.sif"
    path.parent.mkdir()
    path.write_bytes(os.urandom(1 << 16))
    return path


def remote_command(argv) -> list[str]:
    """What the remote login shell runs for an ssh argv: its last word, split as a shell would."""
    assert argv[0] == "ssh"
    return shlex.split(argv[-1])


def fake_remote(
    probe: Completed | None = None, commit: Completed | None = None, rsync: Completed | None = None, installed=("ssh", "rsync")
):
    """A FakeRunner answering ssh by which of our scripts it runs."""

    def ssh(argv):
        words = remote_command(argv)
        if words[2] == push.PROBE_SCRIPT:
            return dataclasses.replace(probe or ok()(argv), argv=tuple(argv))
        assert words[2] == push.COMMIT_SCRIPT
        expected = words[-1]
        return dataclasses.replace(commit or ok(f"orchestrator-ship: sha256 {expected}\n")(argv), argv=tuple(argv))

    def run_rsync(argv):
        return dataclasses.replace(rsync or ok(STATS)(argv), argv=tuple(argv))

    answers = {"ssh": ssh, "rsync": run_rsync, "scp": ok()}
    return FakeRunner(answers=answers, installed=set(installed))


# --- targets -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "target, host, path",
    [
        ("alice@lumi.csc.fi:/project/p1/containers/o.sif", "alice@lumi.csc.fi", "/project/p1/containers/o.sif"),
        ("lumi:containers/o.sif", "lumi", "./containers/o.sif"),
        ("lumi:~/o.sif", "lumi", "./o.sif"),
        ("lumi:-rf.sif", "lumi", "./-rf.sif"),
        ("u@[::1]:/x/o.sif", "u@::1", "/x/o.sif"),
        ("/abs/o.sif", None, "/abs/o.sif"),
        ("./with:colon/o.sif", None, "./with:colon/o.sif"),
        ("rel/o.sif", None, "rel/o.sif"),
    ],
)
def test_parse_target(target, host, path):
    t = push.parse_target(target)
    assert (t.host, t.path) == (host, path)
    assert t.part == f"{t.directory}/.{t.name}.part"


def test_ipv6_target_keeps_brackets_for_rsync():
    t = push.parse_target("u@[::1]:/x/o.sif")
    assert t.rsync_host == "u@[::1]" and t.host == "u@::1"


@pytest.mark.parametrize(
    "target, message",
    [
        ("", "no push target"),
        ("host:/dir/", "does not name a file"),
        ("host:", "does not name a file"),
        ("-oProxyCommand=x:/a.sif", "cannot start with '-'"),
        ("host:/a\nb.sif", "control characters"),
        ("host:~bob/a.sif", "only ~/"),
    ],
)
def test_bad_targets(target, message):
    with pytest.raises(push.ShipError, match=message):
        push.parse_target(target)


def test_local_directory_target_is_refused(tmp_path):
    with pytest.raises(push.ShipError, match="is a directory"):
        push.parse_target(str(tmp_path))


def test_remote_image_path_fills_in_profile_templates():
    template = "/project/${SLURM_JOB_ACCOUNT}/${USER}/orchestrator.sif"
    assert push.remote_image_path(template, {"SLURM_JOB_ACCOUNT": "p1", "USER": "al"}) == "/project/p1/al/orchestrator.sif"
    with pytest.raises(push.ShipError, match="SLURM_JOB_ACCOUNT"):
        push.remote_image_path(template, {"USER": "al"})


# --- the local sha256 and its cache ------------------------------------------------------------


def test_local_sha256_is_cached_by_size_and_mtime(image, monkeypatch):
    digest = push.local_sha256(image)
    assert digest == sha(image)
    assert push.cache_path(image).read_text().split()[0] == digest
    monkeypatch.setattr(push, "sha256_file", lambda p: pytest.fail("hashed again although the image did not change"))
    assert push.local_sha256(image) == digest
    monkeypatch.undo()
    image.write_bytes(b"new image")  # new size and mtime
    assert push.local_sha256(image) == hashlib.sha256(b"new image").hexdigest()


def test_missing_image_is_one_clear_error(tmp_path):
    runner = fake_remote()
    with pytest.raises(push.ShipError, match=r"the image .*nope.sif does not exist") as err:
        push.push(tmp_path / "nope.sif", "host:/x/img.sif", runner)
    assert runner.calls == []
    assert err.value.exit_code != 0


# --- argv and quoting --------------------------------------------------------------------------


def test_argv_is_built_and_every_remote_word_quoted(image):
    remote_dir = f"/scratch/{HOSTILE_DIR}"
    runner = fake_remote()
    opts = ["-p", "2222", "-i", "/keys/my key", "-o", "ProxyJump=jump host"]
    result = push.push(image, f"al@lumi:{remote_dir}/img.sif", runner, ssh_options=opts)

    probe, rsync, commit = runner.calls
    size = image.stat().st_size
    digest = sha(image)
    # ssh: options, "--", the host, and ONE command string whose words come back exactly.
    assert probe[1 : len(opts) + 1] == opts
    assert probe[-3:-1] == ["--", "al@lumi"]
    final, part = f"{remote_dir}/img.sif", f"{remote_dir}/.img.sif.part"
    assert remote_command(probe) == ["sh", "-c", push.PROBE_SCRIPT, "sh", remote_dir, final, part, str(size)]
    assert remote_command(commit) == ["sh", "-c", push.COMMIT_SCRIPT, "sh", part, final, digest]
    # rsync: the path over the protocol (-s), resumable into the hidden .part, -e split like a shell.
    assert rsync[0] == "rsync" and {"-s", "--inplace", "--partial", "--ignore-times", "--stats"} <= set(rsync)
    e = rsync[rsync.index("-e") + 1]
    assert shlex.split(e) == ["ssh", *opts, *push.DEFAULT_SSH_OPTIONS]
    assert rsync[-3:] == ["--", str(image), f"al@lumi:{part}"]
    assert result == push.PushResult(f"al@lumi:{remote_dir}/img.sif", "al@lumi", final, digest, size, True, 20_971_520, "rsync", 0)


def test_user_ssh_options_come_first_so_they_win(image):
    runner = fake_remote()
    push.push(image, "h:/x/img.sif", runner, ssh_options=["-o", "ConnectTimeout=3"])
    probe = runner.calls[0]
    assert probe.index("ConnectTimeout=3") < probe.index("ConnectTimeout=20")


def test_remote_scripts_run_literally_in_a_real_shell(image, tmp_path):
    """The commands ship sends, run by sh here as a remote login shell would: hostile paths
    arrive unchanged, nothing in them is executed, the image ends up at the final path."""
    remote_dir = tmp_path / "remote" / HOSTILE_DIR

    def ssh(argv):
        done = subprocess.run(["sh", "-c", argv[-1]], check=False, capture_output=True, text=True, cwd=tmp_path)
        return Completed(tuple(argv), done.returncode, done.stdout, done.stderr)

    def rsync(argv):
        shutil.copyfile(argv[-2], argv[-1].split(":", 1)[1])
        return Completed(tuple(argv), 0, STATS, "")

    runner = FakeRunner(answers={"ssh": ssh, "rsync": rsync}, installed={"ssh", "rsync"})
    first = push.push(image, f"h:{remote_dir}/img.sif", runner)
    assert first.transferred and sha(remote_dir / "img.sif") == sha(image)
    assert sorted(p.name for p in remote_dir.iterdir()) == ["img.sif"]  # no .part left
    second = push.push(image, f"h:{remote_dir}/img.sif", runner)
    assert (second.transferred, second.bytes_transferred, second.method) == (False, 0, "skip")
    assert [c[0] for c in runner.calls] == ["ssh", "rsync", "ssh", "ssh"]
    assert not list(tmp_path.rglob("ship-canary"))


# --- skipping ----------------------------------------------------------------------------------


def test_skip_when_the_remote_sha_matches(image):
    digest = sha(image)
    probe = Completed((), 0, f"motd noise\norchestrator-ship: final {image.stat().st_size}\norchestrator-ship: sha256 {digest}\n", "")
    runner = fake_remote(probe=probe)
    result = push.push(image, "h:/x/img.sif", runner)
    assert (result.transferred, result.bytes_transferred, result.method, result.sha256) == (False, 0, "skip", digest)
    assert len(runner.calls) == 1 and not runner.called("rsync")


def test_a_different_remote_image_is_replaced(image):
    probe = Completed((), 0, f"orchestrator-ship: final 12\norchestrator-ship: sha256 {'0' * 64}\norchestrator-ship: part 4096\n", "")
    runner = fake_remote(probe=probe)
    result = push.push(image, "h:/x/img.sif", runner)
    assert result.transferred and result.resumed_from == 4096
    assert [c[0] for c in runner.calls] == ["ssh", "rsync", "ssh"]


# --- errors ------------------------------------------------------------------------------------


def failed(rc: int, stderr: str, stdout: str = "") -> Completed:
    return Completed((), rc, stdout, stderr)


@pytest.mark.parametrize(
    "probe, headline",
    [
        (failed(255, "ssh: connect to host h port 22: Connection refused"), "cannot reach h over ssh"),
        (failed(255, "ssh: Could not resolve hostname h: Name or service not known"), "cannot reach h over ssh"),
        (failed(255, "al@h: Permission denied (publickey,password)."), "h refused the ssh login"),
        (failed(90, "mkdir: cannot create directory '/x': Permission denied"), "cannot create the remote directory /x"),
        (failed(91, ""), "the remote path /x/img.sif is a directory"),
        (failed(0, "", "orchestrator-ship: readonly 1\n"), "the remote directory /x is not writable"),
    ],
)
def test_probe_errors(image, probe, headline):
    runner = fake_remote(probe=probe)
    with pytest.raises(push.ShipError) as err:
        push.push(image, "h:/x/img.sif", runner)
    text = str(err.value)
    assert text.startswith(f"push of {image} to h:/x/img.sif failed: {headline}")
    assert "command (exit" in text and "ssh " in text  # the command that failed
    assert "nothing was installed at /x/img.sif" in text
    assert not runner.called("rsync")


def test_permission_denied_writing_is_not_a_refused_login(image):
    rsync = failed(
        23,
        'rsync: [receiver] open "/x/.img.sif.part" failed: Permission denied (13)\n'
        "rsync error: some files could not be transferred (code 23)",
    )
    with pytest.raises(push.ShipError, match="failed: the transfer failed") as err:
        push.push(image, "h:/x/img.sif", fake_remote(rsync=rsync))
    assert "Permission denied (13)" in str(err.value) and "command (exit 23): rsync " in str(err.value)


def test_unreachable_during_transfer(image):
    rsync = failed(
        255,
        "ssh: connect to host h port 22: Connection timed out\nrsync: connection unexpectedly closed (0 bytes received so far) [sender]",
    )
    with pytest.raises(push.ShipError, match="cannot reach h over ssh"):
        push.push(image, "h:/x/img.sif", fake_remote(rsync=rsync))


def test_interrupted_transfer_says_it_resumes(image):
    with pytest.raises(push.ShipError, match="interrupted") as err:
        push.push(image, "h:/x/img.sif", fake_remote(rsync=failed(20, "rsync error: received SIGINT")))
    assert "push again: it resumes" in str(err.value)


def test_checksum_mismatch_removes_the_copy_and_installs_nothing(image):
    commit = failed(95, "", f"orchestrator-ship: sha256 {'f' * 64}\n")
    runner = fake_remote(commit=commit)
    with pytest.raises(push.ChecksumMismatch, match="checksum mismatch") as err:
        push.push(image, "h:/x/img.sif", runner)
    text = str(err.value)
    assert f"local sha256 {sha(image)}, remote {'f' * 64}" in text
    assert "nothing was installed at /x/img.sif" in text and "command: ssh " in text
    # The script itself removes the .part and never runs mv on a mismatch.
    assert 'if [ "$h" != "$3" ]; then rm -f -- "$1"; exit 95; fi; mv' in push.COMMIT_SCRIPT


def test_ssh_not_installed(image):
    runner = FakeRunner(answers={}, installed=set())
    with pytest.raises(push.ShipError, match="`ssh` is not installed here"):
        push.push(image, "h:/x/img.sif", runner)


def test_ssh_options_must_be_a_list(image):
    with pytest.raises(TypeError):
        push.push(image, "h:/x/img.sif", fake_remote(), ssh_options="-p 22")


# --- scp, when rsync is not installed ----------------------------------------------------------


def test_scp_fallback_translates_options(image):
    runner = fake_remote(installed=("ssh", "scp"))
    result = push.push(image, "al@h:/x/img.sif", runner, ssh_options=["-p", "2222", "-l", "bob", "-i", "/k", "-4C"])
    (scp,) = runner.called("scp")
    assert scp[:12] == ["scp", "-q", "-P", "2222", "-o", "User=bob", "-i", "/k", "-4C", *push.DEFAULT_SSH_OPTIONS[:3]]
    assert scp[-3:] == ["--", str(image), "al@h:/x/.img.sif.part"]
    assert (result.method, result.bytes_transferred, result.resumed_from) == ("scp", image.stat().st_size, 0)


def test_scp_refuses_paths_it_cannot_quote_for_both_protocols(image):
    runner = fake_remote(installed=("ssh", "scp"))
    with pytest.raises(push.ShipError, match="scp cannot safely copy"):
        push.push(image, f"h:/x/{HOSTILE_DIR}/img.sif", runner)
    assert not runner.called("scp")


def test_scp_options_it_cannot_take():
    with pytest.raises(push.ShipError, match="-L"):
        push.scp_options(["-L", "8080:localhost:80"])


def test_rsync_stats_parsing():
    assert push.parse_rsync_stats(STATS) == 20_971_520
    assert push.parse_rsync_stats("Literal data: 0 bytes\n") == 0
    assert push.parse_rsync_stats("Total transferred file size: 1.234.567 bytes\n") == 1_234_567
    assert push.parse_rsync_stats("") == 0


# --- a copy on this machine --------------------------------------------------------------------


def test_local_copy_is_verified_atomic_and_skipped_the_second_time(image, tmp_path):
    dest = tmp_path / "shared" / HOSTILE_DIR / "img.sif"
    runner = FakeRunner(installed=set())
    first = push.push(image, str(dest), runner)
    assert (first.method, first.transferred, first.bytes_transferred) == ("copy", True, image.stat().st_size)
    assert sha(dest) == sha(image) and sorted(p.name for p in dest.parent.iterdir()) == ["img.sif"]
    second = push.push(image, str(dest), runner)
    assert (second.method, second.transferred, second.bytes_transferred) == ("skip", False, 0)
    assert runner.calls == []
