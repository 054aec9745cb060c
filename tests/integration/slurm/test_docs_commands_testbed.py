"""The command blocks of Get started and the how-to guides that need a Slurm cluster
(`<!-- run: testbed -->`, with the page's local blocks) run as the pages show them on the
two-node testbed, page by page, each in a fresh folder (tests/doc_blocks.py)."""

from __future__ import annotations

import pytest
from doc_blocks import page_id, pages_needing, run_page
from support import require

pytestmark = pytest.mark.slow  # a page is a few commands of a few seconds each

PAGES = pages_needing("testbed")


@pytest.mark.parametrize("page", PAGES, ids=[page_id(p) for p in PAGES])
def test_the_pages_commands_run_on_the_testbed(page, tmp_path, slurm_testbed):
    require("shellcheck")
    run_page(page, tmp_path)
