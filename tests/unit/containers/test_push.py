"""Pushing an image to a cluster (orchestrator/containers/push.py): argv and quoting, error
mapping, skipping, the guard against installing another image, the installed file's mode,
a full disk, the push record, and `container build --push`'s choice of image, with a
FakeRunner. Real pushes over ssh + rsync to an sshd on loopback:
tests/integration/ssh/test_push_over_ssh.py."""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shlex
import shutil
import stat
import subprocess
from pathlib import Path

import pytest
from fakes import FakeRunner, ok
from support import HOSTILE_DIR, invoke, make_sif, make_tiny, sha, sif_labels

from orchestrator.containers import identity, push, push_local, push_remote
from orchestrator.containers.push_target import ChecksumMismatch, OtherImageThere, PushResult, ShipError, parse_target, remote_image_path
from orchestrator.util import ssh
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
    probe: Completed | None = None,
    commit: Completed | None = None,
    rsync: Completed | None = None,
    installed=("ssh", "rsync"),
    discard: Completed | None = None,
):
    """A FakeRunner answering ssh by which of our scripts it runs."""

    def ssh(argv):
        words = remote_command(argv)
        if words[2] == push_remote.PROBE_SCRIPT:
            return dataclasses.replace(probe or ok()(argv), argv=tuple(argv))
        if words[2] == push_remote.DISCARD_SCRIPT:
            return dataclasses.replace(discard or ok()(argv), argv=tuple(argv))
        if words[2] == push_remote.SIDECAR_SCRIPT:
            return ok()(argv)
        assert words[2] == push_remote.COMMIT_SCRIPT
        expected = words[6]
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
    t = parse_target(target)
    assert (t.host, t.path) == (host, path)
    assert t.part == f"{t.directory}/.{t.name}.part"


def test_ipv6_target_keeps_brackets_for_rsync():
    t = parse_target("u@[::1]:/x/o.sif")
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
    with pytest.raises(ShipError, match=message):
        parse_target(target)


def test_local_directory_target_is_refused(tmp_path):
    with pytest.raises(ShipError, match="is a directory"):
        parse_target(str(tmp_path))


def test_remote_image_path_fills_in_profile_templates():
    template = "/project/${SLURM_JOB_ACCOUNT}/${USER}/orchestrator.sif"
    assert remote_image_path(template, {"SLURM_JOB_ACCOUNT": "p1", "USER": "al"}) == "/project/p1/al/orchestrator.sif"
    with pytest.raises(ShipError, match="SLURM_JOB_ACCOUNT"):
        remote_image_path(template, {"USER": "al"})


# --- the local sha256 and its cache ------------------------------------------------------------


def test_local_sha256_is_cached_by_size_and_mtime(image, monkeypatch):
    digest = push.local_sha256(image)
    assert digest == sha(image)
    assert push.cache_path(image).read_text().split()[0] == digest
    from orchestrator.util import files

    monkeypatch.setattr(files, "sha256_file", lambda p: pytest.fail("hashed again although the image did not change"))
    monkeypatch.setattr(files, "_SHA256_MEMO", {})  # from the file beside the image, not this process's memory
    assert push.local_sha256(image) == digest
    monkeypatch.undo()
    image.write_bytes(b"new image")  # new size and mtime
    assert push.local_sha256(image) == hashlib.sha256(b"new image").hexdigest()


def test_missing_image_is_one_clear_error(tmp_path):
    runner = fake_remote()
    with pytest.raises(ShipError, match=r"the image .*nope.sif does not exist") as err:
        push.push(tmp_path / "nope.sif", "host:/x/img.sif", runner)
    assert runner.calls == []
    assert err.value.exit_code != 0


# --- argv and quoting --------------------------------------------------------------------------


