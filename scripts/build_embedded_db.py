#!/usr/bin/env python3
"""Rebuild the embedded university database from its SQL source.

    python scripts/build_embedded_db.py            # rewrites textsql_clarify/datasets/embedded/university.sqlite
    python scripts/build_embedded_db.py --out X    # writes X instead (e.g. to compare)

The build is deterministic (same script, same SQLite version -> same rows; see
``textsql_clarify.datasets.university.build_database``). Exit status 1 with a message on a bad script.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from textsql_clarify.datasets.university import DB_FILE, SQL_SOURCE, build_database  # noqa: E402
from textsql_clarify.errors import DatasetError  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, build the database, print where it went. Returns the exit status."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--sql", default=str(SQL_SOURCE), help="SQL source (default: the packaged university.sql)")
    ap.add_argument("--out", default=str(DB_FILE), help="SQLite file to write (default: the packaged university.sqlite)")
    args = ap.parse_args(argv)
    try:
        out = build_database(args.sql, args.out)
    except DatasetError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"built {out} ({Path(out).stat().st_size} bytes) from {args.sql}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
