"""The scaling report's figures: throughput and efficiency, step time, loss curves, energy.

PNG bytes only; :mod:`~orchestrator.analysis.report_write` puts them in files and on
the page. matplotlib is imported only in :func:`figures`, when a report is drawn, so
nothing else on the login node pays for it.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

from orchestrator.analysis.report import Report, Series

_SLUG = re.compile(r"[^A-Za-z0-9._-]+")


@dataclass(frozen=True)
class Figure:
    name: str  # file stem
    title: str
    png: bytes


def slug(name: str) -> str:
    return _SLUG.sub("-", name).strip("-") or "series"


def figures(report: Report) -> list[Figure]:
    """Every figure that has data to show (none is drawn empty)."""
    from matplotlib.figure import Figure as MplFigure  # here only: the report path alone needs it

    out = []
    for (_, name), group in report.compared().items():
        scaled = [s for s in group if any(r.scaled.speedup is not None for r in s.rows)]
        if scaled:
            what = "throughput, speedup and efficiency" + (" by revision" if len(group) > 1 else "")
            out.append(Figure(f"scaling-{slug(name)}", f"{name}: {what}", _png(_scaling(MplFigure, scaled))))
        for s in group:
            tag = slug(name) + (f"--{slug(s.source)}" if s.source else "")
            if any(r.step_time_s is not None for r in s.rows):
                out.append(Figure(f"steptime-{tag}", f"{s.label}: step time per configuration", _png(_steptime(MplFigure, s))))
            curves = sorted({c for r in s.rows for c in r.run.curves if "loss" in c})
            if curves:
                out.append(Figure(f"loss-{tag}", f"{s.label}: loss curves", _png(_loss(MplFigure, s, curves))))
    if any(r.energy.kwh is not None for r in report.rows):
        out.append(Figure("energy", "Energy and emissions per run", _png(_energy(MplFigure, report))))
    return out


def _png(fig) -> bytes:
    buf = io.BytesIO()
    # No "Software" stamp: the same data gives the same bytes, so DVC sees no change.
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    return buf.getvalue()


def _gpu_axis(ax, gpus: list[int]) -> None:
    if gpus and max(gpus) >= 4 * max(1, min(gpus)):
        ax.set_xscale("log", base=2)
    ax.set_xticks(sorted(set(gpus)))
    ax.set_xticklabels([str(g) for g in sorted(set(gpus))])
    ax.set_xlabel("GPUs")
    ax.grid(True, alpha=0.3)


def _scaling(MplFigure, group: list[Series]):
    """Throughput, speedup and efficiency against GPUs: one line per revision compared (each
    against its own baseline), and their MFU beside them when more than one is."""
    compared = len(group) > 1
    mfu = compared and any(r.mfu is not None for s in group for r in s.rows)
    fig = MplFigure(figsize=(16 if mfu else 12, 3.4), layout="constrained")
    axes = fig.subplots(1, 4 if mfu else 3)
    ax1, ax2, ax3 = axes[:3]
    every_gpu: list[int] = []
    for s in group:
        # A throughput and a GPU count: scaling.scale gives these rows (and the baseline) an ideal and an efficiency too.
        rows = [r for r in s.rows if r.scaled.speedup is not None]
        gpus = [r.gpus or 0 for r in rows]
        every_gpu += gpus
        label = s.source if compared else "measured"
        base = next(r for r in rows if r.config == s.baseline)
        ax1.plot(gpus, [r.throughput for r in rows], "o-", label=label)
        ax2.plot(gpus, [r.scaled.speedup for r in rows], "o-", label=label)
        ax3.plot(gpus, [100 * r.scaled.efficiency for r in rows if r.scaled.efficiency is not None], "o-", label=label)
        if not compared:
            assert base.throughput is not None
            ax1.plot(
                gpus, [base.throughput * r.scaled.ideal for r in rows if r.scaled.ideal is not None], "--", color="grey", label="ideal"
            )
            ax2.plot(gpus, [r.scaled.ideal for r in rows], "--", color="grey", label="ideal")
            for r in rows:
                ax1.annotate(r.config, (r.gpus, r.throughput), textcoords="offset points", xytext=(4, -10), fontsize="x-small")
        if mfu:
            shown = [(r.gpus or 0, 100 * r.mfu) for r in rows if r.mfu is not None]
            axes[3].plot([g for g, _ in shown], [m for _, m in shown], "o-", label=label)
    ax1.set_ylabel(group[0].unit or "throughput")
    ax2.set_ylabel("speedup vs each baseline" if compared else f"speedup vs {group[0].baseline}")
    ax3.axhline(100, ls="--", color="grey")
    ax3.set_ylabel(f"{group[0].mode} scaling efficiency (%)" if not compared else "scaling efficiency (%)")
    top = max([100.0] + [100 * r.scaled.efficiency for s in group for r in s.rows if r.scaled.efficiency is not None])
    ax3.set_ylim(0, 1.1 * top)
    if mfu:
        axes[3].set_ylabel("MFU (%), each against its own peak")
    for ax in axes:
        _gpu_axis(ax, every_gpu)
    for ax in (ax1, ax2, ax3) if compared else (ax1, ax2):
        ax.legend(loc="best", fontsize="small")
    return fig


def _steptime(MplFigure, s: Series):
    rows = [r for r in s.rows if r.step_time_s is not None]
    keys = sorted({k for r in rows for k in r.breakdown})
    fig = MplFigure(figsize=(8, 3.4), layout="constrained")
    ax = fig.subplots()
    bars = [("mean step time", [r.step_time_s for r in rows])] + [
        (k.removeprefix("profile_"), [r.breakdown.get(k) for r in rows]) for k in keys
    ]
    width = 0.8 / len(bars)
    for i, (label, values) in enumerate(bars):
        xs = [j + i * width for j, v in enumerate(values) if v is not None]
        ax.bar(xs, [v for v in values if v is not None], width, label=label)
    ax.set_xticks([j + width * (len(bars) - 1) / 2 for j in range(len(rows))])
    ax.set_xticklabels([r.config for r in rows])
    ax.set_xlabel("configuration (nodes x GPUs per node)")
    ax.set_ylabel("seconds" if not keys else "seconds per step (profiled window by category)")
    ax.legend(loc="best", fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    return fig


def _loss(MplFigure, s: Series, curves: list[str]):
    fig = MplFigure(figsize=(min(12, 4.5 * len(curves)), 3.4), layout="constrained")
    axes = fig.subplots(1, len(curves), squeeze=False)[0]
    for ax, name in zip(axes, curves, strict=True):
        for r in s.rows:
            points = r.run.curves.get(name)
            if points:
                steps, values = zip(*points, strict=True)
                ax.plot(steps, values, "o-" if len(points) < 3 else "-", label=r.config, markersize=4)
        ax.set_title(name, fontsize="medium")
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        ax.legend(loc="best", fontsize="small")
    return fig


def _energy(MplFigure, report: Report):
    rows = [(s, r) for s in report.series for r in s.rows if r.energy.kwh is not None]
    fig = MplFigure(figsize=(max(6, 0.9 * len(rows) + 2), 3.6), layout="constrained")
    ax = fig.subplots()
    colors = {"accounting": "tab:green", "sampled": "tab:blue", "estimate": "tab:orange"}
    for i, (_, r) in enumerate(rows):
        source = r.energy.source
        assert source is not None  # energy in joules names where it came from
        ax.bar(i, r.energy.kwh, color=colors[source], hatch="//" if source == "estimate" else None, label=source)
        if r.emissions.kg is not None:
            ax.annotate(f"{r.emissions.kg:.3g} kg CO2e", (i, r.energy.kwh), ha="center", va="bottom", fontsize="x-small")
    ax.set_xticks(range(len(rows)))
    ax.set_xticklabels([f"{r.config}\n{slug(s.name)[-18:]}" if len(report.series) > 1 else r.config for s, r in rows], fontsize="small")
    ax.set_ylabel("energy (kWh)")
    handles, labels = ax.get_legend_handles_labels()
    unique = dict(zip(labels, handles, strict=True))
    ax.legend(unique.values(), unique.keys(), loc="best", fontsize="small", title="source")
    ax.grid(True, axis="y", alpha=0.3)
    return fig
