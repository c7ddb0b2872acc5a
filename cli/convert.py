"""`starmesh convert snac SRC DST`: released SNAC weights (config.json + pytorch_model.bin)
-> config.json + model.safetensors, read with torch's weights-only loader, once; starmesh
itself reads only safetensors.

    starmesh convert snac ~/Downloads/snac_24khz ckpt/orpheus/snac
"""
from __future__ import annotations

import argparse
import sys

FORMATS = ("snac",)


def add_parser(sub) -> None:
    p = sub.add_parser("convert", help="convert released weights to safetensors (once)",
                       description="Converts a released checkpoint's pickled weights with torch's weights-only "
                                   "loader into safetensors, the only weights starmesh reads.")
    p.add_argument("format", choices=FORMATS)
    p.add_argument("src", metavar="SRC", help="directory with config.json and pytorch_model.bin")
    p.add_argument("dst", metavar="DST", help="directory to write config.json and model.safetensors")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from core.errors import InvalidArgument
    from engine.models.snac.convert import convert_snac

    try:
        path = convert_snac(args.src, args.dst)
    except InvalidArgument as e:
        print(f"starmesh convert: {e}", file=sys.stderr)
        return 2
    print(path)
    return 0