def test_argv_is_built_and_every_remote_word_quoted(image):
    remote_dir = f"/scratch/{HOSTILE_DIR}"
    runner = fake_remote()
    opts = ["-p", "2222", "-i", "/keys/my key", "-o", "ProxyJump=jump host"]
    result = push.push(image, f"al@lumi:{remote_dir}/img.sif", runner, ssh_options=opts, interactive=False)

    probe, rsync, commit = runner.calls
    size = image.stat().st_size
    digest = sha(image)
    # ssh: options, "--", the host, and ONE command string whose words come back exactly.
    assert probe[1 : len(opts) + 1] == opts
    assert probe[-3:-1] == ["--", "al@lumi"]
    final, part = f"{remote_dir}/img.sif", f"{remote_dir}/.img.sif.part"
    sidecar, sidecar_tmp = f"{final}.orchestrator.json", f"{remote_dir}/.img.sif.orchestrator.json.tmp"
    mode = f"{image.stat().st_mode & 0o777:o}"
    assert remote_command(probe) == ["sh", "-c", push_remote.PROBE_SCRIPT, "sh", remote_dir, final, part, str(size), sidecar, digest, mode]
    *words, record = remote_command(commit)
    assert words == ["sh", "-c", push_remote.COMMIT_SCRIPT, "sh", part, final, digest, mode, sidecar, sidecar_tmp]
    assert json.loads(record) | {"pushed_at": "", "pushed_from": ""} == {
        "name": None,  # random bytes: no label, no stamp
        "sha256": digest,
        "content_hash": None,
        "built_at": None,
        "size": size,
        "pushed_at": "",
        "pushed_from": "",
    }
    # rsync: the path over the protocol (-s), resumable into the hidden .part, -e split like a shell.
    assert rsync[0] == "rsync" and {"-s", "--inplace", "--partial", "--ignore-times", "--stats"} <= set(rsync)
    e = rsync[rsync.index("-e") + 1]
    assert shlex.split(e) == ["ssh", *opts, *ssh.options(interactive=False)] == probe[:-3]  # the transport's, as every ssh
    assert rsync[-3:] == ["--", str(image), f"al@lumi:{part}"]
    assert result == PushResult(f"al@lumi:{remote_dir}/img.sif", "al@lumi", final, digest, size, True, 20_971_520, "rsync", 0)


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
    assert sorted(p.name for p in remote_dir.iterdir()) == ["img.sif", "img.sif.orchestrator.json"]  # no .part left
    assert json.loads((remote_dir / "img.sif.orchestrator.json").read_text())["sha256"] == sha(image)
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
    # No sidecar there yet (pushed by an older version): one more ssh writes it, nothing is sent.
    assert [remote_command(c)[2] for c in runner.calls] == [push_remote.PROBE_SCRIPT, push_remote.SIDECAR_SCRIPT] and not runner.called(
        "rsync"
    )
    sidecar = remote_command(runner.calls[1])[-1]
    with_sidecar = fake_remote(probe=dataclasses.replace(probe, stdout=probe.stdout + f"orchestrator-ship: sidecar {sidecar}\n"))
    assert push.push(image, "h:/x/img.sif", with_sidecar).method == "skip"
    assert len(with_sidecar.calls) == 1


def test_a_file_of_unknown_image_is_replaced_only_when_asked(image):
    probe = Completed((), 0, f"orchestrator-ship: final 12\norchestrator-ship: sha256 {'0' * 64}\norchestrator-ship: part 4096\n", "")
    runner = fake_remote(probe=probe)
    with pytest.raises(OtherImageThere) as err:
        push.push(image, "h:/x/img.sif", runner)
    assert str(err.value) == (
        "h:/x/img.sif holds an image of unknown name (no up-to-date img.sif.orchestrator.json beside it, "
        "no org.orchestrator.image label in it), "
        f"you gave {image}, which has no org.orchestrator.image label; pass --replace-other-image to overwrite"
    )
    assert err.value.exit_code == 2 and [c[0] for c in runner.calls] == ["ssh"]  # nothing sent
    said = []
    result = push.push(image, "h:/x/img.sif", runner, replace_other_image=True, say=said.append)
    assert result.transferred and result.resumed_from == 4096
    assert [c[0] for c in runner.calls] == ["ssh", "ssh", "rsync", "ssh"]
    assert said[0].startswith("h:/x/img.sif holds an image of unknown name") and said[0].endswith("replacing it (--replace-other-image)")


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
    with pytest.raises(ShipError) as err:
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
    with pytest.raises(ShipError, match="failed: the transfer failed") as err:
        push.push(image, "h:/x/img.sif", fake_remote(rsync=rsync))
    assert "Permission denied (13)" in str(err.value) and "command (exit 23): rsync " in str(err.value)


def test_unreachable_during_transfer(image):
    rsync = failed(
        255,
        "ssh: connect to host h port 22: Connection timed out\nrsync: connection unexpectedly closed (0 bytes received so far) [sender]",
    )
    with pytest.raises(ShipError, match="cannot reach h over ssh"):
        push.push(image, "h:/x/img.sif", fake_remote(rsync=rsync))


