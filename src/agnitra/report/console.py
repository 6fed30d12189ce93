"""Rich renderers for the terminal: the variant table of `bench`, operator tables, decode lines.

These only build `rich` objects and strings; printing is the CLI's business. Off a terminal (a
pipe, a file, CI logs) a table is not drawn at some width and cut: `plain_rows` gives it as
tab-separated rows, whole.
"""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from agnitra.results import BenchReport, Correctness, OpRow, VariantResult
from agnitra.report.units import (
    MISSING,
    format_bytes,
    format_correctness,
    format_energy,
    format_flops,
    format_intensity,
    format_mib,
    format_number,
    format_percent,
    format_throughput,
    format_time_ms,
    format_time_us,
    truncate,
)

STATUS_STYLES = {"ok": "green", "skipped": "yellow", "failed": "red"}
SHAPES_WIDTH = 48


def bench_table(report: BenchReport, title: str | None = None) -> Table:
    """One row per variant: latency, throughput, memory, energy, roofline, correctness, reason."""
    table = Table(title=title if title is not None else _bench_title(report), title_justify="left")
    table.add_column("variant", style="bold", no_wrap=True)
    table.add_column("status", no_wrap=True)
    for header in ("median ms", "p95 ms", "throughput", "peak MiB", "energy/item", "roofline"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("correctness", no_wrap=True)
    table.add_column("reason", overflow="fold", ratio=1)
    for variant in report.variants:
        table.add_row(*_bench_row(variant))
    return table


def ops_table(rows: list[OpRow], limit: int = 15, title: str = "Top operators by self time") -> Table:
    """The `limit` operators with the largest share of self time, largest first."""
    ranked = sorted(rows, key=lambda row: row.share if row.share == row.share else 0.0, reverse=True)
    shown, hidden = ranked[:limit], ranked[limit:]
    table = Table(title=title, title_justify="left", caption=_hidden_caption(hidden), caption_justify="left")
    table.add_column("op", style="bold", overflow="fold")
    for header in ("calls", "self time", "share", "FLOPs", "bytes", "intensity"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("input shapes", overflow="ellipsis", max_width=SHAPES_WIDTH)
    for row in shown:
        table.add_row(
            row.op,
            f"{row.calls:,}",
            format_time_us(row.self_time_us),
            format_percent(row.share),
            format_flops(row.flops) if row.flops else MISSING,
            format_bytes(row.bytes) if row.bytes else MISSING,
            format_intensity(row.intensity),
            truncate(row.input_shapes, SHAPES_WIDTH),
        )
    return table


def candidates_table(report) -> Table:
    """The optimize search: one row per measured candidate, in the order measured."""
    from agnitra.report.console_units import candidate_cells
    from agnitra.report.optimize_report import CANDIDATE_HEADERS

    table = Table(title=f"Candidates ({report.search['evaluated']} measured of {report.search['space_size']}, {report.search['elapsed_s']} s)", title_justify="left")
    shown = [i for i, header in enumerate(CANDIDATE_HEADERS) if header != "predicted" or any(c.predicted for c in report.candidates)]  # predictions: the model strategy's
    for i in shown:
        table.add_column(CANDIDATE_HEADERS[i], justify="right" if 2 <= i <= 9 else "left", overflow="fold")
    spread = any(c.measured_on for c in report.candidates)  # --executor ray: the slot each was measured on
    if spread:
        table.add_column("measured on", overflow="fold")
    for c in report.candidates:
        cells = [candidate_cells(c)[i] for i in shown] + ([measured_on_cell(c.measured_on)] if spread else [])
        style = "bold green" if c.name == report.chosen else ("red" if c.status != "ok" or not c.passed else "")
        table.add_row(*[Text(cell, style=style) for cell in cells])
    return table


def measured_on_cell(where: dict | None) -> str:
    """The Ray slot that measured a candidate: slot, host, pid, GPU ('' where this machine's worker did)."""
    if not where:
        return ""
    gpu = f" GPU {','.join(where['gpus'])}" if where.get("gpus") else ""
    return f"slot {where['slot']} {where['host']}:{where['pid']}{gpu}"


def advisor_lines(report) -> list[str]:
    """The LLM advisor's proposals, one line each with its status, and who proposed the answer
    (nothing where no advisor was asked)."""
    advisor = report.search.get("advisor")
    if not advisor:
        return []
    lines = [f"advisor {advisor['model']} at {advisor['url']}: {len(advisor['proposals'])} proposal(s); the answer was proposed by {report.search.get('proposed_by') or 'nobody (the original model)'}"]
    for p in advisor["proposals"]:
        speedup = f" {p['speedup']:.2f}x" if p.get("speedup") else ""
        reason = f": {p['reason']}" if p.get("reason") else ""
        lines.append(f"  {p['status']}{speedup}  {p['recipe']}{reason}")
    return lines


def weights_summary(report: BenchReport) -> str | None:
    """One line: each variant's own weights and buffers on the device (the peak column holds every
    variant's, all resident in one run); None when no variant's are known."""
    known = [v for v in report.variants if v.status == "ok" and v.model_bytes is not None]
    if not known:
        return None
    return "weights and buffers on the device: " + ", ".join(f"{v.name} {format_mib(v.model_bytes)} MiB" for v in known)


def checks_summary(report: BenchReport) -> str | None:
    """One line: what verification ran every variant on (held-out, exploring sets, other shape,
    what the original model does besides its output); None when nothing was checked."""
    checks = report.conditions.get("verification")
    if not checks:
        return None
    exploring = checks.get("exploring") or {}
    checked = [name for name, said in exploring.items() if said.startswith("checked")]
    left = [name for name, said in exploring.items() if not said.startswith("checked")]
    parts = [f"verified on {checks.get('held_out')}",
             f"exploring inputs: {', '.join(checked) or 'none'}" + (f" ({', '.join(left)} left out)" if left else ""),
             f"other shape: {checks.get('other_shape')}",
             f"the model: {checks.get('behaviour')}"]
    return "; ".join(parts)


def decode_summary(report: BenchReport) -> str | None:
    """A line per variant that decoded tokens (tokens/s, per-token latency, prefill); None if none."""
    decoded = [v for v in report.variants if v.status == "ok" and v.decode is not None]
    if not decoded:
        return None
    return "\n".join(_decode_line(variant) for variant in decoded)


def _bench_title(report: BenchReport) -> str:
    name = str(report.workload.get("name", "workload"))
    weights = report.workload.get("weights")
    said = f" ({weights} weights)" if weights in ("trained", "random") else ""
    return f"{name}{said} on {report.device.name}"


def _bench_row(variant: VariantResult) -> list[str | Text]:
    latency = variant.latency_ms
    throughput = variant.throughput
    correctness = variant.correctness
    return [
        variant.name,
        Text(variant.status, style=STATUS_STYLES.get(variant.status, "")),
        format_number(latency.median, 4) if latency else MISSING,
        format_number(latency.p95, 4) if latency else MISSING,
        format_throughput(throughput.value, throughput.unit) if throughput else MISSING,
        format_mib(variant.peak_memory_bytes),
        format_energy(variant.energy_j_per_item),
        format_percent(variant.roofline_fraction),
        _correctness_text(correctness),
        variant.reason,
    ]


def _correctness_text(correctness: Correctness | None) -> Text | str:
    if correctness is None:
        return MISSING
    text = format_correctness(correctness.metric, correctness.value, correctness.passed)
    return Text(text, style="green" if correctness.passed else "red")


def _hidden_caption(hidden: list[OpRow]) -> str | None:
    if not hidden:
        return None
    share = sum(row.share for row in hidden if row.share == row.share)
    return f"{len(hidden)} more operator rows not shown ({format_percent(share)} of self time)"


def _decode_line(variant: VariantResult) -> str:
    decode = variant.decode
    assert decode is not None
    per_token = decode.per_token_ms
    return (
        f"{variant.name}: {format_number(decode.tokens_per_s, 4)} tokens/s, "
        f"per-token {format_time_ms(per_token.median)} median / {format_time_ms(per_token.p95)} p95, "
        f"prefill {format_time_ms(decode.prefill_ms)} "
        f"(prompt {decode.prompt_len}, {decode.new_tokens} new tokens, batch {decode.batch})"
    )


def plain_rows(table: Table) -> str:
    """The table as plain text, every cell whole: `# title`, the header row, then one
    tab-separated row per entry (tabs and newlines inside a cell become spaces), `# caption`."""
    columns = [[_plain(cell) for cell in column.cells] for column in table.columns]
    lines = [f"# {_plain(table.title)}"] if table.title else []
    lines.append("\t".join(_plain(column.header) for column in table.columns))
    lines += ["\t".join(row) for row in zip(*columns)]
    if table.caption:
        lines.append(f"# {_plain(table.caption)}")
    return "\n".join(lines)


def _plain(cell: RenderableType | None) -> str:
    if isinstance(cell, str):
        cell = Text.from_markup(cell)
    text = cell.plain if isinstance(cell, Text) else ("" if cell is None else str(cell))
    return " ".join(text.split())
