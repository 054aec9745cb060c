"""The command blocks of Get started and the how-to guides that run on this machine alone
(`<!-- run: local -->`) run as the pages show them, page by page, each in a fresh folder
(tests/doc_blocks.py)."""

from __future__ import annotations

import pytest
from doc_blocks import page_id, pages_needing, run_page
from support import ROOT, require

pytestmark = pytest.mark.slow  # a page is a few commands of a few seconds each

PAGES = pages_needing("local")
# What a page takes as given that no block of it makes: Install clones the tool from $TOOL_REPO
# (the repository's URL or a clone's path, which the page asks the reader for): this tree here.
ENV_FOR = {"get-started/install.md": {"TOOL_REPO": str(ROOT)}}


@pytest.mark.parametrize("page", PAGES, ids=[page_id(p) for p in PAGES])
def test_the_pages_commands_run_as_shown(page, tmp_path):
    require("shellcheck")  # the pages run render --check, which runs it on every script
    run_page(page, tmp_path, env=ENV_FOR.get(page_id(page)))
