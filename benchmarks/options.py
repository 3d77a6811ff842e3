"""``--quick``, which every benchmark takes: its smallest settings, to check that it runs end to end (in a
fresh clone right after ``make setup``, e.g. ``make bench-pool BENCH_ARGS=--quick``), not to measure.
Options given explicitly still win over it."""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence


def parse(
    parser: argparse.ArgumentParser, quick: Mapping[str, object], argv: Sequence[str] | None = None
) -> argparse.Namespace:
    """``parser``'s arguments, with ``--quick`` added: then the defaults in ``quick`` (by dest) apply."""
    settings = " ".join(f"--{dest.replace('_', '-')} {value}" for dest, value in quick.items())
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"the smallest settings, to check that it runs (figures not meaningful): {settings}",
    )
    args = parser.parse_args(argv)
    if args.quick:
        parser.set_defaults(**quick)
        args = parser.parse_args(argv)
    return args
