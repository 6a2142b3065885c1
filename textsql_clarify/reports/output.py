"""Writing a report file whole or not at all: ``report -o`` never leaves a truncated or empty page over a good one."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ..text import valid_unicode

__all__ = ["replace_text"]


def replace_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` as UTF-8 through a temporary file in the same folder, flushed and fsynced, then
    ``os.replace``-d onto ``path`` (atomic on POSIX and Windows within one file system): a reader sees the old file
    or the new one, never part of either. Surrogate code points, which UTF-8 cannot encode, are written as U+FFFD
    (:func:`textsql_clarify.text.valid_unicode`). The folder is created where missing.

    Source: Python's ``os.replace`` docs; POSIX ``rename(2)``.

    Args:
        path: the file to write (a report page or table).
        text: its whole content.
    Returns:
        ``path`` as a :class:`~pathlib.Path`.
    Raises:
        OSError: the folder cannot be created or written, or the rename fails; the old file is then unchanged and
            the temporary file removed.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    data = valid_unicode(text).encode("utf-8")  # before any file is opened: nothing can fail half-way on encoding
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        from ..baselines.run_journal import file_mode

        os.fchmod(fd, file_mode())  # mkstemp makes 0600; the page gets the mode open() would give it
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target
