"""``shardstore repair``: remove what killed writers left behind; optionally drop corrupt units."""

from __future__ import annotations

import argparse
import sys

from ..ops.integrity import DEFAULT_GRACE, repair
from ._common import AddCommand, CommandFailed, out
from .verify import Bars, problem_lines


def run(args: argparse.Namespace) -> None:
    if args.grace < 0:
        raise ValueError(f"--grace {args.grace}: expected a number of seconds >= 0")
    with Bars("checking", not args.no_progress) as bars:
        report = repair(args.path, dry_run=args.dry_run, drop_corrupt=args.drop_corrupt, grace=args.grace,
                        progress=bars)
    verb = "would remove" if args.dry_run else "removed"
    stale = [t for t in report.temps if t.stale(args.grace)]
    for t in report.temps:
        if t.stale(args.grace):
            out(f"  {verb} temp file {t.path} (untouched for {t.age:.0f} s)")
        else:
            why = "open in a live process" if t.held else f"modified {t.age:.0f} s ago, within --grace"
            out(f"  kept temp file {t.path} ({why})")
    for o in report.orphans:
        if o.stale(args.grace):
            out(f"  {verb} orphan ctable column {o.prefix} (not in __rootdirs__)")
        else:
            why = "remote: only with --grace 0" if o.age is None else f"modified {o.age:.0f} s ago, within --grace"
            out(f"  kept orphan ctable column {o.prefix} ({why})")
    if report.temps_note:
        out(f"  temp files: {report.temps_note}")
    problems = report.problems
    for line in problem_lines(report, limit=len(problems)):
        print(line, file=sys.stderr)
    dropped = sum(p.dropped for p in problems)
    orphans = sum(o.stale(args.grace) for o in report.orphans)
    out(f"repair: {verb} {len(stale)} temp file(s) and {orphans} orphan column(s); {len(problems)} unit(s) fail to decode"
        + (f", {dropped} dropped (now read as fill value)" if dropped else ""))
    left = [p for p in problems if not p.dropped]
    if left:
        hint = "" if args.drop_corrupt else "; --drop-corrupt removes them"
        raise CommandFailed(f"repair: {args.path}: {len(left)} corrupt unit(s) left{hint}")


def add_parser(add: AddCommand) -> None:
    p = add("repair", "remove temp files of killed writers; list (or drop) units that fail to decode",
            "Remove the temporary files that killed writers left behind in a local dataset of any "
            "format (those untouched for --grace seconds and open in no process of this machine; "
            "S3 writes leave none) and the bcolz ctable column directories a killed addcol/delcol "
            "left unlisted (local: untouched for --grace seconds; S3: only with --grace 0), and list every chunk, shard or key-value unit that fails to "
            "decode, with its key. --drop-corrupt removes those units so they read as the fill "
            "value (bcolz, which has no missing chunks, gets chunks of its dflt value). Exit code 1 "
            "when corrupt units remain.")
    p.add_argument("path", metavar="PATH", help="dataset: a directory, file:// or s3:// URL")
    p.add_argument("--dry-run", action="store_true", help="report what would be done; change nothing")
    p.add_argument("--drop-corrupt", action="store_true", help="remove units that fail to decode")
    p.add_argument("--grace", type=float, default=DEFAULT_GRACE, metavar="SECONDS",
                   help=f"temp files modified less than this long ago are kept (default {DEFAULT_GRACE:.0f})")
    p.set_defaults(func=run)
