"""``shardstore downsample``: build a multiscale pyramid in one pass over the base level."""

from __future__ import annotations

import argparse

from ..ops.downsample import DEFAULT_MAX_MEMORY, downsample, parse_size
from ..ops.downsample_kernels import METHODS
from ._common import AddCommand, out


def _factor(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--factor takes integers x,y,z such as 2,2,1, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"--factor entries must be positive, got {text!r}")
    return values


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--workers takes a whole number of processes, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"--workers must be at least 1, got {value}")
    return value


def run(args: argparse.Namespace) -> None:
    result = downsample(args.path, args.factor, levels=args.levels, until=args.until, method=args.method,
                        max_memory=args.max_memory, progress=not args.no_progress, workers=args.workers,
                        scheduler=args.scheduler)
    plan = result.plan
    out(f"{result.location}: {result.format} {result.method} pyramid of {plan.levels} level(s) "
        f"in {result.seconds:.2f} s ({result.blocks} blocks of {'x'.join(map(str, plan.block))} base voxels, "
        f"{plan.streamed} level(s) streamed, estimated {plan.estimated_bytes / 2**20:.0f} MiB)")
    for k, (level, f) in enumerate(zip(result.levels, plan.cumulative), start=1):
        out(f"  level {k}: shape {level.shape}, factor {f}, chunks {level.chunks}"
            + (f", shards {level.shards}" if level.shards else ""))


def add_parser(add: AddCommand) -> None:
    p = add("downsample", "build a multiscale pyramid (precomputed scales, OME-Zarr, N5 s0..sN)",
            "Build the whole pyramid of PATH (an array, an OME-Zarr or N5 pyramid group, or a precomputed "
            "volume) in one pass over the base level with bounded memory. Precomputed: new scales in "
            "`info`; Zarr v3: an OME-Zarr 0.5 multiscales group; N5: s1..sN with n5-viewer / "
            "BigDataViewer attributes. Existing levels are replaced.")
    p.add_argument("path", metavar="PATH", help="the base array or its pyramid group")
    p.add_argument("--factor", type=_factor, default=(2, 2, 2), metavar="X,Y,Z",
                   help="factor per level in x,y,z order (default 2,2,2; 2,2,1 keeps z)")
    n = p.add_mutually_exclusive_group()
    n.add_argument("--levels", type=int, metavar="N", help="number of levels above the base")
    n.add_argument("--until", type=int, metavar="SIZE",
                   help="add levels until every downsampled axis is at most SIZE (default: the chunk edge)")
    p.add_argument("--method", choices=METHODS,
                   help="mean (images; integers round half to even), mode (labels, majority), min, max, "
                        "stride (default: mode for segmentations, mean otherwise)")
    p.add_argument("--max-memory", type=parse_size, default=DEFAULT_MAX_MEMORY, metavar="SIZE",
                   help="memory for data: blocks, levels, temporaries (default 1G; e.g. 256M), shared "
                        "by the workers")
    p.add_argument("--workers", type=_workers, default=1, metavar="N",
                   help="local processes computing blocks, each with max-memory / N (default 1: this "
                        "process, which already overlaps reads, kernels and writes on threads; not "
                        "the CPU count: the budget is split, each process costs an interpreter, and "
                        "it pays only where cores are idle, e.g. for labels, whose "
                        "compressed_segmentation codec holds one core per process)")
    p.add_argument("--scheduler", metavar="ADDRESS",
                   help="run the blocks on a dask.distributed scheduler (e.g. tcp://10.0.0.5:8786), one "
                        "task per block with max-memory / N each; the workers need shardstore and "
                        "access to PATH (a shared disk or s3://)")
    p.set_defaults(func=run)
