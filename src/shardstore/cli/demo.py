"""``shardstore demo``: write, read back and verify a synthetic volume."""

from __future__ import annotations

import argparse

from ..demo import DEMO_FORMATS, run_demo
from ._common import AddCommand, CommandFailed


def run(args: argparse.Namespace) -> None:
    formats = None if args.format == "all" else [args.format]
    results = run_demo(args.dir, size=args.size, formats=formats, seed=args.seed,
                       progress=not args.no_progress)
    bad = [r.format for r in results if not r.ok]
    if bad:
        raise CommandFailed(f"demo: data read back differs from what was written ({', '.join(bad)})")


def add_parser(add: AddCommand) -> None:
    p = add("demo", "write, read back and verify a synthetic EM-like volume",
            "Generate a synthetic EM-like uint8 volume (seeded; no data or network needed), write "
            "it as a sharded array in DIR (chunks 64^3, shards 256^3), read it back, verify it, "
            "and print shapes, sizes on disk and throughput.")
    p.add_argument("dir", metavar="DIR", help="output directory (created if missing)")
    p.add_argument("--size", type=int, default=256, metavar="N", help="edge of the N^3 volume (default: 256)")
    p.add_argument("--format", default="all", choices=["all", *DEMO_FORMATS],
                   help="which format to demonstrate (default: all)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the volume (default: 0)")
    p.set_defaults(func=run)
