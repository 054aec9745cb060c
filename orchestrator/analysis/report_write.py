"""Writing the scaling report: DVC plots data, ``report.json``, ``report.html`` and ``summary.md``.

Into the output folder (``reports/`` by default):

- ``plots/scaling/<series>.csv`` (gpus, config, throughput, speedup, ideal_speedup,
  efficiency) and ``plots/energy.csv``: data series for ``dvc plots show/diff``;
- ``figures/*.png``: the same figures the page shows (DVC renders images as plots too);
- ``report.json``: per item, what the report computed (a DVC metrics file);
- ``report.html``: one static page, figures embedded as base64 PNG, no scripts, fonts
  or anything else fetched: it opens from disk without a network;
- ``summary.md``: the tables in Markdown, for a pull request.

Missing values are written as "—" (empty cells in the CSV files), never as 0.
The figures are drawn by :mod:`~orchestrator.analysis.figures`.
"""

from __future__ import annotations

import base64
import csv
import html
import io
import json
from collections.abc import Callable, Iterable
from pathlib import Path

from orchestrator.analysis.figures import Figure, figures, slug
from orchestrator.analysis.report import Report, ReportRow, Series, metrics_of, workload_notes
from orchestrator.util import files

DASH = "—"


def write(report: Report, out: Path) -> list[Path]:
    """Write every output (replacing the files an earlier report wrote); returns their paths."""
    figs = figures(report)
    plots, figdir = out / "plots", out / "figures"
    # Only our own earlier files go: --out may name a folder that holds other things.
    for old in [*plots.glob("scaling/*.csv"), *plots.glob("energy.csv"), *figdir.glob("*.png")]:
        old.unlink()
    written = [_write(plots / "scaling" / f"{_tag(s)}.csv", _csv(_scaling_rows(s))) for s in report.series if _scaling_rows(s)]
    # Every run, an unknown energy left empty: the file is a declared DVC plot, so it
    # exists even when no run has an energy figure (a local CPU run).
    energy_rows = [_energy_row(s, r) for s in report.series for r in s.rows]
    if energy_rows:
        written.append(_write(plots / "energy.csv", _csv(energy_rows)))
    written += [_write(figdir / f"{f.name}.png", f.png) for f in figs]
    written.append(_write(out / "report.json", json.dumps(metrics_of(report), indent=2, sort_keys=True) + "\n"))
    written.append(_write(out / "summary.md", markdown(report)))
    written.append(_write(out / "report.html", page(report, figs)))
    return written


def _tag(s: Series) -> str:
    """A series' name in file names: its revision's after it when the report compares several."""
    return slug(s.name) + (f"--{slug(s.source)}" if s.source else "")


def _write(path: Path, data: str | bytes) -> Path:
    files.atomic_write(path, data)
    return path


def _csv(rows: list[dict]) -> str:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    writer.writerows({k: "" if v is None else v for k, v in row.items()} for row in rows)
    return buf.getvalue()


def _scaling_rows(s: Series) -> list[dict]:
    return [
        {
            "gpus": r.gpus,
            "config": r.config,
            "throughput": r.throughput,
            "speedup": r.scaled.speedup,
            "ideal_speedup": r.scaled.ideal,
            "efficiency": r.scaled.efficiency,
        }
        for r in s.rows
        if r.scaled.speedup is not None
    ]


def _energy_row(s: Series, r: ReportRow) -> dict:
    return {
        "item": r.item,
        **({"revision": s.source} if s.source else {}),
        "series": s.name,
        "config": r.config,
        "gpus": r.gpus,
        "energy_kwh": r.energy.kwh,
        "emissions_kg": r.emissions.kg,
        "energy_source": r.energy.source,
    }


# --- formatting --------------------------------------------------------------------


def _fmt(value: float | None, spec: str, suffix: str = "") -> str:
    return DASH if value is None else f"{value:{spec}}{suffix}"


def _software(r: ReportRow) -> str:
    torch, lightning = r.metric("torch_version"), r.metric("lightning_version")
    parts = [f"torch {torch}" if torch else None, f"Lightning {lightning}" if lightning else None]
    return ", ".join(p for p in parts if p) or DASH


