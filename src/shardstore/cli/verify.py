"""``shardstore verify``: decode every stored unit; list each failure with its key."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from typing import Self

from ..demo import format_bytes
from ..errors import NodeNotFoundError
from ..ops.integrity import ScanReport, scan
from ._common import AddCommand, CommandFailed, local_dir, out

#: verify lists at most this many problems (all are counted)
MAX_LISTED = 20


class Bars:
    """tqdm bars, one per array, for ``integrity.scan``'s ``progress`` (closed at exit)."""

    def __init__(self, verb: str, enabled: bool) -> None:
        self.verb, self.enabled, self.stack = verb, enabled, ExitStack()

    def __call__(self, name: str, total: int) -> Callable[[int], None] | None:
        if not self.enabled:
            return None
        from tqdm import tqdm

        bar = self.stack.enter_context(tqdm(total=total, desc=f"{self.verb} {name or '/'}", unit="chunk",
                                            dynamic_ncols=True, leave=False))
        return bar.update

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stack.close()


def node_lines(report: ScanReport) -> Iterator[str]:
    """One line per array / key-value store: units decoded and how far that checks them."""
    for n in report.nodes:
        yield f"  {n.name or '/'} ({n.format}): {n.units} unit(s), {n.check_text()}"


def problem_lines(report: ScanReport, limit: int = MAX_LISTED) -> Iterator[str]:
    problems = [(n.name or "/", p) for n in report.nodes for p in n.problems]
    for name, p in problems[:limit]:
        yield f"  {name}{p.region}: {p.where}: {p.error}"
    if len(problems) > limit:
        yield f"  ... and {len(problems) - limit} more"


def scan_path(path: str, progress: Bars) -> ScanReport:
    """``scan(path)``; for a plain local directory (the demo's, say), every dataset directly
    inside it, as ``ls`` and ``view`` take such a directory."""
    try:
        return scan(path, progress=progress)
    except NodeNotFoundError as not_found:
        local = local_dir(path)
        merged = ScanReport(path)
        for child in sorted(local.iterdir()) if local is not None else []:
            if not child.is_dir():
                continue
            try:
                found = scan(str(child), progress=progress)
            except NodeNotFoundError:
                continue
            for node in found.nodes:
                node.name = f"{child.name}/{node.name}" if node.name else child.name
            merged.nodes += found.nodes
            merged.temps += found.temps
            merged.orphans += found.orphans
        if not merged.nodes:
            raise not_found
        return merged


def run(args: argparse.Namespace) -> None:
    t0 = time.perf_counter()
    with Bars("verifying", not args.no_progress) as bars:
        report = scan_path(args.path, bars)
    seconds = time.perf_counter() - t0
    for line in node_lines(report):
        out(line)
    if report.temps:
        out(f"  note: {len(report.temps)} temporary file(s) of unfinished writes (never read as data); "
            "`shardstore repair` removes the stale ones")
    if report.orphans:
        out(f"  note: {len(report.orphans)} ctable column director(ies) not in __rootdirs__ (never read); "
            "`shardstore repair` removes them")
    if report.problems:
        for line in problem_lines(report):
            print(line, file=sys.stderr)
        raise CommandFailed(f"verify: {args.path}: {len(report.problems)} problem(s) found")
    nbytes = sum(n.nbytes for n in report.nodes)
    unchecked = sum(not n.checksummed for n in report.nodes)
    how = "all checked against checksums" if not unchecked else (
        f"{unchecked} of {len(report.nodes)} only decoded (no checksum stored)")
    out(f"verify: OK, {len(report.nodes)} array(s) ({how}), {format_bytes(nbytes)} in {seconds:.2f} s")


def add_parser(add: AddCommand) -> None:
    p = add("verify", "decode every chunk and report the ones that fail",
            "Decode every stored unit (chunk, inner chunk, key-value value, bcolz chunk file) of an "
            "array, group, precomputed volume (every scale), uint64 key-value store or bcolz "
            "carray/ctable, and report each failure with its key. Per array it says whether the "
            "content was checked against stored checksums (crc32c codec, zstd checksum, gzip/zlib "
            "trailer) or only decoded. Exit code 1 when anything is unreadable.")
    p.add_argument("path", metavar="PATH", help="dataset: a directory, file:// or s3:// URL")
    p.set_defaults(func=run)
