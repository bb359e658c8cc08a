"""Sweep output: the rich table, CSV, the plot, and the JSON document. No torch here."""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING, Any, Literal, TextIO

from gpudoctor.system.fileio import atomic_write_bytes, atomic_write_text
from gpudoctor.workload.recommend import speed_phrase

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from rich.console import Console

CSV_COLUMNS = (
    "device", "device_name", "mode", "batch_size", "workers", "status", "error", "epochs",
    "train_samples", "steps", "epoch_s", "samples_per_s", "data_wait_share", "step_p50_ms",
    "step_p95_ms", "gpu_util_mean_pct", "gpu_util_max_pct", "gpu_util_samples", "gpu_util_hz",
    "peak_allocated_bytes", "peak_reserved_bytes", "device_memory_total_bytes", "first_loss",
    "final_loss", "test_accuracy", "wall_s", "energy_j", "energy_per_epoch_j", "avg_power_w",
    "samples_per_joule", "energy_source", "energy_note",
)

MIB = 1024 ** 2


def sweep_json(doc: dict[str, Any]) -> str:
    return json.dumps(doc, indent=2, allow_nan=False)


def write_json(path: str, doc: dict[str, Any]) -> None:
    atomic_write_text(path, sweep_json(doc) + "\n")


def runs_csv(runs: list[dict[str, Any]]) -> str:
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=CSV_COLUMNS, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for run in runs:
        writer.writerow({k: ("" if run.get(k) is None else run.get(k)) for k in CSV_COLUMNS})
    return buffer.getvalue()


def write_csv(path: str, runs: list[dict[str, Any]]) -> None:
    atomic_write_text(path, runs_csv(runs))


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    if value is None:
        return "-"
    return format(value * scale, spec)


def render_table(doc: dict[str, Any], stream: TextIO, width: int | None = None) -> None:
    """Runs sorted by epoch duration, then speedups and the recommendation."""
    from rich.console import Console

    console = Console(file=stream, width=width or (None if stream.isatty() else 160),
                      highlight=False, soft_wrap=False)
    console.print(_runs_table(doc))
    _print_comparisons(console, doc)
    _print_recommendation(console, doc)
    if doc.get("interrupted"):
        console.print(f"[yellow]interrupted: {len(doc['runs'])} of {doc.get('planned_runs')} runs finished[/]")


def _runs_table(doc: dict[str, Any]) -> Any:
    """The runs, one row each, with the columns the runs measured."""
    from rich import box
    from rich.table import Table

    dataset = doc.get("dataset", {})
    title = (f"MNIST reference workload: {dataset.get('train_samples', '?')} training samples "
             f"({dataset.get('source', '?')}), {doc['config'].get('epochs', 1)} epoch(s)")
    if doc["config"].get("quick"):
        title += " · quick sweep: throughput only (too little training for accuracies to mean anything)"
    runs = doc["runs"]
    has_util = any(r.get("gpu_util_mean_pct") is not None for r in runs)
    has_memory = any(r.get("peak_allocated_bytes") is not None for r in runs)
    has_energy = any(r.get("samples_per_joule") is not None for r in runs)
    columns = [("dev", "left"), ("mode", "left"), ("batch", "right"), ("wk", "right"),
               ("epoch s", "right"), ("samples/s", "right"), ("wait", "right"), ("step ms", "right")]
    caption = "wk: DataLoader workers; wait: share of time waiting for data; step ms: p50/p95"
    if has_util:
        columns.append(("GPU %", "right"))
        caption += "; GPU %: NVML utilisation mean/max"
    if has_memory:
        columns.append(("MiB", "right"))
        caption += "; MiB: peak allocated/reserved"
    if has_energy:
        columns += [("W", "right"), ("smp/J", "right")]
        caption += "; W: average power; smp/J: samples per joule (NVML energy counter, or RAPL for the CPU)"
    columns += [("loss", "right"), ("acc", "right")]
    table = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
                  padding=(0, 1, 0, 0), pad_edge=False, caption=caption, caption_justify="left")
    for name, justify in columns:
        table.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
    for run in runs:
        workers = "-" if run["workers"] is None else str(run["workers"])
        head = [run["device"], run["mode"], str(run["batch_size"]), workers]
        if run["status"] != "ok":
            style = "yellow" if run["status"] == "oom" else "red"
            table.add_row(*head, f"[{style}]{run['status'].upper()}[/]", *["-"] * (len(columns) - 5))
            continue
        row = head + [_fmt(run["epoch_s"], ".2f"), _fmt(run["samples_per_s"], ",.0f"),
                      _fmt(run["data_wait_share"], ".0%"),
                      f"{_fmt(run['step_p50_ms'], '.1f')}/{_fmt(run['step_p95_ms'], '.1f')}"]
        if has_util:
            row.append("-" if run["gpu_util_mean_pct"] is None else
                       f"{run['gpu_util_mean_pct']:.0f}/{run['gpu_util_max_pct']:.0f}")
        if has_memory:
            row.append("-" if run["peak_allocated_bytes"] is None else
                       f"{run['peak_allocated_bytes'] / MIB:.0f}/{run['peak_reserved_bytes'] / MIB:.0f}")
        if has_energy:
            row += [_fmt(run.get("avg_power_w"), ".0f"), _fmt(run.get("samples_per_joule"), ",.1f")]
        row += [_fmt(run["final_loss"], ".3f"), _fmt(run["test_accuracy"], ".1%")]
        table.add_row(*row)
    return table


