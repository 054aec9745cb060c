"""What `--remote` forwards to the login node: the command there must parse to what the user
gave here. A target that looks like an option (`--project=X`) stays a target there, and an
option's value stays its value. Without ssh: the forwarded argv is caught where it would be
sent, then parsed by the same command, whose work is replaced by a recorder."""

from __future__ import annotations

import pytest
from support import invoke

HOSTILE = ("--project=/elsewhere", "-h", "--", "a b", "--cluster=other", "x;rm -rf ~")


@pytest.fixture
def sent(monkeypatch, tmp_path):
    """The argv each `--remote` call would run there (nothing leaves this process)."""
    monkeypatch.chdir(tmp_path)
    calls: list[list[str]] = []
    monkeypatch.setattr("orchestrator.cli.jobs.run_remote", lambda project, cluster, argv, **kw: calls.append(list(argv)))
    return calls


def there(monkeypatch, argv: list[str], where: str, **reply) -> dict:
    """``orchestrator ARGV`` parsed as the login node would, ``where`` (a function the command
    calls with its targets) replaced by a recorder: what it was called with."""
    got: dict = {}

    def record(*args, **kw):
        got.update(args=args, kw=kw)
        return reply.get("result")

    monkeypatch.setattr(where, record)
    result = invoke(*argv)
    assert "Traceback" not in result.output, result.output
    return got


def test_status_targets_stay_targets_there(sent, monkeypatch):
    result = invoke("status", "--remote", "--all", "--", *HOSTILE)
    assert result.exit_code == 0, result.output
    (argv,) = sent
    got = there(monkeypatch, argv, "orchestrator.jobs.status.refresh", result=[])
    assert got["args"][2] == HOSTILE and str(got["args"][0]) == "."  # the targets, and no --project taken from them


def test_a_sweep_name_that_looks_like_an_option_stays_the_sweep_s_name(sent, monkeypatch):
    assert invoke("status", "--remote", "--sweep=--watch").exit_code == 0
    (argv,) = sent
    names: list[str] = []

    def load(project, name):
        names.append(name)
        raise SystemExit(0)

    monkeypatch.setattr("orchestrator.jobs.sweep.Sweep.load", load)
    invoke(*argv)
    assert names == ["--watch"]


def test_cancel_targets_stay_targets_there(sent, monkeypatch):
    assert invoke("cancel", "--remote", "--", *HOSTILE).exit_code == 0
    (argv,) = sent
    got = there(monkeypatch, argv, "orchestrator.jobs.status.cancel", result=[])
    assert got["args"][2] == HOSTILE and str(got["args"][0]) == "."


def test_submit_targets_and_cluster_stay_what_they_were(sent, monkeypatch):
    assert invoke("submit", "--remote", "--cluster", "-x", "--force", "--", *HOSTILE).exit_code == 0
    (argv,) = sent
    got = there(monkeypatch, argv, "orchestrator.jobs.detached.submit", result=[])
    assert got["args"][1] == "-x" and got["args"][3] == HOSTILE and got["kw"]["force"] is True
    assert str(got["args"][0]) == "."


@pytest.mark.parametrize(("command", "where"), [("logs", "orchestrator.jobs.status.log_path"), ("show", "orchestrator.jobs.status.one")])
def test_an_item_that_looks_like_an_option_stays_the_item(sent, monkeypatch, command, where):
    assert invoke(command, "--remote", "--", "--project=/elsewhere").exit_code == 0
    (argv,) = sent
    items: list[str] = []

    def record(project, item):
        items.append(item)
        raise SystemExit(0)

    monkeypatch.setattr(where, record)
    invoke(*argv)
    assert items == ["--project=/elsewhere"]


def test_without_targets_nothing_is_added(sent):
    assert invoke("submit", "--remote").exit_code == 0
    assert invoke("status", "--remote").exit_code == 0
    assert sent == [["submit"], ["status"]]


@pytest.mark.parametrize("run_id", ["../../etc", "-x", ".hidden", "a/b", ""])
def test_attach_takes_a_run_id_not_a_path(tmp_path, monkeypatch, run_id):
    monkeypatch.chdir(tmp_path)
    opened: list = []
    monkeypatch.setattr("orchestrator.cli.remote.open_session", lambda *a: opened.append(a) or (_ for _ in ()).throw(SystemExit(0)))
    result = invoke("remote", "attach", "--", run_id)
    if run_id == "":  # the newest run: no id
        assert opened
        return
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"{run_id!r} is not a run id" in result.output and not opened  # refused before any ssh


@pytest.mark.parametrize("when", ["sending", "starting"])
def test_ctrl_c_at_any_moment_of_a_remote_command_says_what_goes_on_there(monkeypatch, tmp_path, when):
    """Ctrl-C while the project is sent: nothing runs there. Ctrl-C between the send and the following
    of the output (it may have started there): it goes on, and how to follow it. Never click's bare
    "Aborted!" with exit 1."""
    from types import SimpleNamespace

    from orchestrator.cli import remote

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    dest = SimpleNamespace(host="login-node")
    session = SimpleNamespace(
        dest=dest, project="/scratch/p/proj", follow_command=lambda run_id: "orchestrator remote attach", run=interrupt
    )
    monkeypatch.setattr(remote, "open_session", lambda project, cluster: (session, None))
    monkeypatch.setattr(remote, "send", interrupt if when == "sending" else lambda *a, **k: None)
    monkeypatch.chdir(tmp_path)
    result = invoke("submit", "--remote")
    assert result.exit_code == 130 and "Aborted" not in result.output, result.output
    if when == "sending":
        assert "before `orchestrator submit` started on login-node: nothing runs there" in result.output
    else:
        assert "`orchestrator submit` goes on on login-node" in result.output and "orchestrator remote attach" in result.output
