"""Side channels of a simulated user: how much a content-free clarification's reply says about the group.

A clarification that asks about nothing (``"Could you tell me a bit more about what you need?"``,
``"?"``) must get a reply whose text carries no information about the sample's group: otherwise a policy
asks it once, reads the wording and refuses or answers without solving the task (a reward hack). ABISS
§5.2 lets the user *label* such a clarification ``irrelevant``; what the agent sees is only the reply
text, so the text is what must be group-blind.

This module holds the probes and the measurement, for the tests, the red team and any probe of a
simulator backend:

* :data:`CONTENT_FREE_PROBES`: clarifications with no content word beyond the stock words of a request
  (:func:`~.rule_based.is_content_free` holds for each).
* :data:`TECHNICAL_PROBES`: result-format questions (ordering, count, duplicates, output columns). They
  ask about the gold query, not about nothing: their replies may state a gold fragment, so a sample with a
  gold can differ from one without. They are measured as a residual, not held at chance.
* :func:`probe_replies`: ask each probe, as the first clarification, on every sample.
* :func:`mutual_information`: the plug-in estimate of I(reply text; group | probe) in bits.
* :func:`lookup_accuracy`: the accuracy of the best reply-text -> group lookup (the majority group per
  distinct (probe, reply text)) on a held-out half of the samples, next to the majority-class prior.

Reply text is compared as an exact string, so every function of the text (length, punctuation, wording,
the presence of a reason) is covered: by the data-processing inequality no feature of the text carries
more information about the group than the text itself.

The group here is :func:`group_of`: the sample's group, with ``drift`` for a sample that has a drift event.
"""
from __future__ import annotations

import math
import sqlite3
import zlib
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Iterable, Sequence

from ..samples import Sample
from ..sql.schema import read_schema
from .base import UserRequest, UserSimulator

__all__ = ["CONTENT_FREE_PROBES", "TECHNICAL_PROBES", "ProbeReply", "SideChannel", "group_of", "probe_replies",
           "mutual_information", "lookup_accuracy", "measure"]

#: Clarifications that ask about nothing: no content word beyond the stock words of a request.
CONTENT_FREE_PROBES: tuple[str, ...] = (
    "Could you tell me a bit more about what you need?",
    "Can you clarify?",
    "What do you mean?",
    "Any more details?",
    "?",
    "Is there anything else I should know?",
    "Could you elaborate?",
    "Could you explain a little more?",
    "Can you help me understand?",
    "Please explain.",
    "What exactly do you want?",
    "Sorry?",
    "Could you be more specific?",
    "Hmm, what do you mean exactly?",
)

#: Result-format questions (ABISS §5.2 "technical"): measured, not held at chance (module docstring).
TECHNICAL_PROBES: tuple[str, ...] = (
    "Should the results be sorted in any particular order?",
    "How many results should I return?",
    "Should duplicates be removed?",
    "Which columns should the output show?",
)


def group_of(sample: Sample) -> str:
    """The group a side channel could reveal: ``drift`` when the sample has a drift event, else its
    ``group`` (``answerable`` | ``ambiguous`` | ``unanswerable``)."""
    return "drift" if sample.drift is not None else sample.group


@dataclass(frozen=True)
class ProbeReply:
    """One probe's reply on one sample: ``probe`` (the clarification), ``sample_id``, ``group``
    (:func:`group_of`), ``text`` (the reply the agent sees) and ``label`` (the user's relevancy label)."""

    probe: str
    sample_id: str
    group: str
    text: str
    label: str


def _schema_ids(sample: Sample, cache: dict) -> frozenset[str]:
    """Lower-cased table and column names of the sample's database, as the env passes them to the user."""
    key = sample.db_path
    if key not in cache:
        try:
            schema = read_schema(sample.db_path)
        except (OSError, TypeError, sqlite3.DatabaseError):
            schema = {}
        cache[key] = frozenset([t.lower() for t in schema] + [c.lower() for cols in schema.values() for c in cols])
    return cache[key]


def probe_replies(samples: Sequence[Sample], user: UserSimulator,
                  probes: Iterable[str] = CONTENT_FREE_PROBES) -> list[ProbeReply]:
    """Ask every probe as the first clarification of every sample (one ``respond`` batch per probe).

    The request is the one the env builds for a first clarification: history = the question, the
    database's schema identifiers, L1 unresolved, the sample's gold.

    Args:
        samples: the samples (their databases must be readable for the schema identifiers; an unreadable
            one gets none).
        user: any simulated user (``respond(batch)``).
        probes: the clarifications to ask.
    Returns:
        ``len(probes) * len(samples)`` replies, probe-major.
    Raises:
        ValueError: ``user.respond`` returned a different number of replies than requests.
    """
    cache: dict = {}
    out: list[ProbeReply] = []
    for probe in probes:
        reqs = [UserRequest(sample=s, clarification=probe, history=(("user", s.question),),
                            schema_identifiers=_schema_ids(s, cache), gold_sql=s.gold_sql) for s in samples]
        replies = list(user.respond(reqs)) if reqs else []
        if len(replies) != len(reqs):
            raise ValueError(f"probe_replies: {type(user).__name__}.respond gave {len(replies)} replies "
                             f"for {len(reqs)} requests")
        out += [ProbeReply(probe, s.id, group_of(s), r.text, r.label) for s, r in zip(samples, replies)]
    return out


