"""`starmesh` command line: a thin dispatcher over cli.*."""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# Every subcommand module; each adds its parser (add_parser) and is imported only when listed here.
COMMANDS = ("cli.version", "cli.serve", "cli.health", "cli.generate",
            "cli.make_tiny", "cli.convert",
            "cli.imagine", "cli.conductor", "cli.up",
            "cli.status", "cli.trace",
            "cli.speak", "cli.demo",
            "cli.rollout", "cli.plan",
            "cli.render", "cli.gateway")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="starmesh",
        description="Serve multimodal models as a mesh of gRPC services, one per model component.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(name).add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    # Nothing a starmesh process runs may reach a model hub unless a user opts in.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return 2
    # Before any command imports transformers: progress bars and known-harmless warnings
    # stay out unless debugging (--log-level where a command has it, else $STARMESH_LOG_LEVEL).
    from runtime.quiet_logs import quiet_third_party

    quiet_third_party(getattr(args, "log_level", None))
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
