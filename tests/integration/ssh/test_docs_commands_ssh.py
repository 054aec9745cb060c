"""The command blocks of the pages that work from a workstation (`<!-- run: ssh -->`, with the
page's local blocks) run as the pages show them (tests/doc_blocks.py), the Slurm testbed as the
cluster: the page's own try-out starts the loopback sshd that is its login node and writes the ssh
config that names it `login-node`; the `sshd` fixture only makes sure OpenSSH is installed."""

from __future__ import annotations

import contextlib
import os
import signal

import pytest
from doc_blocks import page_id, pages_needing, run_page
from support import require

pytestmark = pytest.mark.slow  # a page is a few commands of a few seconds each

PAGES = pages_needing("ssh")


@pytest.mark.parametrize("page", PAGES, ids=[page_id(p) for p in PAGES])
def test_the_pages_commands_run_over_ssh(page, tmp_path, slurm_testbed, sshd):
    require("shellcheck")
    where = tmp_path / "workstation"
    where.mkdir()
    try:
        run_page(page, where)
    finally:  # the page's last block stops its sshd; a page that failed before it leaves it running
        for pid_file in where.glob("*/sshd.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pid_file.read_text().strip()), signal.SIGTERM)