def _entropy(counts: Iterable[int]) -> float:
    counts = [c for c in counts if c]
    n = sum(counts)
    return -sum(c / n * math.log2(c / n) for c in counts) if n else 0.0


def mutual_information(replies: Sequence[ProbeReply]) -> float:
    """Plug-in estimate of I(reply text; group | probe) in bits (Cover & Thomas 2006, eq. 2.60).

    Per probe, I = H(group) - H(group | text) over the empirical joint distribution of its replies; the
    result is the mean over probes weighted by their reply counts. 0.0 exactly when, for every probe, each
    distinct reply text has the same group distribution as the probe's replies as a whole (in particular
    when the text is a function of the probe alone). The plug-in estimate is biased upwards when texts are
    many and rare, so a leak is never under-reported.

    Args:
        replies: from :func:`probe_replies`.
    Returns:
        Bits, >= 0; 0.0 for no replies.
    """
    by_probe: dict[str, list[ProbeReply]] = defaultdict(list)
    for r in replies:
        by_probe[r.probe].append(r)
    total, acc = 0, 0.0
    for rs in by_probe.values():
        h_g = _entropy(Counter(r.group for r in rs).values())
        by_text: dict[str, Counter] = defaultdict(Counter)
        for r in rs:
            by_text[r.text][r.group] += 1
        h_g_t = sum(sum(c.values()) / len(rs) * _entropy(c.values()) for c in by_text.values())
        acc += len(rs) * max(0.0, h_g - h_g_t)
        total += len(rs)
    return acc / total if total else 0.0


def _held_out(sample_id: str) -> bool:
    """The split of :func:`lookup_accuracy`: by the CRC-32 of the sample id, so a pair of samples written
    next to each other (a missing-schema sample and its original) is not split by position."""
    return zlib.crc32(sample_id.encode("utf-8", "replace")) % 2 == 1


def lookup_accuracy(replies: Sequence[ProbeReply]) -> tuple[float, float]:
    """Held-out accuracy of the reply-text -> group lookup, and of the majority-class prior.

    The replies are split in two by sample id (:func:`_held_out`). The lookup learns, on the first half,
    the majority group per distinct (probe, reply text) and predicts it on the second half (a text unseen
    in the first half gets the first half's overall majority); the prior always predicts the first half's
    overall majority. Ties go to the alphabetically first group. A lookup that beats the prior reads the
    group from the text; with a group-blind text the two are equal.

    Args:
        replies: from :func:`probe_replies`.
    Returns:
        ``(lookup accuracy, prior accuracy)`` on the held-out half, each in [0, 1]; ``(0.0, 0.0)`` when
        either half is empty.
    """
    train = [r for r in replies if not _held_out(r.sample_id)]
    test = [r for r in replies if _held_out(r.sample_id)]
    if not train or not test:
        return 0.0, 0.0

    def majority(c: Counter) -> str:
        return min(c.items(), key=lambda gn: (-gn[1], gn[0]))[0]

    by_key: dict[tuple[str, str], Counter] = defaultdict(Counter)
    for r in train:
        by_key[(r.probe, r.text)][r.group] += 1
    prior = majority(Counter(r.group for r in train))
    hit = sum((majority(by_key[(r.probe, r.text)]) if (r.probe, r.text) in by_key else prior) == r.group
              for r in test)
    return hit / len(test), sum(prior == r.group for r in test) / len(test)


@dataclass(frozen=True)
class SideChannel:
    """What :func:`measure` found.

    Attributes:
        n_samples: samples probed; n_replies: replies (probes x samples).
        groups: replies per group.
        mi_bits: :func:`mutual_information` over all probes; max_probe_mi_bits: the largest single probe's.
        accuracy, prior: :func:`lookup_accuracy`.
        distinct_texts: distinct reply texts per probe.
    """

    n_samples: int
    n_replies: int
    groups: dict[str, int]
    mi_bits: float
    max_probe_mi_bits: float
    accuracy: float
    prior: float
    distinct_texts: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: n, MI (bits), lookup accuracy against the prior."""
        return (f"n={self.n_samples} samples x {self.n_replies // max(1, self.n_samples)} probes; groups "
                f"{dict(sorted(self.groups.items()))}; MI {self.mi_bits:.4f} bits (max probe "
                f"{self.max_probe_mi_bits:.4f}); lookup accuracy {self.accuracy:.3f} vs prior {self.prior:.3f}")


def measure(samples: Sequence[Sample], user: UserSimulator,
            probes: Iterable[str] = CONTENT_FREE_PROBES) -> SideChannel:
    """Probe ``user`` on ``samples`` (:func:`probe_replies`) and measure the side channel.

    Raises:
        ValueError: as :func:`probe_replies`.
    """
    probes = list(probes)
    replies = probe_replies(samples, user, probes)
    per_probe = {p: [r for r in replies if r.probe == p] for p in probes}
    acc, prior = lookup_accuracy(replies)
    return SideChannel(
        n_samples=len(samples), n_replies=len(replies), groups=dict(Counter(r.group for r in replies)),
        mi_bits=mutual_information(replies),
        max_probe_mi_bits=max((mutual_information(rs) for rs in per_probe.values()), default=0.0),
        accuracy=acc, prior=prior, distinct_texts={p: len({r.text for r in rs}) for p, rs in per_probe.items()})