def test_interrupted_transfer_says_it_resumes(image):
    runner = fake_remote(rsync=failed(20, "rsync error: received SIGINT"))
    with pytest.raises(ShipError, match="interrupted") as err:
        push.push(image, "h:/x/img.sif", runner)
    assert "the partial file /x/.img.sif.part is kept for the next push to resume: push again" in str(err.value)
    assert [c[0] for c in runner.calls] == ["ssh", "rsync"]  # kept: nothing removes it


def test_checksum_mismatch_removes_the_copy_and_installs_nothing(image):
    commit = failed(95, "", f"orchestrator-ship: sha256 {'f' * 64}\n")
    runner = fake_remote(commit=commit)
    with pytest.raises(ChecksumMismatch, match="checksum mismatch") as err:
        push.push(image, "h:/x/img.sif", runner)
    text = str(err.value)
    assert f"local sha256 {sha(image)}, remote {'f' * 64}" in text
    assert "nothing was installed at /x/img.sif" in text and "command: ssh " in text


def test_commit_script_on_a_mismatch_removes_the_part_and_moves_nothing(tmp_path):
    part, final = tmp_path / ".img.sif.part", tmp_path / "img.sif"
    part.write_bytes(b"corrupted")
    final.write_bytes(b"the image jobs use now")
    args = [str(part), str(final), "0" * 64, "644", f"{final}.orchestrator.json", str(tmp_path / ".tmp"), "{}"]
    done = subprocess.run(["sh", "-c", push_remote.COMMIT_SCRIPT, "sh", *args], capture_output=True, text=True, check=False)
    assert done.returncode == 95 and not part.exists() and final.read_bytes() == b"the image jobs use now"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["img.sif"]  # no sidecar either


def test_ssh_not_installed(image):
    runner = FakeRunner(answers={}, installed=set())
    with pytest.raises(ShipError, match="`ssh` is not installed here"):
        push.push(image, "h:/x/img.sif", runner)


def test_ssh_options_must_be_a_list(image):
    with pytest.raises(TypeError):
        push.push(image, "h:/x/img.sif", fake_remote(), ssh_options="-p 22")


# --- scp, when rsync is not installed ----------------------------------------------------------


def test_scp_fallback_translates_options(image):
    runner = fake_remote(installed=("ssh", "scp"))
    result = push.push(image, "al@h:/x/img.sif", runner, ssh_options=["-p", "2222", "-l", "bob", "-i", "/k", "-4C"])
    (scp,) = runner.called("scp")
    assert scp[:12] == ["scp", "-q", "-P", "2222", "-o", "User=bob", "-i", "/k", "-4C", "-o", "ControlMaster=auto", "-o"]
    assert scp[-3:] == ["--", str(image), "al@h:/x/.img.sif.part"]
    assert (result.method, result.bytes_transferred, result.resumed_from) == ("scp", image.stat().st_size, 0)


def test_scp_refuses_paths_it_cannot_quote_for_both_protocols(image):
    runner = fake_remote(installed=("ssh", "scp"))
    with pytest.raises(ShipError, match="scp cannot safely copy"):
        push.push(image, f"h:/x/{HOSTILE_DIR}/img.sif", runner)
    assert not runner.called("scp")


def test_scp_options_it_cannot_take():
    with pytest.raises(ShipError, match="-L"):
        push_remote.scp_options(["-L", "8080:localhost:80"])


def test_rsync_stats_parsing():
    assert push_remote.parse_rsync_stats(STATS) == 20_971_520
    assert push_remote.parse_rsync_stats("Literal data: 0 bytes\n") == 0
    assert push_remote.parse_rsync_stats("Total transferred file size: 1.234.567 bytes\n") == 1_234_567
    assert push_remote.parse_rsync_stats("") == 0


# --- a copy on this machine --------------------------------------------------------------------


def test_local_copy_is_verified_atomic_and_skipped_the_second_time(image, tmp_path):
    dest = tmp_path / "shared" / HOSTILE_DIR / "img.sif"
    runner = FakeRunner(installed=set())
    first = push.push(image, str(dest), runner)
    assert (first.method, first.transferred, first.bytes_transferred) == ("copy", True, image.stat().st_size)
    assert sha(dest) == sha(image) and sorted(p.name for p in dest.parent.iterdir()) == ["img.sif", "img.sif.orchestrator.json"]
    second = push.push(image, str(dest), runner)
    assert (second.method, second.transferred, second.bytes_transferred) == ("skip", False, 0)
    assert runner.calls == []


