"""The L2 hit rate of a model's kernels, read by Nsight Compute (`ncu`) from the hardware counters.

A child Python process runs the model's calls inside the NVTX range `agnitra-l2`; ncu profiles
only the kernels launched inside it and reads, for each, the L2 sector lookups that hit and that
missed. The rate reported is over all of them (hits / lookups), so a kernel weighs by its traffic
(ncu's own `lts__t_sector_hit_rate.pct` read above 100% for small kernels on the H200). The clocks are left alone (`--clock-control none`) and the caches are not
flushed between kernels (`--cache-control none`): the rate is that of the calls run back to back.
Where ncu is missing or cannot read the counters (e.g. a sandbox without access to them), the
reading is None with the reason."""

from __future__ import annotations

import csv
import io
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

L2_RANGE = "agnitra-l2"
HITS = "lts__t_sectors_lookup_hit.sum"
MISSES = "lts__t_sectors_lookup_miss.sum"
MAX_KERNELS = 150  # profiled kernels at most (about 0.27 s apiece under ncu on the H200)


@dataclass
class L2Reading:
    hit_rate_pct: float
    sectors: float
    kernels: int

    def to_dict(self) -> dict:
        return {"hit_rate_pct": round(self.hit_rate_pct, 2), "sectors": self.sectors, "kernels": self.kernels}


def ncu_path() -> str | None:
    return shutil.which("ncu")


def ncu_command(ncu: str, log: Path, argv: list[str]) -> list[str]:
    return [ncu, "--clock-control", "none", "--cache-control", "none", "--target-processes", "application-only",
            "--nvtx", "--nvtx-include", f"{L2_RANGE}/", "--launch-count", str(MAX_KERNELS),
            "--metrics", f"{HITS},{MISSES}", "--csv", "--page", "raw", "--print-units", "base", "--log-file", str(log), *argv]


def measure(argv: list[str], folder: Path, timeout_s: float = 180.0) -> tuple[L2Reading | None, str]:
    """Run `python argv...` under ncu; the reading over the kernels of its `agnitra-l2` range, or
    None and why (ncu's own words where it failed). What the child and ncu print goes to
    `folder/ncu.out` as it comes."""
    ncu = ncu_path()
    if ncu is None:
        return None, "ncu (Nsight Compute) is not on PATH"
    log = folder / "ncu.csv"
    with (folder / "ncu.out").open("w") as said_file:
        try:
            done = subprocess.run(ncu_command(ncu, log, [sys.executable, *argv]), stdout=said_file, stderr=subprocess.STDOUT, timeout=timeout_s, env=dict(os.environ))
        except subprocess.TimeoutExpired:
            return None, f"ncu ran past {timeout_s:.0f} s"
    text = log.read_text(errors="replace") if log.is_file() else ""
    reading = parse_raw_csv(text)
    if reading is not None:
        return reading, ""
    printed = (folder / "ncu.out").read_text(errors="replace")
    said = [line.strip() for line in (text + "\n" + printed).splitlines() if "==ERROR==" in line or "==WARNING==" in line]
    if done.returncode != 0:
        return None, f"ncu failed (exit {done.returncode}): {said[0] if said else 'no reason given'}"
    return None, f"ncu read no kernel in the {L2_RANGE} range" + (f" ({said[0]})" if said else "")


def parse_raw_csv(text: str) -> L2Reading | None:
    """ncu's `--page raw --csv` output: a header row, a units row, a row a kernel."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    rows = list(csv.reader(io.StringIO("\n".join(lines))))
    if not rows or HITS not in rows[0] or MISSES not in rows[0]:
        return None
    at_hits, at_misses = rows[0].index(HITS), rows[0].index(MISSES)
    hits = lookups = 0.0
    kernels = 0
    for row in rows[1:]:
        hit, miss = _number(row, at_hits), _number(row, at_misses)
        if hit is None or miss is None:
            continue  # the units row, or a kernel whose counters were not read
        hits += hit
        lookups += hit + miss
        kernels += 1
    if not kernels or lookups <= 0:
        return None
    return L2Reading(100.0 * hits / lookups, lookups, kernels)


def _number(row: list[str], index: int) -> float | None:
    if index >= len(row):
        return None
    try:
        return float(row[index].replace(",", ""))
    except ValueError:
        return None
