"""A deterministic, CPU-only simulated user built from rules.

It follows the two-stage protocol of ABISS §5.2 with rules in place of the model council:

1. **Relevancy.** Each clarification gets ``relevant`` | ``technical`` | ``irrelevant`` within the
   group's label limits (:data:`~.base.ALLOWED_LABELS`): an answerable sample never gets ``relevant``;
   an unanswerable one always gets an ``irrelevant`` refusal, since no clarification makes it solvable.
   A request for the SQL itself or for table/column names is ``irrelevant`` (ABISS §5.2 "attempts to
   extract the ground truth SQL"; TIDE App. E *Una*: database-internal identifiers).
2. **Answer.** Relevant answers state the hidden knowledge (or the chosen chain layer's answer);
   technical answers state one atomic gold-SQL fragment in words (TIDE App. E, :mod:`.fragments`);
   irrelevant answers are refusals. Every reply passes the leakage guard (:mod:`.leakage`); a reply that
   would leak is replaced by a vaguer one and counted in ``leak_rejections``.

Relevance of an ambiguous sample is lexical overlap of content-word stems between the clarification
and (a) the chain layers' questions and answers (TIDE §2.1), else (b) the hidden knowledge and the
interpretations' hidden knowledge and descriptions. Words of (b) split into *strong* words (not in
the question, and not shared by every interpretation: the disambiguating fact) and *anchor* words (in
the question and the hidden knowledge, not a gold-SQL table name: the ambiguous term itself). A
strong-word match is relevant; else a technical topic wins; else an anchor match is relevant.

TIDE router (§4.2, App. E), set on samples with a chain or a drift event (TIDE samples), else ``None``:
relevant -> ``amb``, technical -> ``loc``, irrelevant -> ``una``. A clarification that targets L2 while
L1 is unresolved (``request.l1_resolved`` False) is routed ``loc`` (label ``technical``, layer ``L2``)
and answered with a deferral, not the L2 answer; metrics count L2 identification on ``amb`` routes only.

Replies adopt the sample's ``style`` a little and deterministically: ``terse``/``concise``/``brief``
-> one bare sentence; ``casual``/``colloquial``/``informal`` -> an informal opener; ``formal``/``polite``
-> a courteous opener; anything else (ABISS's ``interrogative`` included) -> plain.
"""
from __future__ import annotations

import re
from typing import Sequence

from sqlglot import exp

from ..errors import SQLParseError
from ..samples import Chain, Sample
from ..sqlschema import parse_sql
from .base import ALLOWED_LABELS, UserReply, UserRequest
from .fragments import Fragment, gold_fragments, technical_topic, vague_text
from .leakage import leakage_reasons

__all__ = ["RuleBasedUser", "asks_for_sql", "content_stems", "style_kind"]

_STOP = frozenset("""
a an the and or but if then else of to in on at by for with from into onto about as is are was were be been
being do does did done have has had having i me my mine we our ours you your yours he she it its they them
their this that these those there here what which who whom whose when where why how whether not no yes
any all some each every both either neither more most less least much many few other such same own so than
too very just only also even still again can could will would shall should may might must need needs
please thanks thank ok okay sure well like want wants wanted mean means meant meaning refer refers referring
intend intended talk talking ask asking asked question questions know tell give show list find get got
one ones thing things kind sort type way i'm it's do you did does something anything everything let us
""".split())


def _split(text: str) -> list[str]:
    s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", text)
    return [w for w in re.split(r"[^0-9A-Za-z]+", s.lower()) if w]


def _stem(word: str) -> str:
    w = word.lower()
    for suf, rep in (("ies", "y"), ("sses", "ss"), ("ches", "ch"), ("shes", "sh"), ("xes", "x"),
                     ("ing", ""), ("ed", "")):
        if w.endswith(suf) and len(w) - len(suf) >= 3:
            return w[: -len(suf)] + rep
    if w.endswith("s") and not w.endswith(("ss", "us", "is")) and len(w) > 3:
        return w[:-1]
    return w


def content_stems(text: str) -> set[str]:
    """Content-word stems of ``text``: lower-cased, stop words dropped, plural/-ing/-ed endings cut.

    ``"What time period does 'recent' refer to?"`` -> ``{"time", "period", "recent"}``.
    """
    return {_stem(w) for w in _split(text) if w not in _STOP and len(w) > 1}


def style_kind(style: str) -> str:
    """Map a sample's free-text ``style`` to ``terse`` | ``casual`` | ``formal`` | ``neutral``."""
    s = (style or "").lower()
    if re.search(r"\b(terse|concise|brief|short|keyword)", s):
        return "terse"
    if re.search(r"\b(casual|colloquial|informal|chatty|slang)", s):
        return "casual"
    if re.search(r"\b(formal|polite|professional)", s):
        return "formal"
    return "neutral"