# --- the guard: never install another image over the one there --------------------------------


@pytest.fixture
def named_image(tmp_path) -> Path:
    """A local SIF labelled as image 'ci'."""
    path = tmp_path / "build" / "ci.sif"
    path.parent.mkdir()
    path.write_bytes(make_sif(sif_labels("ci")))
    return path


def od(data: bytes) -> str:
    """``od -An -v -tx1`` of ``data``."""
    return "".join(" " + " ".join(f"{b:02x}" for b in data[i : i + 16]) + "\n" for i in range(0, len(data), 16))


def found(size: int, sidecar: dict | None = None, head: bytes | None = None, part: int = 0) -> Completed:
    out = f"orchestrator-ship: final {size}\n"
    if sidecar is not None:
        out += f"orchestrator-ship: sidecar {json.dumps(sidecar)}\n"
    if head is not None:
        out += f"orchestrator-ship: head\n{od(head[: identity.HEAD_BYTES])}orchestrator-ship: end\n"
    if part:
        out += f"orchestrator-ship: part {part}\n"
    return Completed((), 0, out, "")


LUMI = {"name": "lumi", "size": 999, "sha256": "a" * 64, "content_hash": f"sha256:{'a' * 64}", "built_at": "2026-11-20T10:00:00+0100"}
REFUSED = (
    "alice@lumi:/p/orchestrator.sif holds image 'lumi' (built 2026-11-20T10:00:00+0100, content sha256:aaaaaaaaaaaa), "
    "you gave 'ci'; pass --replace-other-image to overwrite"
)


def test_guard_refuses_another_image_named_by_the_sidecar(named_image):
    runner = fake_remote(probe=found(999, sidecar=LUMI, head=make_sif(sif_labels("lumi"))))
    with pytest.raises(OtherImageThere) as err:
        push.push(named_image, "alice@lumi:/p/orchestrator.sif", runner)
    assert str(err.value) == REFUSED and err.value.exit_code == 2
    assert len(runner.calls) == 1 and not runner.called("rsync")  # nothing sent, nothing written


def test_guard_lets_the_same_image_through_and_another_only_when_asked(named_image):
    same = fake_remote(probe=found(999, sidecar={**LUMI, "name": "ci"}))
    assert push.push(named_image, "alice@lumi:/p/orchestrator.sif", same).transferred  # a newer build of 'ci': the usual update
    said = []
    other = fake_remote(probe=found(999, sidecar=LUMI))
    result = push.push(named_image, "alice@lumi:/p/orchestrator.sif", other, replace_other_image=True, say=said.append)
    assert result.transferred and other.called("rsync")
    assert said[0] == REFUSED.split(", you gave")[0] + "; replacing it (--replace-other-image)"
    record = json.loads(remote_command(other.calls[-1])[-1])
    assert (record["name"], record["content_hash"]) == ("ci", f"sha256:{'c' * 64}")


def test_guard_reads_the_images_own_label_without_a_sidecar(named_image):
    runner = fake_remote(probe=found(70_000, head=make_sif(sif_labels("rocm", "d"), tail=70_000)))
    with pytest.raises(OtherImageThere, match=r"holds image 'rocm' \(built 2026-11-25T20:01:38\+00:00, content sha256:dddd"):
        push.push(named_image, "h:/p/o.sif", runner)


def test_a_sidecar_that_no_longer_describes_the_file_is_not_trusted(named_image):
    stale = {**LUMI, "name": "ci", "size": 12345}  # the file there was replaced by hand since
    runner = fake_remote(probe=found(999, sidecar=stale, head=make_sif(sif_labels("nvidia"))))
    with pytest.raises(OtherImageThere, match="holds image 'nvidia'"):
        push.push(named_image, "h:/p/o.sif", runner)
    unknown = fake_remote(probe=found(999, sidecar=stale, head=b"not a sif"))
    with pytest.raises(OtherImageThere, match="holds an image of unknown name"):
        push.push(named_image, "h:/p/o.sif", unknown)


# --- the remote scripts in a real shell: guard, mode ------------------------------------------


