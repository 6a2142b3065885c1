"""The embedded default dataset: a small invented university database and its samples.

The database is modelled in spirit on the running example of ABISS (Table 1, §3.2): students with a
personal and an institutional email, a university enrolment date and per-course enrolments with
their own date and a grade. It deliberately lacks a professor-course link, staff, rooms, fees and a
letter-grade scale, so that the unanswerable subcategories of ABISS §3.2.4-3.2.5 can be posed on it.

Files (in ``textsql_clarify/datasets/embedded/``):

* ``university.sql``: the source (schema and rows), written by us.
* ``university.sqlite``: built from the source by :func:`build_database`
  (``scripts/build_embedded_db.py``); shipped so that nothing is built at run time.
* ``samples.jsonl``: the samples in the native JSONL format (``docs/dataset-format.md``), with
  ``db_path`` relative to the JSONL file.
"""
from __future__ import annotations

import os
import sqlite3
from pathlib import Path

from ..errors import DatasetError
from ..samples import Sample, load_jsonl

EMBEDDED_DIR = Path(__file__).resolve().parent / "embedded"
SQL_SOURCE = EMBEDDED_DIR / "university.sql"
DB_FILE = EMBEDDED_DIR / "university.sqlite"
SAMPLES_FILE = EMBEDDED_DIR / "samples.jsonl"


def embedded_db_path() -> str:
    """Absolute path of the packaged ``university.sqlite``.

    Raises:
        DatasetError: the file is missing from the installation (rebuild it with
            ``python scripts/build_embedded_db.py``).
    """
    if not DB_FILE.is_file():
        raise DatasetError(
            f"embedded database missing: {DB_FILE}; rebuild it with 'python scripts/build_embedded_db.py'")
    return str(DB_FILE)


def load_embedded() -> list[Sample]:
    """Load the packaged samples (``samples.jsonl`` over ``university.sqlite``), validated.

    Returns:
        The samples in file order, each with an absolute ``db_path``.

    Raises:
        DatasetError: the packaged files are missing or a record is invalid.
    """
    embedded_db_path()
    if not SAMPLES_FILE.is_file():
        raise DatasetError(f"embedded samples missing: {SAMPLES_FILE}")
    return load_jsonl(SAMPLES_FILE)


def build_database(sql_path: str | os.PathLike = SQL_SOURCE, out_path: str | os.PathLike = DB_FILE) -> str:
    """Build a SQLite file from a ``.sql`` script, deterministically.

    Any existing ``out_path`` is replaced. The script runs in one connection with the default page
    size, then the file is vacuumed, so the same script and SQLite version give the same rows (and
    in practice the same bytes).

    Args:
        sql_path: the SQL script (schema and ``INSERT`` statements).
        out_path: the SQLite file to write.

    Returns:
        ``str(out_path)``.

    Raises:
        DatasetError: the script is missing or unreadable, or SQLite rejects it (the message names
            the script and SQLite's reason); nothing is left at ``out_path`` in that case.
    """
    src, out = Path(sql_path), Path(out_path)
    if not src.is_file():
        raise DatasetError(f"SQL script not found: {src}")
    try:
        script = src.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DatasetError(f"cannot read SQL script {src}: {e}") from e
    tmp = out.with_name(out.name + ".tmp")
    tmp.unlink(missing_ok=True)
    con = sqlite3.connect(tmp)
    try:
        con.executescript(script)
        con.commit()
        con.execute("VACUUM")
    except sqlite3.Error as e:
        con.close()
        tmp.unlink(missing_ok=True)
        raise DatasetError(f"SQL script {src} failed: {e}") from e
    con.close()
    os.replace(tmp, out)
    return str(out)
