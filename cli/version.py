"""`starmesh version`."""
from __future__ import annotations

import argparse


def add_parser(sub) -> None:
    p = sub.add_parser("version", help="print the starmesh version")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.version import starmesh_version

    print(f"starmesh {starmesh_version()}")
    return 0