def local_ssh(cwd: Path):
    """ssh to "a host" that is this machine: the command string run by sh, as a login shell would."""

    def ssh(argv):
        done = subprocess.run(["sh", "-c", argv[-1]], check=False, capture_output=True, text=True, cwd=cwd)
        return Completed(tuple(argv), done.returncode, done.stdout, done.stderr)

    return ssh


def rsync_inplace(argv):
    """What rsync --inplace does to the modes: a new file is written 0600 and given the source's
    mode less the umask only once complete; an existing one (a resumed part) keeps its mode."""
    src, dest = argv[-2], argv[-1].split(":", 1)[1]
    fresh = not os.path.exists(dest)
    with os.fdopen(os.open(dest, os.O_WRONLY | os.O_CREAT, 0o600), "wb") as f:
        f.write(Path(src).read_bytes())
        f.truncate()
    if fresh:
        os.chmod(dest, stat.S_IMODE(os.stat(src).st_mode) & ~umask())
    return Completed(tuple(argv), 0, STATS, "")


def umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_resumed_push_installs_the_mode_of_an_uninterrupted_one(named_image, tmp_path):
    runner = FakeRunner(answers={"ssh": local_ssh(tmp_path), "rsync": rsync_inplace}, installed={"ssh", "rsync"})
    fresh, resumed = tmp_path / "fresh" / "o.sif", tmp_path / "resumed" / "o.sif"
    push.push(named_image, f"h:{fresh}", runner)
    resumed.parent.mkdir()
    part = resumed.parent / ".o.sif.part"
    part.write_bytes(named_image.read_bytes()[:5000])  # what an interrupted rsync left: 0600
    part.chmod(0o600)
    assert push.push(named_image, f"h:{resumed}", runner).resumed_from == 5000
    expected = 0o644 & ~umask()
    assert mode(fresh) == mode(resumed) == expected, (oct(mode(fresh)), oct(mode(resumed)))
    assert sha(resumed) == sha(named_image) and not part.exists()


def test_an_image_already_there_with_a_wrong_mode_gets_the_normal_one(named_image, tmp_path):
    final = tmp_path / "remote" / "o.sif"
    final.parent.mkdir()
    shutil.copyfile(named_image, final)
    final.chmod(0o600)  # as a resumed push of an older version left it
    runner = FakeRunner(answers={"ssh": local_ssh(tmp_path), "rsync": rsync_inplace}, installed={"ssh", "rsync"})
    assert push.push(named_image, f"h:{final}", runner).method == "skip"
    assert mode(final) == 0o644 & ~umask()
    assert json.loads(Path(f"{final}.orchestrator.json").read_text())["name"] == "ci"  # and the sidecar it lacked


def test_guard_with_the_real_probe_script(named_image, tmp_path):
    runner = FakeRunner(answers={"ssh": local_ssh(tmp_path), "rsync": rsync_inplace}, installed={"ssh", "rsync"})
    final = tmp_path / "remote" / HOSTILE_DIR / "o.sif"
    push.push(named_image, f"h:{final}", runner)
    lumi = tmp_path / "lumi.sif"
    lumi.write_bytes(make_sif(sif_labels("lumi")))
    with pytest.raises(OtherImageThere, match=r"holds image 'ci' \(built 2026-11-25T20:01:38\+00:00, content sha256:cccc"):
        push.push(lumi, f"h:{final}", runner)  # read from the sidecar the first push wrote
    # Replaced by hand since: the sidecar is older than the file, its label is read instead.
    final.write_bytes(make_sif(sif_labels("rocm"), tail=100_000))
    os.utime(final, ns=(final.stat().st_atime_ns, Path(f"{final}.orchestrator.json").stat().st_mtime_ns + 10**9))
    with pytest.raises(OtherImageThere, match="holds image 'rocm'"):
        push.push(lumi, f"h:{final}", runner)
    assert push.push(lumi, f"h:{final}", runner, replace_other_image=True).transferred
    assert sha(final) == sha(lumi) and json.loads(Path(f"{final}.orchestrator.json").read_text())["name"] == "lumi"
    assert not list(tmp_path.rglob("ship-canary"))


# --- a full disk --------------------------------------------------------------------------------

ENOSPC_RSYNC = (
    'rsync: [receiver] write failed on "/x/.img.sif.part": No space left on device (28)\n'
    "rsync error: error in file IO (code 11) at receiver.c(657) [receiver=3.5.0]\n"
)