_SQL_REQUEST = tuple(re.compile(p, re.IGNORECASE) for p in (
    # "write" only when the user is asked to write it: "before I write the query" is the agent's own plan
    r"\b(?:give|show|tell|provide|send|share|paste|reveal)\b[^?.!]{0,20}\b(?:sql|query|queries|statement)\b",
    r"\b(?:you|u)\s+(?:please\s+)?write\b[^?.!]{0,20}\b(?:sql|query|queries|statement)\b",
    r"^\s*(?:please\s+)?write\b[^?.!]{0,20}\b(?:sql|query|queries|statement)\b",
    r"\b(?:what|which)\s+(?:sql|query|queries|statement)\b",
    r"\b(?:sql|query)\s+(?:should|would|do|must|can)\s+(?:i|we)\b",
    r"\b(?:correct|expected|right|exact|gold|reference|ground[- ]truth|full|whole|final|intended)\s+(?:sql|query)\b",
    r"\bwhat\s+should\s+the\s+(?:sql|query)\s+be\b",
    r"\b(?:which|what)\s+(?:table|column|field)s?\b[^?.!]{0,40}\b(?:holds?|stores?|contains?|has|named|called|"
    r"uses?|joins?|keeps?)\b",
    r"\b(?:table|column|field)\s+names?\b",
    r"\bname\s+of\s+the\s+(?:table|column|field)\b",
    r"\b(?:primary|foreign)\s+keys?\b",
    r"\bschema\b",
))


def asks_for_sql(clarification: str) -> bool:
    """True when a clarification asks for the SQL itself or for database-internal names.

    ABISS §5.2 labels attempts to extract the ground-truth SQL ``irrelevant``; TIDE App. E routes
    questions about database-internal identifiers to *Una*. Examples: "what query should I write",
    "give me the SQL", "which column holds the e-mail?".
    """
    return any(p.search(clarification) for p in _SQL_REQUEST)


# ----------------------------------------------------------------------------- reply templates

def _cap(s: str) -> str:
    return s[:1].upper() + s[1:] if s else s


def _low(s: str) -> str:
    if s[:2] in ("I ", "I'") or (len(s) > 1 and s[:2].isupper()):
        return s
    return s[:1].lower() + s[1:]


def _end(s: str) -> str:
    s = s.strip()
    return s if s.endswith((".", "!", "?")) else s + "."


def _styled(sentence: str, kind: str, terse: str) -> str:
    """Wrap a plain sentence in the style's opener; ``terse`` is the one-sentence bare form."""
    if kind == "terse":
        return _end(_cap(terse))
    if kind == "casual":
        return "Oh, " + _end(_low(sentence))
    if kind == "formal":
        return "Certainly. " + _end(_cap(sentence))
    return _end(_cap(sentence))


_TECH_SENTENCE = {
    "order": "Please have them {t}",
    "limit": "I want {t}",
    "distinct": "I want {t}",
    "columns": "I'd like to see {t}",
}
_TECH_NONE = {
    "order": "Any order is fine",
    "limit": "I'd like all of them, with no cut-off",
    "distinct": "Repeats are fine, no need to remove them",
    "columns": "Just what my question asks for",
}
_REFUSAL = {
    "neutral": "Sorry, I can't help with that; I only know what I'm after, not how it is stored",
    "terse": "No idea, sorry",
    "casual": "Hmm, no clue about that, sorry",
    "formal": "I'm afraid I cannot help with that",
}
_UNANSWERABLE = {
    "neutral": "Sorry, I have nothing to add that would help there",
    "terse": "Nothing to add, sorry",
    "casual": "Hmm, I've got nothing more on that, sorry",
    "formal": "I'm afraid I have nothing further to add on that",
}
_DEFER = {
    "neutral": "That depends on the earlier point, so let's settle that first",
    "terse": "Earlier point first",
    "casual": "Hmm, that hangs on the earlier bit, let's sort that out first",
    "formal": "That depends on the earlier point; I would prefer to settle it first",
}
_GENERIC = {
    "relevant": "I mean it in the plain, everyday sense",
    "technical": "I'd rather leave that detail to you",
    "irrelevant": "Sorry, I can't help with that",
}


# ----------------------------------------------------------------------------- the user

