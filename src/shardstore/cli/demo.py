"""``shardstore demo``: write, read back, verify and downsample synthetic data in every format."""

from __future__ import annotations

import argparse

from ..demo import DEMO_FORMATS, run_demo
from ._common import AddCommand, CommandFailed


def run(args: argparse.Namespace) -> None:
    formats = None if args.format == "all" else [args.format]
    results = run_demo(args.dir, size=args.size, formats=formats, seed=args.seed,
                       progress=not args.no_progress)
    bad = [f"{r.format} {r.dataset}" for r in results if not r.ok]
    if bad:
        raise CommandFailed(f"demo: data read back differs from what was written ({', '.join(bad)})")


def add_parser(add: AddCommand) -> None:
    p = add("demo", "write, verify and downsample a synthetic EM volume in every format",
            "Generate a synthetic EM-like uint8 volume and a matching uint64 segmentation (seeded; no "
            "data or network needed); write both in DIR as sharded Zarr v3 (OME-Zarr), N5 and sharded "
            "Neuroglancer precomputed, and per-label statistics as a bcolz ctable; read everything "
            "back and verify it; build each pyramid (mean for the image, mode for the labels) and "
            "check every level; print sizes and throughput; then `shardstore view DIR` shows it.")
    p.add_argument("dir", metavar="DIR", help="output directory (created if missing)")
    p.add_argument("--size", type=int, default=256, metavar="N", help="edge of the N^3 volume (default: 256)")
    p.add_argument("--format", default="all", choices=["all", *DEMO_FORMATS],
                   help="which format to demonstrate (default: all)")
    p.add_argument("--seed", type=int, default=0, help="random seed of the volume (default: 0)")
    p.set_defaults(func=run)
