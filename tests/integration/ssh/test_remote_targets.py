"""Over the loopback sshd: what `--remote` forwards is parsed there as it was given here. A target
that looks like an option stays a target on the login node, and a sync's commits reach the
checkout there as its values."""

from __future__ import annotations

import pytest
from support import one_error

pytestmark = pytest.mark.ssh


def test_a_target_that_looks_like_an_option_stays_a_target_on_the_login_node(login, tmp_path):
    project = login.workstation(tmp_path / "proj")
    (project / "extra.txt").write_text("not committed\n")
    sync = login.orchestrator("remote", "sync", "--with-changes", cwd=project)
    assert sync.returncode == 0 and "with the uncommitted changes" in sync.stdout, sync.stdout + sync.stderr
    assert (login.cluster_root / "proj/extra.txt").read_text() == "not committed\n"  # `remote checkout --changes=C -- H` there
    elsewhere = tmp_path / "elsewhere"  # a project folder there that the target must not select
    elsewhere.mkdir()
    for command in ("status", "cancel"):
        done = login.orchestrator(command, "--remote", "--", f"--project={elsewhere}", cwd=project)
        one_error(done, f"no submitted item matches --project={elsewhere}")
