"""Every command block of the user's pages says where it runs, so none slips in untested;
and the runner of those blocks fails where a command fails, naming the page and the block."""

from __future__ import annotations

import pytest
from doc_blocks import KINDS, blocks, pages_needing, run_page, user_pages


def test_every_shell_block_of_get_started_and_how_to_says_where_it_runs():
    pages = user_pages()
    assert pages, "no pages under docs/get-started or docs/how-to"
    untagged = [b.where for page in pages for b in blocks(page) if b.kind is None]
    assert not untagged, "shell blocks without `<!-- run: local|testbed|ssh|no (why) -->` on the line before: " + ", ".join(untagged)
    unknown = [f"{b.where} ({b.kind})" for page in pages for b in blocks(page) if b.kind not in KINDS]
    assert not unknown, "run: kinds other than " + "/".join(KINDS) + ": " + ", ".join(unknown)
    unexplained = [b.where for page in pages for b in blocks(page) if b.kind == "no" and not b.reason]
    assert not unexplained, "`run: no` needs its reason in parentheses: " + ", ".join(unexplained)


def test_each_page_with_runnable_blocks_is_run_by_one_test():
    runnable = {page for page in user_pages() if any(b.kind not in (None, "no") for b in blocks(page))}
    by_test = [set(pages_needing(kind)) for kind in ("local", "testbed", "ssh")]
    assert set().union(*by_test) == runnable
    assert sum(len(s) for s in by_test) == len(runnable)  # none run twice
    assert any(page.parent.name == "get-started" for page in by_test[0]), "the local run of Get started is not tested"


def test_the_runner_names_the_page_and_block_that_failed(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n<!-- run: local -->\n```bash\nmkdir here && cd here\necho one > f\n```\n\n"
        "<!-- run: no (an example) -->\n```bash\nfalse\n```\n\ntext\n\n<!-- run: local -->\n```bash\ncat f\nfalse\necho never\n```\n"
    )
    found = blocks(page)
    assert [(b.kind, b.line) for b in found] == [("local", 4), ("no", 10), ("local", 17)]
    with pytest.raises(AssertionError) as failed:
        run_page(page, tmp_path)
    message = str(failed.value)
    assert f"{page}:17 (local) failed (exit 1)" in message and "cat f\nfalse" in message  # where, and the block's text
    output = message.split("--- its output ---")[1]
    assert "one" in output and "never" not in output  # its output, up to the command that failed
    page.write_text(page.read_text().replace("false\necho never", "echo fine"))
    assert "fine" in run_page(page, tmp_path / "here")  # the no-block is skipped; cd carried over
