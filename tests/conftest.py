"""Fixtures, for unit/ and integration/ alike: throwaway projects, golden-file updates,
and the real components (the Slurm testbed, Apptainer and the CI image, an sshd on loopback).

Plain helpers live in support.py and test doubles in fakes.py (tests/ is on sys.path:
pyproject.toml's pytest pythonpath).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from filelock import FileLock
from hypothesis import settings as hypothesis_settings

# The helpers' own asserts get pytest's detailed messages too; registered before they are imported.
pytest.register_assert_rewrite("fakes", "support")

import scheduling  # noqa: E402
from support import (  # noqa: E402
    IMAGE_CACHE,
    LOCKS,
    ROOT,
    Distributions,
    container_cli,
    distributions_in,
    distributions_of_this_tree,
    fabricate,
    invoke,
    machine_lock,
    make_project,
    make_tiny,
    require_root_and_apt,
    skip_or_fail,
    venv_with,
)

# OpenMP's idle threads wait asleep, not spinning, in every test process and what it starts (set
# before anything imports torch, whose OpenMP runtime reads it once): the suite keeps both cores
# busy, and a torch process's spinning threads took the CPU its other threads and the other tests
# needed. Three in-process training tests used 23 s of CPU with spinning, 13 without, beside two
# busy cores; what they compute is the same.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# DVC starts a usage-report daemon (another Python) after each command it runs; the tests run
# some thousand. Nothing here reads those reports.
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
# The commands the tests run (dvc, orchestrator, pip's entry points) from this interpreter's own
# folder first: a version manager's shims (pyenv's) cost a dozen shell processes each call.
_BIN = str(Path(sys.executable).parent)
if os.environ.get("PATH", "").split(os.pathsep)[0] != _BIN:
    os.environ["PATH"] = os.pathsep.join([_BIN, os.environ.get("PATH", "")])

# Property tests without a count of their own: hypothesis's full 100 under CI=true, 20 for a
# developer's run (support.examples scales the tests that name their count the same way).
# No deadline: on a machine the parallel suite keeps busy (the tests without a daemon at nice 5),
# an example's time says nothing about the code, and a slow one re-run fast is hypothesis's Flaky.
hypothesis_settings.register_profile("ci", max_examples=100, deadline=None)
hypothesis_settings.register_profile("dev", max_examples=20, deadline=None)
hypothesis_settings.load_profile("ci" if os.environ.get("CI") == "true" else "dev")


def pytest_addoption(parser):
    parser.addoption(
        "--update-goldens",
        action="store_true",
        help="Rewrite tests/golden/* from the current templates instead of comparing (review the diff!).",
    )


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the groups
def pytest_collection_modifyitems(config, items):
    scheduling.arrange(items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    scheduling.prioritise(item)
    scheduling.TURN.take(item)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item, nextitem):
    yield
    scheduling.TURN.after(nextitem)


@pytest.fixture(scope="session")
def _impatient_slurm_conf(tmp_path_factory) -> Path | None:
    """This machine's Slurm configuration (the testbed's, once it was set up) with a 1-second
    MessageTimeout, or None where there is none: a copy of its folder, which Slurm reads its
    other files from."""
    conf = Path(os.environ.get("SLURM_CONF", "/etc/slurm/slurm.conf"))
    if not conf.is_file():
        return None
    copy = tmp_path_factory.mktemp("slurm-conf")
    for entry in conf.parent.iterdir():
        if entry.is_file() and os.access(entry, os.R_OK) and entry != conf:
            shutil.copy(entry, copy / entry.name)
        elif entry.is_dir():
            shutil.copytree(entry, copy / entry.name, ignore_dangling_symlinks=True)
    lines = [line for line in conf.read_text().splitlines() if not line.strip().lower().startswith("messagetimeout")]
    (copy / conf.name).write_text("\n".join([*lines, "MessageTimeout=1"]) + "\n")
    return copy / conf.name


@pytest.fixture(autouse=True)
def _slurm_answers_at_once(request, monkeypatch, _impatient_slurm_conf):
    """A test that needs no daemon meets a Slurm that answers at once or not at all. Where the
    testbed is down, `scontrol` retries for its MessageTimeout (10 s) before it says so, and
    every command that asks which cluster this is (a project with no orchestrator.cluster,
    `render --check`'s pre-flight) would wait that long; the tests pass with either answer."""
    if _impatient_slurm_conf is not None and not any(request.node.get_closest_marker(m) for m in scheduling.DAEMON_MARKS):
        monkeypatch.setenv("SLURM_CONF", str(_impatient_slurm_conf))


@pytest.fixture
def update_goldens(request) -> bool:
    return request.config.getoption("--update-goldens") or os.environ.get("UPDATE_GOLDENS") == "1"


@pytest.fixture
def project(tmp_path) -> Path:
    """A DVC project (no git) with the shipped pipeline and params."""
    return make_project(tmp_path / "project")


@pytest.fixture
def testbed_project(tmp_path) -> Path:
    """A folder whose params.yaml names the testbed profile and its account (no DVC project):
    all `orchestrator run` of one item needs, against a fake Slurm."""
    (tmp_path / "params.yaml").write_text("orchestrator:\n  cluster: testbed\n  account: project_465000858\n")
    return tmp_path


@pytest.fixture
def tiny(tmp_path) -> Path:
    """A project with a tiny scratch image and the real localimage template (support.make_tiny)."""
    return make_tiny(tmp_path / "proj")


@pytest.fixture(scope="module")
def reported(tmp_path_factory) -> Path:
    """`orchestrator report` of support.fabricate's results tree: its reports/ folder."""
    project = fabricate(tmp_path_factory.mktemp("report") / "project")
    done = invoke("report", "--project", str(project), "--no-accounting")
    assert done.exit_code == 0, done.output
    assert "1 missing, weak scaling, baseline 1x1" in done.output and "missing: benchmark@pydoc-topics-tiny-device_cfg3" in done.output
    return project / "reports"


@pytest.fixture(scope="session")
def this_distributions(tmp_path_factory) -> Distributions:
    """This tree's sdist and the wheel built from it, built once per pytest run (the isolated builds
    cost ~8 s of CPU): under xdist, the first worker to ask builds them in the run's shared temporary
    folder, and the others wait for them there."""
    base = tmp_path_factory.getbasetemp()
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return distributions_of_this_tree(base / "wheel")
    shared = base.parent / "wheel"  # the workers' basetemps are popen-gwN folders of this run's one
    with FileLock(str(base.parent / "wheel.lock")):
        return distributions_in(shared) if any(shared.glob("*.whl")) else distributions_of_this_tree(shared)


@pytest.fixture(scope="session")
def this_wheel(this_distributions) -> Path:
    """This tree's wheel, as a release builds it (from its sdist, where `build` is installed)."""
    return this_distributions.wheel


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory, this_wheel) -> Path:
    """This tree's wheel installed with no dependencies in a clean venv (once per xdist worker) that
    sees this interpreter's packages (DVC and the rest, as a login node with DVC has them): its
    folder, beside ``wheels/`` that holds the wheel. The orchestrator it runs is the wheel's copy,
    not this checkout."""

    where = tmp_path_factory.mktemp("wheel-venv")
    (where / "wheels").mkdir()
    wheel = where / "wheels" / this_wheel.name
    shutil.copy(this_wheel, wheel)
    return venv_with(wheel, where / "venv", system_site_packages=True)


