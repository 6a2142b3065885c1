"""Small text helpers shared by the simulators and the feedback judge."""
from __future__ import annotations

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
