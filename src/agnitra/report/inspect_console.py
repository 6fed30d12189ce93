"""Rich renderers for `agnitra inspect`: the hotspot table, the operator mix and the graph breaks.

These only build `rich` objects; printing is the CLI's business. Text from the model (module
names, graph-break reasons) goes in as `Text`, so brackets in it are never read as Rich markup.
The small helpers here that summarise an IR (the op mix with time shares, module labels, the 80%
caption) are shared with the HTML page.
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.table import Table
from rich.text import Text

from agnitra.ir.graph import GraphIR
from agnitra.ir.hotspots import Hotspot, covering
from agnitra.report.units import (
    MISSING,
    format_bytes,
    format_flops,
    format_intensity,
    format_percent,
    format_time_us,
    is_number,
)

ROOT_LABEL = "(root)"
COVER_FRACTION = 0.8


def module_label(module: str) -> str:
    """A module's qualified name as shown; the root module ("") has no name of its own."""
    return module or ROOT_LABEL


def is_timed(ir: GraphIR) -> bool:
    """True when at least one node of the IR carries a measured time."""
    return any(is_number(node.time_us) for node in ir.nodes)


def op_mix_with_time(ir: GraphIR) -> dict[str, dict[str, Any]]:
    """`ir.op_mix()` (count, flops_share per kind) plus time_share, None when the IR is untimed."""
    mix = {kind: dict(entry) for kind, entry in ir.op_mix().items()}
    total = sum(node.time_us for node in ir.nodes if is_number(node.time_us))
    for kind, entry in mix.items():
        if not total:
            entry["time_share"] = None
            continue
        kind_time = sum(n.time_us for n in ir.nodes if n.kind == kind and is_number(n.time_us))
        entry["time_share"] = kind_time / total
    return mix


def cover_caption(hotspots: Sequence[Hotspot], fraction: float = COVER_FRACTION) -> str:
    """How many modules account for `fraction` of the measured time, as a sentence."""
    if not any(is_number(spot.share) for spot in hotspots):
        return "No measured time: modules are ranked by FLOPs."
    chosen = covering(list(hotspots), fraction)
    covered = sum(spot.share for spot in chosen if is_number(spot.share))
    if covered + 1e-9 < fraction:
        return f"All {len(chosen)} timed modules cover {format_percent(covered)} of the time."
    return (f"{len(chosen)} of {len(hotspots)} modules cover {format_percent(fraction, 0)} of the time "
            f"({format_percent(covered)}).")


def hotspot_table(hotspots: Sequence[Hotspot], limit: int = 15) -> Table:
    """The `limit` modules that take the most time, largest first, with their cost and bound."""
    shown, hidden = list(hotspots[:limit]), list(hotspots[limit:])
    caption = cover_caption(hotspots)
    if hidden:
        caption += f" {len(hidden)} more modules not shown."
    table = Table(title="Hotspots: time by module", title_justify="left", caption=caption,
                  caption_justify="left")
    table.add_column("module", style="bold", overflow="fold")
    table.add_column("type", overflow="fold")
    table.add_column("kind", no_wrap=True)
    for header in ("share", "time", "FLOPs", "bytes", "intensity"):
        table.add_column(header, justify="right", no_wrap=True)
    table.add_column("bound", no_wrap=True)
    for spot in shown:
        table.add_row(*_hotspot_row(spot))
    return table


def _hotspot_row(spot: Hotspot) -> list[str | Text]:
    return [
        Text(module_label(spot.module)),  # Text: names are shown literally, never read as markup
        Text(spot.module_type or MISSING),
        spot.kind or MISSING,
        format_percent(spot.share),
        format_time_us(spot.time_us),
        format_flops(spot.flops) if spot.flops else MISSING,
        format_bytes(spot.bytes) if spot.bytes else MISSING,
        format_intensity(spot.intensity),
        spot.bound or MISSING,
    ]


def op_mix_table(ir: GraphIR) -> Table:
    """Per operator kind: node count, share of FLOPs and, when the IR is timed, share of time."""
    timed = is_timed(ir)
    table = Table(title="Operator mix", title_justify="left")
    table.add_column("kind", style="bold", no_wrap=True)
    table.add_column("nodes", justify="right", no_wrap=True)
    table.add_column("FLOPs share", justify="right", no_wrap=True)
    if timed:
        table.add_column("time share", justify="right", no_wrap=True)
    for kind, entry in op_mix_with_time(ir).items():
        row = [kind, f"{entry['count']:,}", format_percent(entry["flops_share"])]
        if timed:
            row.append(format_percent(entry["time_share"]))
        table.add_row(*row)
    return table


def graph_breaks_table(ir: GraphIR) -> Table | None:
    """One row per graph break (reason, user-code location); None when the graph is whole."""
    if not ir.graph_breaks:
        return None
    table = Table(title=f"Graph breaks ({len(ir.graph_breaks)})", title_justify="left")
    table.add_column("#", justify="right", no_wrap=True)
    table.add_column("reason", overflow="fold", ratio=3)
    table.add_column("location", overflow="fold", ratio=1)
    for index, graph_break in enumerate(ir.graph_breaks, start=1):
        table.add_row(str(index), Text(graph_break.reason), Text(graph_break.location or MISSING))
    return table