@pytest.fixture(scope="session")
def slurm_testbed():
    """The project's two-node Slurm testbed, brought up once per session (`orchestrator testbed up`).

    Skips without root or apt-get (the testbed installs Debian packages and starts
    system daemons), except under CI=true, where that is a failure.
    """
    from orchestrator.testbed.cluster import Testbed
    from orchestrator.testbed.settings import LocalSlurmSettings

    require_root_and_apt("the Slurm testbed")
    settings = LocalSlurmSettings.for_this_machine()
    with machine_lock():  # up is idempotent, but two at once would start the daemons twice
        Testbed(settings, timeout=180).up()
        if os.environ.get("CI") == "true" and _first_in_this_run("testbed-queue-cleared"):
            _cancel_leftover_jobs()
    return settings


def _first_in_this_run(what: str) -> bool:
    """Whether this worker is the first of this pytest run to ask (call under machine_lock):
    a session fixture runs once per xdist worker, and the second worker must not undo what the
    first's tests began. A run without xdist is always first."""
    run = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not run:
        return True
    marker = LOCKS / f"{what}-{run}"
    if marker.exists():
        return False
    marker.touch()
    return True


def _cancel_leftover_jobs(timeout: float = 120.0) -> None:
    """Slurm keeps its queue across restarts (the state is saved on SIGTERM): a job a
    developer left training on this machine would come back with the cluster and keep
    every test's job pending for its whole time limit. CI starts from an empty queue."""
    import time
    import warnings

    listed = subprocess.run(["squeue", "--noheader", "--format=%i %j"], capture_output=True, text=True, check=True).stdout.split("\n")
    left = [line for line in listed if line.strip()]
    if not left:
        return
    warnings.warn(f"CI: cancelling {len(left)} job(s) left in the testbed's queue: {'; '.join(left[:5])}", stacklevel=1)
    subprocess.run(["scancel", "--full", *(line.split()[0] for line in left)], check=False)
    deadline = time.monotonic() + timeout
    while subprocess.run(["squeue", "--noheader"], capture_output=True, text=True).stdout.strip():
        if time.monotonic() > deadline:
            pytest.fail("CI: jobs left in the testbed's queue did not go away after scancel")
        time.sleep(1)