class RuleBasedUser:
    """Deterministic rule-based simulated user: ``respond(batch) -> list[UserReply]`` (ABISS §5.2).

    Same inputs give the same outputs; no randomness and no model. Implements
    :class:`~textsql_clarify.simulators.base.UserSimulator`.

    Each :class:`~.base.UserReply` has ``text`` (natural language, no SQL, no unused schema name),
    ``label`` (``relevant`` | ``technical`` | ``irrelevant``, always within ``ALLOWED_LABELS[group]``),
    ``layer`` (``L1`` | ``L2`` for chain matches, else ``None``), ``route`` (``amb`` | ``loc`` | ``una``
    on TIDE samples, else ``None``), ``leak_rejections`` (candidate replies the leakage guard refused)
    and ``meta`` (``reason``; ``topic`` and ``fragment_kind`` for technical replies; no SQL).
    """

    def respond(self, batch: Sequence[UserRequest]) -> list[UserReply]:
        """Answer each request, in order.

        Args:
            batch: requests; may be empty.
        Returns:
            One reply per request, same order and length.
        Raises:
            TypeError: ``batch`` is not a sequence, or an item is not a :class:`UserRequest` (the
                message gives its index), or a clarification is not a string.
        """
        if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
            raise TypeError(f"respond: batch must be a sequence of UserRequest, got {type(batch).__name__}")
        out = []
        for i, req in enumerate(batch):
            if not isinstance(req, UserRequest):
                raise TypeError(f"respond: batch[{i}] must be a UserRequest, got {type(req).__name__}")
            if not isinstance(req.clarification, str):
                raise TypeError(f"respond: batch[{i}].clarification must be a string, "
                                f"got {type(req.clarification).__name__}")
            out.append(self._one(req))
        return out

    # -- stage 1 + 2 for one request
    def _one(self, req: UserRequest) -> UserReply:
        s = req.sample
        kind = style_kind(s.style)
        gold = req.gold_sql or s.gold_sql
        tide = s.chain is not None or s.drift is not None

        if s.group == "unanswerable" or gold is None:
            return self._final(req, gold, kind, "irrelevant", None, tide, "unanswerable",
                               [_end(_UNANSWERABLE[kind])], {})
        clar = req.clarification
        if asks_for_sql(clar):
            return self._refuse(req, gold, kind, tide, "asks_for_sql")

        topic = technical_topic(clar)
        if s.group == "ambiguous":
            c = content_stems(clar)
            entity = _gold_table_stems(gold)
            if s.chain is not None:
                layer = _chain_layer(c, s.chain, entity, req.l1_resolved)
                if layer == "L2" and not req.l1_resolved:
                    return self._final(req, gold, kind, "technical", "L2", tide, "l2_before_l1",
                                       [_end(_DEFER[kind])], {}, route="loc")
                if layer is not None:
                    ans = (s.chain.l1 if layer == "L1" else s.chain.l2).answer
                    return self._final(req, gold, kind, "relevant", layer, tide, f"chain_{layer.lower()}",
                                       _relevant_candidates(ans, kind), {})
            strong, anchors = _hk_words(s, entity)
            if c & strong:
                return self._final(req, gold, kind, "relevant", None, tide, "hidden_knowledge",
                                   _relevant_candidates(s.hidden_knowledge, kind), {})
            if topic is None and c & anchors:
                return self._final(req, gold, kind, "relevant", None, tide, "ambiguous_term",
                                   _relevant_candidates(s.hidden_knowledge, kind), {})
        if topic is not None:
            return self._technical(req, gold, kind, tide, topic)
        return self._refuse(req, gold, kind, tide, "off_target")

    def _refuse(self, req, gold, kind, tide, reason) -> UserReply:
        return self._final(req, gold, kind, "irrelevant", None, tide, reason, [_end(_REFUSAL[kind])], {})

    def _technical(self, req, gold, kind, tide, topic) -> UserReply:
        meta = {"topic": topic}
        try:
            frags = [f for f in gold_fragments(gold, req.schema_identifiers) if f.kind == topic]
        except SQLParseError:
            meta["fragment_error"] = True
            frags = []
        if not frags:
            meta["fragment_kind"] = None
            none = _TECH_NONE[topic]
            return self._final(req, gold, kind, "technical", None, tide, "technical", [_styled(none, kind, none)], meta)
        frag = _pick_fragment(frags, content_stems(req.clarification))
        meta["fragment_kind"] = frag.kind
        tmpl = _TECH_SENTENCE[topic]
        if frag.kind == "order":
            texts = _order_variants(frag)
        elif frag.kind == "distinct":
            texts = [frag.text, "no repeats, with each one listed once"]
        else:
            texts = [frag.text, vague_text(frag)]
        cands = [_styled(tmpl.format(t=t), kind, t) for t in dict.fromkeys(texts)]
        return self._final(req, gold, kind, "technical", None, tide, "technical", cands, meta)

    def _final(self, req: UserRequest, gold: str | None, kind: str, label: str, layer: str | None, tide: bool,
               reason: str, candidates: list[str], meta: dict, route: str | None = None) -> UserReply:
        """Run the leakage guard over the candidates, then the label's generic text, then ``"Sorry."``."""
        if label not in ALLOWED_LABELS[req.sample.group]:  # pragma: no cover - guarded by construction
            raise AssertionError(f"label {label!r} outside ABISS limits for group {req.sample.group!r}")
        generic = _GENERIC[label]
        cands = list(candidates) + [_styled(generic, kind, generic), "Sorry."]
        rejected = 0
        text = cands[-1]
        reasons: list[str] = []
        for cand in cands:
            r = leakage_reasons(cand, question=req.sample.question, clarification=req.clarification,
                                schema_identifiers=req.schema_identifiers, gold_sql=gold)
            if not r:
                text = cand
                break
            rejected += 1
            reasons.extend(x for x in r if x not in reasons)
        if route is None and tide:
            route = {"relevant": "amb", "technical": "loc", "irrelevant": "una"}[label]
        m = {"reason": reason, **meta}
        if reasons:
            m["leak_reasons"] = reasons
        return UserReply(text=text, label=label, layer=layer, route=route, leak_rejections=rejected, meta=m)