def _extra_columns(s: Series) -> list[tuple[str, Callable[[ReportRow], str]]]:
    """Columns only some experiments have (the LM's data wait and peak memory)."""
    cols: list[tuple[str, Callable[[ReportRow], str]]] = []
    units = sorted({r.cost_unit for r in s.rows if r.cost_unit})
    if units:
        both = len(units) > 1  # a series over revisions billed differently names each value's unit
        cols.append((f"cost ({' or '.join(units)})", lambda r: _fmt(r.cost, ".3g", f" {r.cost_unit}" if both else "")))
    if any(isinstance(r.metric("data_wait_share"), (int, float)) for r in s.rows):
        cols.append(("data wait", lambda r: _fmt(_num(r.metric("data_wait_share")), ".1%")))
    if any(isinstance(r.metric("peak_memory_bytes"), (int, float)) for r in s.rows):
        cols.append(
            (
                "peak memory (GB)",
                lambda r: _fmt(None if _num(r.metric("peak_memory_bytes")) is None else r.metric("peak_memory_bytes") / 1e9, ".3g"),
            )
        )
    return cols


def _num(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def table(s: Series) -> tuple[list[str], list[list[str]]]:
    """The series' table: header and rows of text, missing values as a dash."""
    extra = _extra_columns(s)
    header = ["config", "GPUs", s.unit or "throughput", "speedup", "efficiency", "step time (s)", "MFU"]
    header += [name for name, _ in extra] + ["energy (kWh)", "energy source", "CO2e (kg)", "hardware", "software"]
    rows = []
    for r in s.rows:
        cells = [
            r.config + (" (missing)" if r.run.missing else ""),
            _fmt(r.gpus, "d"),
            _fmt(r.throughput, ",.4g"),
            _fmt(r.scaled.speedup, ".2f", "x"),
            _fmt(r.scaled.efficiency, ".0%"),
            _fmt(r.step_time_s, ".3g"),
            _fmt(r.mfu, ".1%"),
        ]
        cells += [fn(r) for _, fn in extra]
        hardware = DASH if r.run.missing else f"{r.profile} · {r.device}"  # a missing run says nothing of where it would run
        cells += [_fmt(r.energy.kwh, ".3g"), r.energy.source or DASH, _fmt(r.emissions.kg, ".3g"), hardware, _software(r)]
        rows.append(cells)
    return header, rows


def comparison(group: list[Series], to: float | None) -> tuple[list[str], list[list[str]]]:
    """One series on several revisions side by side: per configuration, a row per revision.

    ``to``: the tokens (or samples) the time column counts to (at each run's measured
    throughput); None: a billion tokens or a million samples.
    """
    unit = next((s.unit for s in group if s.unit), None)
    amount = to or (1e9 if unit == "tokens/s" else 1e6)
    what = "tokens" if unit == "tokens/s" else "samples"
    header = [
        "config", "revision", "hardware", f"{unit or 'throughput'} per device", "speedup", "efficiency", "MFU (own peak)",
        f"hours to {amount:.3g} {what}", f"kWh per 1M {what}", f"kg CO2e per 1M {what}", f"cost per 1M {what}",
    ]  # fmt: skip
    rows: list[tuple[int, str, int, list[str]]] = []
    for order, s in enumerate(group):
        for r in s.rows:
            hours = amount / r.throughput / 3600 if r.throughput else None
            cells = [
                r.config + (" (missing)" if r.run.missing else ""),
                s.source or DASH,
                DASH if r.run.missing else f"{r.profile} · {r.device}",
                _fmt(r.per_device, ",.4g"),
                _fmt(r.scaled.speedup, ".2f", "x"),
                _fmt(r.scaled.efficiency, ".0%"),
                _mfu_cell(r),
                _fmt(hours, ".3g"),
                _fmt(r.per_million(r.energy.kwh, s.unit), ".3g"),
                _fmt(r.per_million(r.emissions.kg, s.unit), ".3g"),
                DASH if (c := r.per_million(r.cost, s.unit)) is None else f"{c:.3g} {r.cost_unit}",
            ]
            rows.append((r.gpus if r.gpus is not None else 1 << 30, r.config, order, cells))
    return header, [cells for *_, cells in sorted(rows, key=lambda t: t[:3])]


def _mfu_cell(r: ReportRow) -> str:
    """MFU, or why there is none (a cluster without a peak figure, a run without FLOPs)."""
    if r.run.missing:
        return DASH
    if r.mfu is None:
        return f"{DASH} (no peak in the profile)" if "gives no peak" in r.mfu_note else f"{DASH} (no model FLOPs)"
    return f"{r.mfu:.1%}" + (" (the run's own peak)" if r.mfu_note.startswith("the run's own") else "")


def breakdowns(group: list[Series]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per configuration that some revision profiled (``--profile-steps``): the step time by category,
    each revision's microseconds and share side by side, as seed 000's execution summaries."""
    tables = []
    configs = list(dict.fromkeys(r.config for s in group for r in s.rows))
    for config in configs:
        found = []
        for s in group:
            for r in s.rows:
                prof = r.metric("profile")
                if r.config == config and isinstance(prof, dict) and isinstance(prof.get("step_ms"), (int, float)):
                    found.append((s.source or DASH, prof))
        if not found:
            continue
        categories = list(dict.fromkeys(k.removesuffix("_pct") for _, prof in found for k in prof if k.endswith("_pct")))
        header = ["category"] + [f"{label} {what}" for label, _ in found for what in ("time (us)", "%")]
        rows = [["average step time"] + [cell for _, prof in found for cell in (f"{prof['step_ms'] * 1000:,.0f}", "100")]]
        for name in categories:
            cells = []
            for _, prof in found:
                pct = _num(prof.get(f"{name}_pct"))
                cells += [_fmt(None if pct is None else pct / 100 * prof["step_ms"] * 1000, ",.0f"), _fmt(pct, ".2f")]
            rows.append([name.replace("_", " ")] + cells)
        tables.append((config, header, rows))
    return tables


def _mode(s: Series) -> str:
    batch = next((r.metric("batch_size") for r in s.rows if r.metric("batch_size") is not None), None)
    return {
        "weak": f"weak scaling (per-device batch {batch} fixed, global batch grows)",
        "strong": "strong scaling (global batch fixed)",
        "mixed": "mixed: neither the per-device nor the global batch is fixed; efficiency = throughput per device vs the baseline",
        "single": "one GPU count: nothing to scale against",
    }[s.mode]


def _series_lines(s: Series) -> list[str]:
    lines = [f"{_mode(s)}; baseline {s.baseline or DASH}"]
    lines += [f"MFU {note}" for note in sorted({r.mfu_note for r in s.rows if r.mfu is not None})]
    lines += list(s.notes)
    missing = [r for r in s.rows if r.run.missing]
    lines += [f"missing: {r.config} ({r.item}): {r.run.problem}" for r in missing]
    return lines


def _provenance_lines(s: Series) -> list[str]:
    lines = []
    for r in s.rows:
        p = r.run.provenance
        if not p:
            lines.append(f"{r.config} ({r.item}): no provenance.json")
            continue
        commit = str(p.get("git_commit") or DASH)[:12] + (" (dirty)" if p.get("git_dirty") else "")
        lines.append(
            f"{r.config} ({r.item}): job {p.get('job_id', DASH)} ({p.get('backend', DASH)}, profile {p.get('profile', DASH)}), "
            f"nodes {p.get('nodelist') or p.get('nodes') or DASH}, elapsed {p.get('elapsed_s', DASH)} s, requeues {p.get('requeues', 0)}, "
            f"commit {commit}"
        )
    return lines


def _energy_lines(s: Series) -> list[str]:
    return [
        f"{r.config} ({r.item}): {r.energy.source or 'no energy'}: {r.energy.note}; emissions: {r.emissions.note}"
        + (f"; cost: {r.cost_note}" if r.cost_unit else "")
        for r in s.rows
        if not r.run.missing
    ]


# --- Markdown ----------------------------------------------------------------------


def markdown(report: Report) -> str:
    out = [f"## Scaling report ({len(report.rows)} runs, {len(report.missing)} missing)", ""]
    profiles = sorted({r.profile for r in report.rows if not r.run.missing})
    out += [f"Profile(s): {', '.join(profiles) or DASH}. Written by `orchestrator report`; a dash is a missing value.", ""]
    for (_, name), group in report.compared().items():
        if len(group) > 1:
            out += [f"### {name}: {', '.join(str(s.source) for s in group)} side by side", ""]
            out += [f"- {_md(line)}" for line in workload_notes(group)]
            out += _md_table(*comparison(group, report.to)) + [""]
            for config, header, rows in breakdowns(group):
                out += [f"Step time breakdown, {config} (profiled steps):", ""] + _md_table(header, rows) + [""]
        for s in group:
            out += [f"### {s.label}", ""]
            out += [f"- {_md(line)}" for line in _series_lines(s)] + [""]
            out += _md_table(*table(s))
            out += ["", "<details><summary>Energy: where each value comes from</summary>", ""]
            out += [f"- {_md(line)}" for line in _energy_lines(s)] + ["", "</details>", ""]
    if report.notes:
        out += ["### Notes", ""] + [f"- {_md(n)}" for n in report.notes] + [""]
    return "\n".join(out)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(_md(h) for h in header) + " |", "|" + "---|" * len(header)] + [
        "| " + " | ".join(_md(c) for c in row) + " |" for row in rows
    ]


def _md(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


# --- HTML --------------------------------------------------------------------------

_CSS = """
body { font-family: sans-serif; margin: 2em; color: #222; max-width: 1200px; }
table { border-collapse: collapse; margin: 0.5em 0 1em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: right; }
th { background: #f0f0f0; } td:first-child, td:nth-last-child(-n+2) { text-align: left; }
tr.missing td { color: #a00; background: #fff4f4; }
figure { margin: 1em 0; } figure img { max-width: 100%; border: 1px solid #eee; }
.notes li { margin: 0.2em 0; } details { margin: 0.5em 0 1.5em; }
"""


def page(report: Report, figs: Iterable[Figure]) -> str:
    """The whole page: inline CSS, inline images, no scripts."""
    e = html.escape
    figs = list(figs)
    profiles = ", ".join(sorted({r.profile for r in report.rows if not r.run.missing})) or DASH
    counts = f"{len(report.rows)} runs, {len(report.missing)} missing (shown as {DASH}, never as 0)"
    body = [f"<h1>Scaling report</h1><p>{counts}. Runs' profiles: {e(profiles)}; the matrix as resolved for {e(report.cluster)}.</p>"]
    for (_, name), group in report.compared().items():
        if len(group) > 1:
            body.append(f"<h2>{e(name)}: {e(', '.join(str(s.source) for s in group))} side by side</h2>")
            notes = workload_notes(group)
            if notes:
                body.append("<ul class='notes'>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
            body.append(_html_table(*comparison(group, report.to)))
            for config, header, rows in breakdowns(group):
                body.append(f"<p>Step time breakdown, {e(config)} (profiled steps):</p>" + _html_table(header, rows))
            body += [_img(f) for f in figs if f.name == f"scaling-{slug(name)}"]
        for s in group:
            body += _html_series(s, figs, "h3" if len(group) > 1 else "h2", own_scaling=len(group) == 1)
    for f in figs:
        if f.name == "energy":
            body.append("<h2>Energy</h2>" + _img(f))
    if report.notes:
        body.append("<h2>Notes</h2><ul class='notes'>" + "".join(f"<li>{e(n)}</li>" for n in report.notes) + "</ul>")
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'><title>Scaling report</title>"
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _html_series(s: Series, figs: list[Figure], heading: str, own_scaling: bool) -> list[str]:
    e = html.escape
    header, rows = table(s)
    body = [
        f"<{heading}>{e(s.label)}</{heading}><ul class='notes'>" + "".join(f"<li>{e(line)}</li>" for line in _series_lines(s)) + "</ul>"
    ]
    body.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>")
    for r, cells in zip(s.rows, rows, strict=True):
        cls = " class='missing'" if r.run.missing else ""
        body.append(f"<tr{cls}>" + "".join(f"<td>{e(c)}</td>" for c in cells) + "</tr>")
    body.append("</table>")
    for f in figs:
        if f.name.endswith(f"-{_tag(s)}") and (own_scaling or not f.name.startswith("scaling-")):
            body.append(_img(f))
    body.append(
        "<details><summary>Energy: where each value comes from</summary><ul>"
        + "".join(f"<li>{e(x)}</li>" for x in _energy_lines(s))
        + "</ul></details>"
    )
    body.append(
        "<details><summary>Provenance: jobs, nodes, code</summary><ul>"
        + "".join(f"<li>{e(x)}</li>" for x in _provenance_lines(s))
        + "</ul></details>"
    )
    return body


def _html_table(header: list[str], rows: list[list[str]]) -> str:
    e = html.escape
    head = "<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in header) + "</tr>"
    return head + "".join("<tr>" + "".join(f"<td>{e(c)}</td>" for c in row) + "</tr>" for row in rows) + "</table>"


def _img(f: Figure) -> str:
    data = base64.b64encode(f.png).decode()
    title = html.escape(f.title)
    return f"<figure><img src='data:image/png;base64,{data}' alt='{title}'><figcaption>{title}</figcaption></figure>"
