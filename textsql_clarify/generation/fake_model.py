"""A deterministic fake generation model for tests and ``--model fake`` runs.

:class:`FakeModel` implements :class:`textsql_clarify.simulators.hf_models.GenerationBackend` (``name``,
``chat``, ``generate``, ``score``, ``render_chat``) with rules instead of weights. Every prompt of the
project's recipes carries a task marker (``"[task:abiss_nlq]"`` ...); the fake answers by marker:

* ``replies`` (for ``generate``): marker -> text, or ``callable(prompt) -> text``;
* ``choices`` (for ``score``): marker -> the option to pick, or ``callable(prompt, options) -> option``
  (options without their leading space). The picked option scores 0.0 nats, every other -1.0.

The caller's mappings are searched first (in their order), then the defaults of
:data:`DEFAULT_REPLIES` / :data:`DEFAULT_CHOICES` (which other recipes extend with
:func:`register_default`). The defaults make valid outputs for the ABISS recipe's prompts, so a pipeline
run with ``--model fake`` accepts samples; tests override one marker to make one validator reject.
A prompt that matches no marker gets ``""`` from ``generate`` and the first option from ``score``.

The ABISS defaults echo the anchor: the NLQ object reuses the seed question (ambiguous: with ", the
matching ones" and the readings "every row" / "only the first row"; an unanswerable question about a column no table has), SQL grounding returns
the seed SQL (as is for an answerable question without evidence, else wrapped: ``SELECT * FROM (seed)``
with evidence, ``SELECT DISTINCT *`` for the "every row" reading, ``LIMIT 1`` for the "first row" one, so
that the golds of different groups do not mask alike), every SQL attempt without the hidden
knowledge or evidence is empty (so it matches nothing), every yes/no check says yes, and the category and
style checks answer what the fake itself was asked to write (it remembers question -> subcategory, style).
"""
from __future__ import annotations

import re
from typing import Callable, Mapping, Sequence

__all__ = ["FakeModel", "DEFAULT_REPLIES", "DEFAULT_CHOICES", "register_default", "prompt_field"]

Reply = str | Callable[[str], str]
Choice = str | Callable[[str, Sequence[str]], str]


def prompt_field(prompt: str, key: str, default: str = "") -> str:
    """The value of the last ``key: value`` line of ``prompt`` (stripped), or ``default``.

    Args:
        prompt: the prompt text.
        key: the field name, e.g. ``"Seed SQL"``.
    """
    found = re.findall(rf"^{re.escape(key)}:[ \t]*(.*)$", prompt, flags=re.M)
    return found[-1].strip() if found else default


# ------------------------------------------------------------------------------------------------ ABISS
_STYLE_WORDS = {"formal": "{q}", "colloquial": "hey, {q}", "interrogative": "{q}"}


def _styled(question: str, style: str) -> str:
    q = question.strip().rstrip("?.").strip()
    q = q[:1].lower() + q[1:] if style == "colloquial" else q
    out = _STYLE_WORDS.get(style, "{q}").format(q=q)
    return out + ("?" if style == "interrogative" else ".")


def _first_table(sql: str) -> str:
    """The first table the seed SQL reads (sqlglot), or ``"record"``."""
    import sqlglot
    from sqlglot import exp

    try:
        t = next(sqlglot.parse_one(sql, read="sqlite").find_all(exp.Table), None)
    except Exception:  # noqa: BLE001 - a fake: any seed is fine
        t = None
    return t.name if t is not None and t.name else "record"


def _abiss_nlq(self: "FakeModel", prompt: str) -> str:
    sub = prompt_field(prompt, "Subcategory").split(" ")[0]
    group = prompt_field(prompt, "Group")
    style = prompt_field(prompt, "Style").split(" ")[0]
    seed_q = prompt_field(prompt, "Seed question")
    db = prompt_field(prompt, "Database", "the database")
    if group == "unanswerable":
        q = _styled(f"What is the favourite colour of each {_first_table(prompt_field(prompt, 'Seed SQL'))} "
                    f"in {db}", style)
        lines = [f"Question: {q}", "Evidence: none",
                 f"Hidden knowledge: The {db} database has no column or table that records favourite colours, "
                 "so this cannot be answered; ask the database administrator to add that information."]
    elif group == "ambiguous":
        q = _styled(seed_q.strip().rstrip("?.") + ", the matching ones", style)
        ev = ("Two definitions are on file: the answer covers every row; the answer covers only the first row."
              if sub == "conflicting_knowledge" else "none")
        lines = [f"Question: {q}", f"Evidence: {ev}", "Hidden knowledge 1: I mean every matching row.",
                 "Hidden knowledge 2: I mean only the first matching row."]
    else:
        q = _styled(seed_q, style)
        ev = "The answer comes from the tables named in the schema." if sub == "answerable_with_evidence" else "none"
        lines = [f"Question: {q}", f"Evidence: {ev}", "Hidden knowledge: none"]
    self._made[q] = (sub, style)
    return "\n".join(lines)


def _abiss_sql(self: "FakeModel", prompt: str) -> str:
    seed = prompt_field(prompt, "Reference SQL").rstrip(";")
    hk = prompt_field(prompt, "Hidden knowledge")
    if "only the first" in hk:
        return f"SELECT * FROM ({seed}) LIMIT 1"
    if "every matching" in hk:
        return f"SELECT DISTINCT * FROM ({seed})"
    if prompt_field(prompt, "Evidence", "none") != "none":
        return f"SELECT * FROM ({seed})"
    return seed


def _abiss_category(self: "FakeModel", prompt: str, options: Sequence[str]) -> str:
    sub = self._made.get(prompt_field(prompt, "Question"), ("", ""))[0]
    for opt in options:
        if prompt_field(prompt, f"Category {opt}").split(" ")[0] == sub:
            return opt
    return options[0]