def test_full_disk_removes_the_partial_file_and_says_so(image):
    runner = fake_remote(rsync=failed(11, ENOSPC_RSYNC), discard=ok("orchestrator-ship: part 2097152\n")(()))
    with pytest.raises(ShipError) as err:
        push.push(image, "h:/x/img.sif", runner)
    text = str(err.value)
    assert text.splitlines()[0] == (
        f"push of {image} to h:/x/img.sif failed: no space left on the device of /x: "
        "the partial file /x/.img.sif.part (2,097,152 bytes) was removed (3 problems):"
    )
    assert f"make room for the image's {image.stat().st_size:,} bytes there" in text and "nothing was installed at /x/img.sif" in text
    discard = runner.calls[-1]
    assert remote_command(discard) == ["sh", "-c", push_remote.DISCARD_SCRIPT, "sh", "/x/.img.sif.part"]
    assert [c[0] for c in runner.calls] == ["ssh", "rsync", "ssh"]  # no commit


def test_full_quota_and_a_partial_that_cannot_be_removed(image):
    quota = ENOSPC_RSYNC.replace("No space left on device (28)", "Disk quota exceeded (122)")
    runner = fake_remote(rsync=failed(11, quota), discard=failed(255, "ssh: connect to host h port 22: Connection refused"))
    with pytest.raises(ShipError) as err:
        push.push(image, "h:/x/img.sif", runner)
    assert str(err.value).startswith(
        f"push of {image} to h:/x/img.sif failed: the disk quota for /x is exceeded: the partial file /x/.img.sif.part "
        "could not be removed; remove it by hand: ssh h rm -f /x/.img.sif.part"
    )


def test_full_disk_with_scp(image):
    def ssh(argv):
        words = remote_command(argv)
        return ok("orchestrator-ship: part 4096\n" if words[2] == push_remote.DISCARD_SCRIPT else "")(argv)

    runner = FakeRunner(answers={"ssh": ssh, "scp": failed(1, "scp: /x/.img.sif.part: No space left on device")}, installed={"ssh", "scp"})
    with pytest.raises(ShipError, match=r"the partial file /x/.img.sif.part \(4,096 bytes\) was removed"):
        push.push(image, "h:/x/img.sif", runner)