# ----------------------------------------------------------------------------- helpers

def _relevant_candidates(knowledge: str, kind: str) -> list[str]:
    k = knowledge.strip()
    first = re.split(r"(?<=[.!?])\s+", k, maxsplit=1)[0] if k else k
    styled = _styled(k, kind, first)
    plain = _end(_cap(k))
    return [styled] if styled == plain else [styled, plain]


def _gold_table_stems(gold: str | None) -> set[str]:
    """Stems of every table name in the gold SQL (entity words, not the ambiguous term)."""
    if not gold:
        return set()
    try:
        tree = parse_sql(gold)
    except SQLParseError:
        return set()
    return {_stem(w) for t in tree.find_all(exp.Table) for w in _split(t.name)}


def _hk_words(s: Sample, entity: set[str]) -> tuple[set[str], set[str]]:
    """(strong, anchor) stems of the hidden knowledge and interpretations (see module docstring)."""
    targets = [s.hidden_knowledge] + [f"{i.hidden_knowledge} {i.description}" for i in s.interpretations]
    sets = [content_stems(t) for t in targets if t.strip()]
    if not sets:
        return set(), set()
    union = set().union(*sets)
    shared = set.intersection(*sets) if len(sets) > 1 else set()
    q = content_stems(s.question)
    strong = union - q - shared
    anchors = (union & q) - entity
    return strong, anchors


def _chain_layer(c: set[str], chain: Chain, entity: set[str], l1_resolved: bool) -> str | None:
    """Which chain layer a clarification targets: overlap with each layer's own words (TIDE §2.1)."""
    w1 = content_stems(f"{chain.l1.question} {chain.l1.answer} {chain.l1.alternative}") - entity
    w2 = content_stems(f"{chain.l2.question} {chain.l2.answer} {chain.l2.alternative}") - entity
    both = w1 & w2
    s1, s2 = len(c & (w1 - both)), len(c & (w2 - both))
    if s1 == 0 and s2 == 0:
        return None
    if s1 == s2:
        return "L2" if l1_resolved else "L1"
    return "L1" if s1 > s2 else "L2"


_DIRECTION = {
    True: ("from highest to lowest", "largest first", "in descending order"),
    False: ("from lowest to highest", "smallest first", "in ascending order"),
}


def _order_variants(frag: Fragment) -> list[str]:
    """Wordings of an ORDER BY fragment, most to least specific, so that a direction word that happens
    to be a column name (Spider's ``stadium.highest``) does not silence the whole answer."""
    desc = re.search(r"\bDESC\b", frag.sql, re.IGNORECASE) is not None
    key = frag.text.split(" by ", 1)[1] if " by " in frag.text else ""
    a, b, c = _DIRECTION[desc]
    with_key = [frag.text, f"sorted by {key}, {b}", f"sorted by {key} {c}"] if key else [frag.text]
    return with_key + [vague_text(frag), f"sorted {b}", f"sorted {c}"]


def _pick_fragment(frags: list[Fragment], c: set[str]) -> Fragment:
    """The fragment whose words overlap the clarification most; the first on ties (one atomic node)."""
    best, score = frags[0], -1
    for f in frags:
        sc = len(c & content_stems(f.text))
        if sc > score:
            best, score = f, sc
    return best
