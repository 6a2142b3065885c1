"""The one way to open a database read-only: :func:`ro_uri`.

``mode=ro`` alone lets SQLite create ``-wal`` and ``-shm`` files beside a WAL-mode database (a reader needs the
shared-memory index); ``immutable=1`` tells it the file cannot change, so it reads the file alone and writes
nothing beside it. Every read-only open in the package (the sandbox, the schema readers, the dataset loaders)
goes through :func:`ro_uri`, so a source database folder is left as it was found.
"""
from __future__ import annotations

import os
from pathlib import Path


def is_wal(path: str | os.PathLike) -> bool:
    """Whether the SQLite file at ``path`` is in WAL mode (header bytes 18-19, the read and write versions,
    are 2 and 2: SQLite file format docs, "1.3 The Database Header"). ``False`` when it cannot be read.

    Args:
        path: a file path.
    """
    try:
        with open(path, "rb") as f:
            head = f.read(20)
    except OSError:
        return False
    return len(head) == 20 and head[18] == 2 and head[19] == 2


def ro_uri(path: str | os.PathLike) -> str:
    """The ``file:`` URI that opens ``path`` read-only: ``mode=ro``, plus ``immutable=1`` for a WAL-mode file
    (:func:`is_wal`), so that no ``-wal``/``-shm`` file is created beside it. Open it with
    ``sqlite3.connect(uri, uri=True)``.

    Args:
        path: the database file (relative paths are resolved; special characters are percent-encoded).
    Returns:
        The URI string.
    Source: SQLite URI filenames docs (``mode``, ``immutable``).
    """
    p = Path(path).resolve()
    return p.as_uri() + ("?mode=ro&immutable=1" if is_wal(p) else "?mode=ro")
