"""What every benchmark ends with: a table on stdout and the figures as JSON."""
from __future__ import annotations

import json
import os


def print_table(rows: list[tuple[str, str, str]], results: dict) -> None:
    """rows: (label, results key, unit)."""
    print("\n" + "\n".join(f"{label:28s} {results[key]:12.3f} {unit}" for label, key, unit in rows if key in results))


def write_json(path: str | None, results: dict) -> None:
    if not path:
        return
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=2, sort_keys=True)
    print(f"\nwrote {path}")


def cpu_ticks() -> tuple[int, int]:
    """(all CPU ticks, stolen ticks) of the machine so far (Linux /proc/stat; zeros elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0, 0
    return sum(fields), (fields[7] if len(fields) > 7 else 0)


def steal_share(before: tuple[int, int], after: tuple[int, int]) -> float:
    """Share of the machine's CPU time the hypervisor gave to other guests between two
    cpu_ticks() readings: figures measured while it is high are noisy."""
    total, stolen = after[0] - before[0], after[1] - before[1]
    return stolen / total if total > 0 else 0.0


def proc_cpu_s(pid: int) -> float:
    """User + system CPU seconds of another process (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
