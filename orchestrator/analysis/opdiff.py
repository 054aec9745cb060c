"""Two profiled runs' operators side by side: calls and host time, baseline vs exp.

A run profiled with ``--profile-steps`` (``experiments/common/profiling.py``) leaves
``profile/operators.json`` in its output folder: per operator, calls and host time
per profiled step. The comparison is per step, so runs whose windows differ in
length still compare. Rows are sorted by the absolute change in host time (total,
children included: what the operator costs its caller), largest first; an operator
only one run called counts as 0 calls and 0 us in the other, and a percentage
change from 0 is None ("-" in the text). Standard library only: this runs on the login node.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from orchestrator.errors import OrchestratorError

OPERATORS_FILE = Path("profile") / "operators.json"
_FIELDS = ("calls", "host_total_us")


class ProfileDataError(OrchestratorError):
    """A run's operator profile cannot be found or read."""


@dataclass(frozen=True)
class Operator:
    """One operator's calls and host time (total, children included) per profiled step."""

    calls: float
    host_us: float


@dataclass(frozen=True)
class RunProfile:
    source: Path  # the operators.json read
    steps: int
    operators: dict[str, Operator]


@dataclass(frozen=True)
class OpDiffRow:
    operator: str
    baseline_calls: float
    exp_calls: float
    delta_calls: float
    delta_calls_pct: float | None
    baseline_host_us: float
    exp_host_us: float
    delta_host_us: float
    delta_host_pct: float | None


@dataclass(frozen=True)
class Comparison:
    baseline: RunProfile
    exp: RunProfile
    rows: list[OpDiffRow]  # the top ones, largest host-time change first
    operators: int  # how many operators either run called

    def to_json(self) -> dict:
        return {
            "baseline": {"source": str(self.baseline.source), "steps": self.baseline.steps},
            "exp": {"source": str(self.exp.source), "steps": self.exp.steps},
            "per": "profiled step",
            "operators": self.operators,
            "rows": [asdict(row) for row in self.rows],
        }


def load(path: Path) -> RunProfile:
    """A run's operators, from its output folder or from an operators.json itself."""
    source = path / OPERATORS_FILE if path.is_dir() else path
    if not source.is_file():
        where = f"no {OPERATORS_FILE} in {path}" if path.is_dir() else f"{path}: no such file or folder"
        raise ProfileDataError(
            where, hints=["give a run's output folder or its profile/operators.json; profile a run with --profile-steps START:COUNT"]
        )
    try:
        data = json.loads(source.read_text())
        steps = data["steps"]
        operators = {name: Operator(float(row["calls"]), float(row["host_total_us"])) for name, row in data["operators"].items()}
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ProfileDataError(f"{source}: not readable JSON ({e})") from e
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise ProfileDataError(
            f"{source}: not an operators.json (needs steps and operators: name -> {', '.join(_FIELDS)}; {type(e).__name__}: {e})"
        ) from e
    if not isinstance(steps, int) or steps < 1 or not all(math.isfinite(v) for op in operators.values() for v in (op.calls, op.host_us)):
        raise ProfileDataError(f"{source}: not an operators.json (steps must be a positive integer, calls and times finite numbers)")
    return RunProfile(source, steps, operators)


def compare(baseline: RunProfile, exp: RunProfile, top: int) -> Comparison:
    """The ``top`` operators whose host time per step changed most (ties: by name, for a stable order)."""
    zero = Operator(0.0, 0.0)
    rows = []
    for name in baseline.operators.keys() | exp.operators.keys():
        b, e = baseline.operators.get(name, zero), exp.operators.get(name, zero)
        rows.append(
            OpDiffRow(
                name,
                b.calls,
                e.calls,
                e.calls - b.calls,
                _pct(b.calls, e.calls),
                b.host_us,
                e.host_us,
                e.host_us - b.host_us,
                _pct(b.host_us, e.host_us),
            )
        )
    rows.sort(key=lambda r: (-abs(r.delta_host_us), r.operator))
    return Comparison(baseline, exp, rows[:top], len(rows))


def _pct(before: float, after: float) -> float | None:
    return 100 * (after - before) / before if before else None


_HEADER = (
    "Operator", "Baseline Calls", "Exp Calls", "Delta Calls", "Delta Calls%",
    "Baseline Host Duration (us)", "Exp Host Duration (us)", "Delta Host Duration (us)", "Delta Host Duration%",
)  # fmt: skip


def render_text(comparison: Comparison) -> str:
    """The table as the TensorBoard profiler's diff view prints it: plain columns, names left, numbers right."""
    lines = [
        f"baseline: {comparison.baseline.source} ({comparison.baseline.steps} steps)",
        f"exp:      {comparison.exp.source} ({comparison.exp.steps} steps)",
        f"per profiled step; top {len(comparison.rows)} of {comparison.operators} operators by |delta host duration|",
        "",
    ]
    cells = [_HEADER] + [_cells(r) for r in comparison.rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(_HEADER))]
    for row in cells:
        lines.append("  ".join([row[0].ljust(widths[0]), *(cell.rjust(w) for cell, w in zip(row[1:], widths[1:], strict=True))]).rstrip())
    return "\n".join(lines)


def _cells(r: OpDiffRow) -> tuple[str, ...]:
    calls = (_num(r.baseline_calls), _num(r.exp_calls), _num(r.delta_calls, sign=True), _percent(r.delta_calls_pct))
    host = (_num(r.baseline_host_us), _num(r.exp_host_us), _num(r.delta_host_us, sign=True), _percent(r.delta_host_pct))
    return (r.operator, *calls, *host)


def _num(value: float, sign: bool = False) -> str:
    """Whole numbers as such (calls usually are), else one decimal; thousands separated, like the seed's tables."""
    text = f"{value:{'+' if sign else ''},.0f}" if value == int(value) else f"{value:{'+' if sign else ''},.1f}"
    return "0" if text in ("+0", "-0") else text


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:+.2f}%"  # None: nothing in the baseline to compare with