def _abiss_style(self: "FakeModel", prompt: str, options: Sequence[str]) -> str:
    style = self._made.get(prompt_field(prompt, "Question"), ("", ""))[1]
    return style if style in options else options[0]


#: marker -> default ``generate`` reply (a string, or ``callable(fake, prompt)``).
DEFAULT_REPLIES: dict[str, Reply | Callable] = {
    "[task:abiss_nlq]": _abiss_nlq,
    "[task:abiss_sql]": _abiss_sql,
    "[task:abiss_sql_noevidence]": "",
    "[task:abiss_sql_nohk]": "",
    "[task:abiss_sql_attempt]": "",
}
#: marker -> default ``score`` choice (an option, or ``callable(fake, prompt, options)``).
DEFAULT_CHOICES: dict[str, Choice | Callable] = {
    "[task:abiss_conform]": "yes",
    "[task:abiss_satisfy]": "yes",
    "[task:abiss_feedback]": "yes",
    "[task:abiss_category]": _abiss_category,
    "[task:abiss_style]": _abiss_style,
}


def register_default(marker: str, *, reply: Reply | Callable | None = None,
                     choice: Choice | Callable | None = None) -> None:
    """Add (or replace) the fake's default answer for a task marker (other recipes' prompts).

    Args:
        marker: the task marker, e.g. ``"[task:tide_chain]"``.
        reply: the ``generate`` default: a string, or ``callable(fake, prompt) -> str``.
        choice: the ``score`` default: an option, or ``callable(fake, prompt, options) -> option``.
    Raises:
        ValueError: neither given, or an empty marker.
    """
    if not marker or (reply is None and choice is None):
        raise ValueError("register_default needs a marker and a reply or a choice")
    if reply is not None:
        DEFAULT_REPLIES[marker] = reply
    if choice is not None:
        DEFAULT_CHOICES[marker] = choice


class FakeModel:
    """A deterministic ``GenerationBackend`` answering by task marker (see the module docstring).

    Args:
        name: display name (council names must be told apart: use ``"fake-a"``, ``"fake-b"`` ...).
        replies: marker -> reply text or ``callable(prompt) -> str``, searched before the defaults.
        choices: marker -> option or ``callable(prompt, options) -> option``, searched before the defaults.
        chat: render prompts with :meth:`render_chat` (a simple ``role: content`` template).
    Attributes:
        calls: ``(method, marker or None, n_prompts)`` for every call, in order.
    """

    def __init__(self, name: str = "fake", *, replies: Mapping[str, Reply] = (),
                 choices: Mapping[str, Choice] = (), chat: bool = False):
        self.name = name
        self.chat = bool(chat)
        self.replies = dict(replies)
        self.choices = dict(choices)
        self.calls: list[tuple[str, str | None, int]] = []

    #: question text -> (subcategory, style) of every NLQ object a fake wrote, shared by all fakes so that
    #: a council of fakes judges what its generator wrote (a later write of the same question replaces it).
    _made: dict[str, tuple[str, str]] = {}

    @staticmethod
    def _find(prompt: str, mapping: Mapping) -> str | None:
        return next((k for k in mapping if k in prompt), None)

    def render_chat(self, messages: Sequence[dict], add_generation_prompt: bool) -> str:
        """``<|role|>\\ncontent`` blocks, then ``<|assistant|>\\n`` when ``add_generation_prompt``."""
        text = "".join(f"<|{m['role']}|>\n{m['content']}\n" for m in messages)
        return text + ("<|assistant|>\n" if add_generation_prompt else "")

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: str | None = "\n", *,
                 shared_prefix: str = "", do_sample: bool = False, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None) -> list[str]:
        """The reply of each prompt's marker, cut before ``stop`` (as a real backend would).

        Raises:
            ValueError: a prompt that does not start with ``shared_prefix``.
        """
        out = []
        for p in prompts:
            if not p.startswith(shared_prefix):
                raise ValueError("prompt does not start with the given shared_prefix")
            k = self._find(p, self.replies)
            if k is not None:
                r = self.replies[k]
                text = r(p) if callable(r) else r
            else:
                k = self._find(p, DEFAULT_REPLIES)
                r = DEFAULT_REPLIES.get(k, "") if k is not None else ""
                text = r(self, p) if callable(r) else r
            self.calls.append(("generate", k, 1))
            text = str(text)
            if stop and stop in text:
                text = text[: text.index(stop)]
            out.append(text.strip())
        return out

    def score(self, prompts: Sequence[str], options: Sequence[str], *, shared_prefix: str = "") -> list[list[float]]:
        """0.0 for each prompt's chosen option, -1.0 for the others.

        Raises:
            ValueError: no options, a prompt not starting with ``shared_prefix``, or a choice that is not
                among the options.
        """
        if not options:
            raise ValueError("score needs at least one option")
        opts = [o.strip() for o in options]
        out = []
        for p in prompts:
            if not p.startswith(shared_prefix):
                raise ValueError("prompt does not start with the given shared_prefix")
            k = self._find(p, self.choices)
            if k is not None:
                c = self.choices[k]
                pick = c(p, opts) if callable(c) else c
            else:
                k = self._find(p, DEFAULT_CHOICES)
                c = DEFAULT_CHOICES.get(k) if k is not None else None
                pick = (c(self, p, opts) if callable(c) else c) if c is not None else opts[0]
            self.calls.append(("score", k, 1))
            if pick not in opts:
                raise ValueError(f"fake {self.name!r}: choice {pick!r} for marker {k!r} is not among {opts!r}")
            out.append([0.0 if o == pick else -1.0 for o in opts])
        return out
