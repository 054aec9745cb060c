"""The two-run operator comparison (orchestrator/analysis/opdiff.py) on made-up operators.json files.
On real profiled runs: tests/integration/local/test_profiling_runs.py."""

from __future__ import annotations

import pytest
from support import write_operators

from orchestrator.analysis import opdiff


def test_comparison_rows_percentages_and_text(tmp_path):
    base = write_operators(tmp_path / "a.json", {"aten::empty": (1293, 50375), "aten::as_strided": (2786, 1901), "aten::old": (1, 10)})
    exp = write_operators(tmp_path / "b.json", {"aten::empty": (934, 3124), "aten::as_strided": (3147, 1170), "aten::new": (2, 5.5)})
    comparison = opdiff.compare(opdiff.load(base), opdiff.load(exp), top=10)
    assert [r.operator for r in comparison.rows] == ["aten::empty", "aten::as_strided", "aten::old", "aten::new"]
    empty = comparison.rows[0]
    assert (empty.delta_calls, empty.delta_host_us) == (-359, -47251)
    assert empty.delta_calls_pct == pytest.approx(-27.76, abs=0.01) and empty.delta_host_pct == pytest.approx(-93.80, abs=0.01)
    new = comparison.rows[3]
    assert (new.baseline_calls, new.delta_calls_pct, new.delta_host_pct) == (0, None, None)
    text = opdiff.render_text(comparison)
    rows = {line.split()[0]: line.split() for line in text.splitlines()[4:]}
    assert rows["aten::empty"] == ["aten::empty", "1,293", "934", "-359", "-27.76%", "50,375", "3,124", "-47,251", "-93.80%"]
    assert rows["aten::new"] == ["aten::new", "0", "2", "+2", "-", "0", "5.5", "+5.5", "-"]
    # Aligned: every row as wide as the header, names left, numbers right.
    assert len({len(line) for line in text.splitlines()[4:]}) == 1
    assert opdiff.compare(opdiff.load(base), opdiff.load(exp), top=1).rows == comparison.rows[:1]
