"""Read-only schema mappings: :class:`ReadOnlySchema`, what a sandbox's ``schema`` is.

The scorers key two caches by a schema's object id (``rewards.ex_sql._names_key``, ``sql.schema._fingerprint_once``)
so that an env step does not rebuild the key of its database's schema for every lookup. A key kept for an object
that is later changed in place is stale; so those caches apply only to a :class:`ReadOnlySchema`, which cannot be
changed, and a plain dict a caller passes has its key rebuilt each time.
"""
from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any, NoReturn


class ReadOnlyDict(dict):
    """A ``dict`` whose items cannot be set, deleted or updated (each such call raises ``TypeError``). It is
    still a ``dict`` (``isinstance``, ``json.dumps``, ``==``); ``dict(d)``, ``{**d}``, ``copy.copy`` and
    ``copy.deepcopy`` give plain, changeable dicts, and it pickles as itself.

    Raises:
        TypeError: on ``d[k] = v``, ``del d[k]``, ``clear``, ``pop``, ``popitem``, ``setdefault``, ``update``, ``|=``.
    Source: ours (id-keyed caches go stale when a schema dict is changed in place); Python's
    ``collections.abc.Mapping`` docs.
    """

    __slots__ = ()

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError(f"{type(self).__name__} cannot be changed: copy it first (dict(d)) to change the copy")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = __ior__ = _refuse

    def __reduce__(self) -> tuple:
        return (type(self), (dict(self),))

    def __copy__(self) -> dict:
        return dict(self)

    def __deepcopy__(self, memo: dict) -> dict:
        return {copy.deepcopy(k, memo): copy.deepcopy(v, memo) for k, v in self.items()}


class ReadOnlySchema(ReadOnlyDict):
    """``{table: {column: type}}`` that cannot be changed, tables included (each table is a
    :class:`ReadOnlyDict`): the schema a sandbox returns (``SQLiteSandbox.schema``, ``ProcessSandbox.schema``),
    which the scorers' id-keyed caches may trust.

    Args:
        schema: a ``{table: {column: type}}`` mapping (copied; tables and columns keep their order).
    Raises:
        TypeError: a table's value is not a mapping; and as :class:`ReadOnlyDict` on any change.
    """

    __slots__ = ()

    def __init__(self, schema: Mapping[str, Mapping[str, str]] = ()) -> None:
        items = schema.items() if isinstance(schema, Mapping) else schema
        tables = []
        for t, cols in items:
            if not isinstance(cols, Mapping):
                raise TypeError(f"ReadOnlySchema: table {t!r} maps to {type(cols).__name__}, not a mapping")
            tables.append((t, ReadOnlyDict(cols)))
        dict.__init__(self, tables)
