"""Small text helpers shared by the simulators, the feedback judge, the dataset loaders and the terminal output."""
from __future__ import annotations

import json
import re
from typing import Any

_SURROGATE = re.compile("[\ud800-\udfff]")
#: a JSON ``\\uD800``..``\\uDFFF`` escape: the only way a lone surrogate gets into text read as strict UTF-8
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
#: what a terminal acts on instead of showing: C0 and C1 controls and DEL (ESC starts a control sequence, BEL
#: rings), line and paragraph separators, the bidirectional overrides and isolates (they reorder what follows),
#: and surrogates (no terminal encoding takes them)
_TERMINAL_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069"
                              "\ud800-\udfff]")
_PLURALS = (("ies", "y"), ("sses", "ss"), ("ches", "ch"), ("shes", "sh"), ("xes", "x"))


def plural_stem(word: str) -> str:
    """Strip an English plural from a lower-cased word: ``"courses"`` -> ``"course"``, ``"cities"`` -> ``"city"``.

    Words ending in ``ss``/``us``/``is`` and words of 3 letters or fewer are kept (``"class"``, ``"bus"``).
    """
    w = word
    for suf, rep in _PLURALS:
        if w.endswith(suf) and len(w) > len(suf) + 1:
            return w[: -len(suf)] + rep
    if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        return w[:-1]
    return w


def valid_unicode(text: str) -> str:
    """``text`` with every surrogate code point (U+D800..U+DFFF, which no UTF-8 encoder, tokenizer or JSON
    writer accepts) replaced by U+FFFD; the same object when there is none (one ``encode`` check).

    The simulated users and the feedback judge pass what callers give them through this, so a direct call
    with ``"Sorry \\ud83d"`` is answered, not a crash; the env itself refuses such actions as malformed
    (:func:`textsql_clarify.envs.actions.text_problem`). Source: Python's ``str.encode`` docs (a lone
    surrogate raises ``UnicodeEncodeError``).

    Args:
        text: any string.
    Returns:
        A string that encodes as UTF-8.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return _SURROGATE.sub("\ufffd", text)
    return text


def valid_unicode_tree(value: Any) -> Any:
    """``value`` (decoded JSON: dicts, lists, strings, numbers) with :func:`valid_unicode` applied to every string,
    dict keys included; containers are rebuilt only where something changed.

    Args:
        value: any decoded JSON value.
    Returns:
        The same value with surrogate code points replaced by U+FFFD (two keys that become equal keep the later
        value, as a JSON object with a repeated key does).
    """
    if isinstance(value, str):
        return valid_unicode(value)
    if isinstance(value, list):
        return [valid_unicode_tree(v) for v in value]
    if isinstance(value, dict):
        return {valid_unicode(k) if isinstance(k, str) else k: valid_unicode_tree(v) for k, v in value.items()}
    return value


def loads_valid_unicode(text: str) -> Any:
    """``json.loads(text)`` with every lone surrogate (a ``\\ud800``-style escape that pairs with nothing, valid JSON
    per RFC 8259 §8.2 but not encodable as UTF-8) read as U+FFFD, in keys and values at any depth. An escaped
    surrogate *pair* is one character, as ``json.loads`` gives it. Text without such an escape is decoded as is
    (one regex scan).

    The dataset loaders and the report's run reader decode through this, so a sample's text always encodes
    (``docs/dataset-format.md``, "Text"). Source: RFC 8259 §8.2; Python's ``json`` docs.

    Args:
        text: one JSON document (a JSONL line, or a whole JSON file).
    Returns:
        The decoded value.
    Raises:
        json.JSONDecodeError, RecursionError, ValueError: as ``json.loads``.
    """
    value = json.loads(text)
    return valid_unicode_tree(value) if _SURROGATE_ESCAPE.search(text) else value


def terminal_safe(text: str) -> str:
    """``text`` with what a terminal would act on instead of showing written as Python escapes (``repr`` style):
    control characters other than newline and tab (``"\\x1b"``, ``"\\x07"``), DEL and C1 controls, U+2028/U+2029,
    the bidirectional overrides and isolates (``"\\u202e"``), and surrogates (``"\\ud800"``). Other text, non-ASCII
    letters included, is kept. Source: ECMA-48 (C0/C1 control functions), Unicode UAX #9 (explicit directional
    formatting characters).

    Args:
        text: a line (or lines) about to be printed.
    Returns:
        The printable text; the same object when nothing needed escaping.
    """
    if not _TERMINAL_UNSAFE.search(text):
        return text
    return _TERMINAL_UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)


def terminal_safe_json(text: str) -> str:
    """JSON text (``json.dumps(..., ensure_ascii=False)``, which escapes only C0 controls) with the other characters
    :func:`terminal_safe` names written as JSON ``\\uXXXX`` escapes: the same value when parsed, nothing a terminal
    obeys when printed. Such characters can only stand inside JSON strings, where the escape is valid (RFC 8259 §7).

    Args:
        text: a JSON document.
    Returns:
        The same document, printable.
    """
    if not _TERMINAL_UNSAFE.search(text):
        return text
    return _TERMINAL_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
