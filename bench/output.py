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
