"""The command blocks of the pages that work from a workstation (`<!-- run: ssh -->`, with the
page's local blocks) run as the pages show them: the loopback sshd as the login node, reached
as `login-node` (the `login` fixture's alias, conftest.py beside this), and the Slurm testbed as
the cluster behind it (tests/doc_blocks.py)."""

from __future__ import annotations

import pytest
from doc_blocks import page_id, pages_needing, run_page
from support import require

pytestmark = pytest.mark.slow  # a page is a few commands of a few seconds each

PAGES = pages_needing("ssh")


@pytest.mark.parametrize("page", PAGES, ids=[page_id(p) for p in PAGES])
def test_the_pages_commands_run_over_ssh(page, tmp_path, slurm_testbed, login):
    require("shellcheck")
    (tmp_path / "workstation").mkdir()
    run_page(page, tmp_path / "workstation", env=login.env)