def _print_comparisons(console: Console, doc: dict[str, Any]) -> None:
    """The devices, CUDA against CPU, and the sweep's notes."""
    devices = doc.get("devices", {})
    if devices:
        console.print("devices: " + "; ".join(f"{k} = {v}" for k, v in devices.items()))
    best_pair = doc.get("speedups", {}).get("best_vs_best")
    if best_pair:
        console.print(f"CUDA vs CPU: best against best, CUDA is {speed_phrase(best_pair['speedup'])} "
                      f"({best_pair['cuda']}: {best_pair['cuda_samples_per_s']:,.0f} samples/s; "
                      f"{best_pair['cpu']}: {best_pair['cpu_samples_per_s']:,.0f} samples/s)")
        for pair in doc["speedups"]["same_config"]:
            workers = "" if pair["workers"] is None else f", {pair['workers']} workers"
            console.print(f"  {pair['mode']} batch {pair['batch_size']}{workers}: CUDA {speed_phrase(pair['speedup'])}")
    for note in doc.get("notes", []):
        console.print(f"[dim]note: {note}[/]")


def _print_recommendation(console: Console, doc: dict[str, Any]) -> None:
    rec = doc.get("recommendation") or {}
    console.print(f"\n[bold]Recommendation:[/] {rec.get('summary', '-')}")
    for reason in rec.get("reasons", []):
        console.print(f"  - {reason}")
    if rec.get("starved_reasons"):
        verdict = {True: "starved", False: "fed", None: "not measured"}[rec.get("starved")]
        console.print(f"[bold]Input pipeline:[/] {verdict}")
        for reason in rec["starved_reasons"]:
            console.print(f"  - {reason}")
    if rec.get("headroom"):
        console.print(f"[bold]Memory headroom:[/] {rec['headroom']['text']}")


def render_plot(doc: dict[str, Any]) -> bytes:
    """PNG: samples/s and GPU utilisation against batch size, one line per device and mode."""
    try:
        import matplotlib
    except ImportError:
        from gpudoctor.core.errors import UsageError

        raise UsageError("--plot needs matplotlib: pip install 'gpudoctor[plot]'") from None
    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure

    lines: dict[tuple[str, str], dict[int, dict[str, Any]]] = {}
    for run in doc["runs"]:
        if run["status"] != "ok" or not run.get("samples_per_s"):
            continue
        series = lines.setdefault((run["device"], run["mode"]), {})
        kept = series.get(run["batch_size"])
        if kept is None or run["samples_per_s"] > kept["samples_per_s"]:
            series[run["batch_size"]] = run  # best worker count at this batch size
    figure = Figure(figsize=(16, 4.5), dpi=100)
    speed, util, efficiency = figure.subplots(1, 3)
    any_util = False
    for (device, mode), series in sorted(lines.items()):
        sizes = sorted(series)
        label = f"{device} {mode}"
        speed.plot(sizes, [series[b]["samples_per_s"] for b in sizes], marker="o", label=label)
        points = [(b, series[b]["gpu_util_mean_pct"]) for b in sizes if series[b].get("gpu_util_mean_pct") is not None]
        if points:
            any_util = True
            util.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    speed.set_yscale("log")
    _label_axis(speed, "Throughput", "batch size", "samples/s (best worker count)", legend=bool(lines))
    util.set_ylim(0, 105)
    _label_axis(util, "GPU utilisation", "batch size", "GPU utilisation, mean % (NVML)", legend=any_util)
    if not any_util:
        util.text(0.5, 0.5, "no GPU utilisation readings\n(CPU runs only, or NVML unavailable)",
                  ha="center", va="center", transform=util.transAxes)
    _plot_efficiency(efficiency, doc["runs"])
    figure.suptitle("gpudoctor bench mnist" + (" (interrupted)" if doc.get("interrupted") else ""))
    figure.tight_layout()
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def _plot_efficiency(axis: Axes, runs: list[dict[str, Any]]) -> None:
    """Throughput against samples per joule, one point per run (top right is best)."""
    points: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        if run["status"] == "ok" and run.get("samples_per_s") and run.get("samples_per_joule"):
            points.setdefault(f"{run['device']} {run['mode']}", []).append(
                (run["samples_per_joule"], run["samples_per_s"]))
    for label, xy in sorted(points.items()):
        axis.scatter([p[0] for p in xy], [p[1] for p in xy], label=label)
    if points:
        axis.set_yscale("log")
    _label_axis(axis, "Throughput against energy efficiency", "samples per joule", "samples/s",
                legend=bool(points), log_x=bool(points), grid="major")
    if not points:
        notes = sorted({str(run["energy_note"]) for run in runs if run.get("energy_note")})
        axis.text(0.5, 0.5, "no energy readings\n" + ("\n".join(notes[:2]) if notes else ""),
                  ha="center", va="center", transform=axis.transAxes, fontsize=8, wrap=True)


def _label_axis(axis: Axes, title: str, xlabel: str, ylabel: str, *, legend: bool, log_x: bool = True,
                grid: Literal["major", "minor", "both"] = "both") -> None:
    """Title, labels and grid of one chart (batch sizes span decades: log x by default)."""
    if log_x:
        axis.set_xscale("log")
    axis.set_xlabel(xlabel)
    axis.set_ylabel(ylabel)
    axis.set_title(title)
    axis.grid(True, which=grid, alpha=0.3)
    if legend:
        axis.legend(fontsize=8)


def write_plot(path: str, doc: dict[str, Any]) -> None:
    atomic_write_bytes(path, render_plot(doc))
