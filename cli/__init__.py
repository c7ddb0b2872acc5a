"""`starmesh` subcommands, one module each: `add_parser(subparsers)` registers it and
sets `func(args) -> exit code`. Modules import heavy dependencies inside `func` only,
so `starmesh --help` and `starmesh health` start fast."""
