"""Small text helpers shared by the simulators and the feedback judge."""
from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")
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
