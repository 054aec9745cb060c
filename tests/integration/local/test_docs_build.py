"""The documentation site builds with `mkdocs build --strict`: any warning fails it (a broken link or
anchor, a page missing from the navigation, a reference table whose key has no description), and the
generated pages hold what the code defines."""

from __future__ import annotations

import html
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from support import ROOT, skip_or_fail

pytestmark = pytest.mark.slow

# What users read speaks of the product: no numbered references to past work.
PAST_WORK = re.compile(r"\b(issue|session|seed) 0*\d+\b", re.IGNORECASE)


def build_site(dest: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of the repository's docs into ``dest``; skips (fails under CI) without MkDocs."""
    try:
        import material  # noqa: F401
        import mkdocs  # noqa: F401
        import mkdocs_click  # noqa: F401
    except ImportError as exc:
        skip_or_fail(f"the docs extra is not installed ({exc.name}): pip install -e '.[docs]'")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    argv = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(dest)]
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600, env=env, check=False)


def text_of(page: Path) -> str:
    return html.unescape(re.sub(r"<[^>]+>", " ", page.read_text()))


def test_the_docs_build_strictly_and_hold_the_generated_reference(tmp_path):
    site = tmp_path / "site"
    done = build_site(site)
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    assert "WARNING" not in done.stderr, done.stderr[-6000:]

    # Every command of the command line, the lazily imported ones included, has its section.
    import click

    from orchestrator.cli import main

    ctx = click.Context(main, info_name="orchestrator")
    commands = [name for name in main.list_commands(ctx) if not main.get_command(ctx, name).hidden]
    cli = text_of(site / "reference/cli/index.html")
    missing = [name for name in commands if not re.search(rf"orchestrator {re.escape(name)}\b", cli)]
    assert not missing, f"commands without a section on the CLI page: {missing}"

    # The profile keys come from the dataclasses, the built-in values with their cited sources.
    profiles = text_of(site / "reference/profiles/index.html")
    for expected in ("account_example_exists", "scheduler.partitions.NAME", "max_time_by_nodes", "[UG-part]", "USR1@90"):
        assert expected in profiles, f"{expected!r} is not on the profiles page"
    params = text_of(site / "reference/params/index.html")
    assert "array_parallel" in params and "read_in_place" in params
    templates = text_of(site / "reference/templates/index.html")
    assert "ORCH_REQUEUE_SIGNAL" in templates and "#SBATCH --signal=USR1@90" in templates  # the golden, included

    found = []
    for page in sorted(site.rglob("*.html")):
        found += [f"{page.relative_to(site)}: {m.group(0)!r}" for m in PAST_WORK.finditer(text_of(page))]
    assert not found, "numbered references to past work on the site:\n" + "\n".join(found)