def test_full_disk_on_a_local_copy(image, tmp_path, monkeypatch):
    def fill(src, dst):
        Path(dst).write_bytes(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    monkeypatch.setattr(push_local.shutil, "copyfile", fill)
    dest = tmp_path / "shared" / "img.sif"
    with pytest.raises(ShipError) as err:
        push.push(image, str(dest), FakeRunner(installed=set()))
    assert str(err.value).splitlines()[0] == (
        f"copy of {image} to {dest} failed: No space left on device: the partial file {dest.parent}/.img.sif.part (1,000 bytes) was removed"
    )
    assert list(dest.parent.iterdir()) == []


# --- the local record of pushes -----------------------------------------------------------------


def test_each_push_is_recorded_beside_the_local_image(named_image):
    from datetime import datetime

    push.push(named_image, "alice@lumi:/p/o.sif", fake_remote())
    digest = sha(named_image)
    probe = Completed((), 0, f"orchestrator-ship: final {named_image.stat().st_size}\norchestrator-ship: sha256 {digest}\n", "")
    push.push(named_image, "bob@mahti:/q/o.sif", fake_remote(probe=probe))  # nothing sent: recorded all the same
    record = json.loads(identity.pushes_path(named_image).read_text())
    assert identity.pushes_path(named_image).name == "ci.sif.pushes.json"
    assert sorted(record) == ["alice@lumi:/p/o.sif", "bob@mahti:/q/o.sif"]
    for entry in record.values():
        assert set(entry) == {"sha256", "at", "name"} and (entry["sha256"], entry["name"]) == (digest, "ci")
        assert datetime.fromisoformat(entry["at"]).tzinfo is not None
    assert identity.read_pushes(named_image) == record


def test_a_refused_push_is_not_recorded(named_image):
    with pytest.raises(OtherImageThere):
        push.push(named_image, "h:/p/o.sif", fake_remote(probe=found(999, sidecar=LUMI)))
    assert not identity.pushes_path(named_image).exists()


def test_local_copy_guard_and_mode(named_image, tmp_path):
    dest = tmp_path / "shared" / "o.sif"
    dest.parent.mkdir()
    dest.write_bytes(make_sif(sif_labels("lumi")))
    runner = FakeRunner(installed=set())
    with pytest.raises(OtherImageThere, match=f"^{dest} holds image 'lumi'"):
        push.push(named_image, str(dest), runner)
    part = dest.parent / ".o.sif.part"
    part.write_bytes(b"left by a killed copy")
    part.chmod(0o600)
    assert push.push(named_image, str(dest), runner, replace_other_image=True).transferred
    assert sha(dest) == sha(named_image) and mode(dest) == 0o644 & ~umask()
    other = tmp_path / "lumi.sif"
    other.write_bytes(make_sif(sif_labels("lumi")))
    with pytest.raises(OtherImageThere, match="holds image 'ci'"):  # from the sidecar the copy wrote
        push.push(other, str(dest), runner)


# --- `container build --push`: which image goes to the profile's path ---------------------------


def push_project(tmp_path: Path, image: str | None, monkeypatch) -> Path:
    """A project whose profile (a file, found from the project folder) says where to push."""
    import yaml
    from support import ROOT

    project = make_tiny(tmp_path / "proj")
    monkeypatch.chdir(project)
    profile = yaml.safe_load((ROOT / "orchestrator/config/profiles/testbed.yaml").read_text())
    profile["container"] = {"runtime": "apptainer", "image": "/remote/${SLURM_JOB_ACCOUNT}/tiny.sif", "push_host": "alice@login"}
    (project / "cluster.yaml").write_text(yaml.safe_dump(profile))
    settings = {"cluster": "cluster.yaml", "account": "p1", **({"image": image} if image else {})}
    (project / "params.yaml").write_text(yaml.safe_dump({"orchestrator": settings}))
    return project


def test_push_without_a_name_pushes_the_image_params_names(tmp_path, monkeypatch):
    from orchestrator.cli.container import PushDestination, push_destination

    project = push_project(tmp_path, "tiny", monkeypatch)
    assert push_destination(project, None, None, False, FakeRunner()) == PushDestination("alice@login:/remote/p1/tiny.sif", "tiny")
    assert push_destination(project, None, "tiny", False, FakeRunner()).image == "tiny"
    assert push_destination(project, None, "site", True, FakeRunner()).image == "site"  # asked for


@pytest.mark.parametrize(
    "image, args, message",
    [
        (
            None,
            [],
            "--push: params.yaml's orchestrator.image for profile 'cluster.yaml' is 'none' (tasks run on the host), so there is no "
            "containers/images.yaml image to build and push; set it to one of: site, tiny "
            "(clusters.cluster.yaml.orchestrator.image for this profile only)",
        ),
        (
            "/shared/own.sif",
            [],
            "--push: params.yaml's orchestrator.image for profile 'cluster.yaml' is your own image file '/shared/own.sif' (jobs read it "
            "where it is), so there is no containers/images.yaml image to build and push; set it to one of: site, tiny "
            "(clusters.cluster.yaml.orchestrator.image for this profile only)",
        ),
        (
            "tiny",
            ["site"],
            "--push: profile 'cluster.yaml' runs image 'tiny' from alice@login:/remote/p1/tiny.sif (params.yaml's orchestrator.image), "
            "you gave 'site'; pass --replace-other-image to push it there anyway, or set orchestrator.image: site",
        ),
        (
            None,
            ["tiny"],
            "--push: profile 'cluster.yaml' runs no image (params.yaml's orchestrator.image is 'none'), you gave 'tiny'; "
            "pass --replace-other-image to push it there anyway, or set orchestrator.image: tiny",
        ),
        ("tiny", ["nope"], "no image 'nope' in {project}/containers/images.yaml"),
        ("tiny", ["tiny", "--replace-other-image", "--no-push"], None),
    ],
)
def test_push_refusals_are_one_line_exit_2_and_build_nothing(tmp_path, monkeypatch, image, args, message):
    project = push_project(tmp_path, image, monkeypatch)
    if message is None:  # the flag without --push
        result = invoke("container", "build", "tiny", "--replace-other-image", "--project", str(project))
        message = "--replace-other-image is for --push only: add --push, or leave it out"
    else:
        result = invoke("container", "build", *args, "--push", "--project", str(project))
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert lines[0] == "error: " + message.format(project=project)
    assert len(lines) == 1 or lines[1].startswith("  images: ")  # the unknown name lists the valid ones
    assert not list(project.rglob("*.sif")) and not list(project.rglob("*.digest"))