# --- a real sshd on loopback, for the ssh tests (marked ssh) -------------------------

SSH_PACKAGES = {"sshd": "openssh-server", "ssh": "openssh-client", "ssh-keygen": "openssh-client", "rsync": "rsync"}


class Sshd:
    """An sshd of our own on 127.0.0.1: its config, host key and client key live in ``root``."""

    def __init__(self, root: Path, port: int, key: Path, user: str, proc: subprocess.Popen, log: Path) -> None:
        self.root, self.port, self.key, self.user, self.proc, self.log = root, port, key, user, proc, log
        self.host = f"{user}@127.0.0.1"
        # -F /dev/null: the machine's ~/.ssh/config plays no part; IdentitiesOnly: only our key is offered.
        self.options = [
            "-F", "/dev/null", "-p", str(port), "-i", str(key), "-o", "IdentitiesOnly=yes",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-o", "BatchMode=yes",
        ]  # fmt: skip


def _sshd_binary() -> str | None:
    return shutil.which("sshd") or next((p for p in ("/usr/sbin/sshd", "/sbin/sshd") if os.access(p, os.X_OK)), None)


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1 (free high port, key-only login as this user), for the session.

    Installs openssh-server, openssh-client and rsync with apt-get when missing (as root).
    Skips without root (or apt-get) where something is missing, except under CI=true,
    where that is a failure. Stopped at the end of the session.
    """
    import time

    have = {"sshd": _sshd_binary(), "ssh": shutil.which("ssh"), "ssh-keygen": shutil.which("ssh-keygen"), "rsync": shutil.which("rsync")}
    missing = sorted({SSH_PACKAGES[tool] for tool, path in have.items() if not path})
    if os.geteuid() != 0:
        # sshd needs root to switch to the logged-in user (and its privilege separation dir).
        skip_or_fail(
            "the ssh tests start an sshd on loopback, which needs root" + (f" (and {' '.join(missing)} installed)" if missing else "")
        )
    if missing:
        if shutil.which("apt-get") is None:
            skip_or_fail(f"the ssh tests need {' '.join(missing)}, and there is no apt-get to install them")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        with machine_lock():
            subprocess.run(["apt-get", "update", "-qq"], check=True, env=env, capture_output=True, timeout=600)
            # policy-rc.d may be absent, but there is no init here to start the system's sshd; ours is separate anyway.
            subprocess.run(
                ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing],
                check=True,
                env=env,
                capture_output=True,
                timeout=900,
            )
    sshd_bin = _sshd_binary()
    assert sshd_bin, "openssh-server is installed but sshd is not found"

    root = tmp_path_factory.mktemp("sshd")
    host_key, key = root / "host_ed25519_key", root / "client_ed25519_key"
    for path in (host_key, key):
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "orchestrator-test", "-f", str(path)], check=True)
    authorized = root / "authorized_keys"
    authorized.write_text((root / "client_ed25519_key.pub").read_text())
    authorized.chmod(0o600)
    Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # sshd's privilege separation directory
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    log = root / "sshd.log"
    proc = None
    for _attempt in range(5):  # the free port may be taken between finding and binding it
        port = _free_port()
        config = root / "sshd_config"
        config.write_text(
            f"ListenAddress 127.0.0.1\nPort {port}\nHostKey {host_key}\nPidFile {root / 'sshd.pid'}\n"
            f"AuthorizedKeysFile {authorized}\nAuthenticationMethods publickey\nPubkeyAuthentication yes\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nPermitRootLogin prohibit-password\n"
            # StrictModes no: the pytest temp dirs are not owned/moded the way sshd insists on for keys.
            "UsePAM no\nStrictModes no\nAllowUsers " + user + "\nSubsystem sftp internal-sftp\nLogLevel VERBOSE\n"
        )
        subprocess.run([sshd_bin, "-t", "-f", str(config)], check=True, capture_output=True, text=True)
        proc = subprocess.Popen([sshd_bin, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL, stderr=log.open("ab"))
        server = Sshd(root, port, key, user, proc, log)
        deadline = time.monotonic() + 15
        while proc.poll() is None and time.monotonic() < deadline:
            probe = subprocess.run(
                ["ssh", *server.options, "-o", "ConnectTimeout=2", "--", server.host, "true"], check=False, capture_output=True, text=True
            )
            if probe.returncode == 0:
                break
            time.sleep(0.1)
        else:
            if proc.poll() is None:
                proc.terminate()
            proc.wait()
            continue
        break
    else:
        pytest.fail(f"sshd did not come up on 127.0.0.1; its log:\n{log.read_text()[-3000:]}")
    try:
        yield server
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def apptainer() -> str:
    """Apptainer, installed once per session by containers/install-apptainer.sh (a quick
    no-op when it works already); the path of the `apptainer` command.

    Skips without root (the installer unpacks Debian packages into /), except under
    CI=true, where that is a failure.
    """
    script = ROOT / "containers" / "install-apptainer.sh"
    require_root_and_apt("installing Apptainer (containers/install-apptainer.sh)")
    with machine_lock():
        proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.fail(f"{script} failed (exit {proc.returncode}):\n{proc.stdout}{proc.stderr}")
    path = shutil.which("apptainer")
    if path is None:
        pytest.fail(f"{script} succeeded but apptainer is not on PATH")
    return path


# --- the CI image (Apptainer), shared by the container and container-job tests ---------------


@pytest.fixture(scope="session")
def ci_image(apptainer) -> Path:
    """The project's CI image, in the persistent cache under its content hash
    (ci-<hash>.sif): built once per machine and content, found up to date afterwards.
    The three most recent are kept, so switching branches back and forth does not rebuild.
    It holds the train extra's dependencies, not the project's code (jobs bind their
    workspace): a change to experiments/ or orchestrator/ keeps the same image."""
    from orchestrator.containers.build import stamp_path
    from orchestrator.containers.inputs import HASH_PREFIX, current_hash
    from orchestrator.util.files import sha256_cache_path

    key = current_hash(ROOT, "ci").removeprefix(HASH_PREFIX)[:16]
    out = IMAGE_CACHE / f"ci-{key}.sif"
    proc, seconds = container_cli("build", "ci", "--output", str(out), "--digest-file", str(out.with_suffix(".digest")))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    print(f"ci image: {proc.stdout.strip()} [{seconds:.1f} s of CPU]")
    for old in sorted(IMAGE_CACHE.glob("ci-*.sif"), key=lambda p: p.stat().st_mtime, reverse=True)[3:]:
        for path in (
            old,
            stamp_path(old),
            old.with_suffix(".digest"),
            old.with_name(f"{old.stem}.build.log"),
            old.with_name(f".{old.name}.lock"),
            sha256_cache_path(old),
        ):
            path.unlink(missing_ok=True)
    return out
