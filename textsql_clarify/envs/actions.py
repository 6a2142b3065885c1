"""Parse an agent's action string into an :class:`Action`.

Two spellings are accepted (README "Using it"; ``docs/platform.md``, "Action strings and episode state"):

* JSON: ``{"type": "sql" | "clarify" | "feedback" | "classify", "content": "..."}``
* tagged text: ``<sql>…</sql>``, ``<clarify>…</clarify>``, ``<feedback>…</feedback>``,
  ``<category>…</category>`` (``category`` is the tag of the ``classify`` action).

Text outside the one action tag (an LLM's reasoning) is ignored, and so is everything inside a
``<think>…</think>`` block, action tags included. Anything else is
malformed and raises :class:`~textsql_clarify.errors.ActionError` with a reason the env shows back to
the agent: empty input, no action, two actions, an action nested in another, an empty body (one with no
letter or digit: zero-width characters or punctuation alone), invalid
JSON, an unknown type, text that is not valid Unicode (a lone surrogate, raw or written as a JSON
``\\ud83d`` escape, in the content or in any other string of the JSON object), a NUL character, or input
longer than ``max_chars``. The parser never raises anything else, and it takes time linear in the input's
length whatever the input (unclosed ``<think>`` tags and unclosed code fences must not be quadratic).

Invalid text is refused, not repaired: a repaired content would not be what the agent sent, and the
refusal follows the malformed-action contract (error observation, ``format`` component, one retry, then
abstention; TIDE App. D). A leading byte-order mark (U+FEFF) is an encoding artefact and is dropped.

An action tag written inside the body (``<sql>SELECT '<sql>'</sql>``) reads as a nested action and is
refused; send such SQL as JSON (``{"type": "sql", "content": "SELECT '<sql>'"}``), whose content is taken
verbatim.
"""
from __future__ import annotations

import itertools
import json
import re
import reprlib
from dataclasses import dataclass

from ..errors import ActionError
from ..text import valid_unicode

ACTION_KINDS = ("sql", "clarify", "feedback", "classify")
_TAG_TO_KIND = {"sql": "sql", "clarify": "clarify", "feedback": "feedback", "category": "classify"}
_KIND_TO_TAG = {v: k for k, v in _TAG_TO_KIND.items()}
#: default cap on an action's length, in characters (1 MB of junk is refused fast, not parsed).
MAX_ACTION_CHARS = 65_536

#: ``(?:(/)\s*)?``, not ``(/?)\s*``: two adjacent ``\s*`` split a run of spaces every way, quadratic on ``<`` and
#: spaces (measured: 6.7 s at 16,000); group 1 is ``"/"`` on a closing tag, else ``None``.
_OPEN_OR_CLOSE = re.compile(r"<\s*(?:(/)\s*)?(sql|clarify|feedback|category)\s*>", re.IGNORECASE)
#: the ``<think>`` and ``</think>`` tags; :func:`strip_think` pairs them in one forward pass.
_THINK_OPEN = re.compile(r"<\s*think\s*>", re.IGNORECASE)
_THINK_CLOSE = re.compile(r"<\s*/\s*think\s*>", re.IGNORECASE)
_FENCE_LANG = re.compile(r"[a-zA-Z]*")
_BOM = "\ufeff"
#: at most this many characters of a malformed action are kept in its trajectory turn.
RECORD_CHARS = 2000


def _bounded_repr(**limits: int) -> reprlib.Repr:
    r = reprlib.Repr()  # keyword limits need Python 3.12; set them as attributes
    for k, v in limits.items():
        setattr(r, k, v)
    return r


_SHORT_REPR = _bounded_repr(maxlevel=2, maxstring=40, maxother=40, maxlist=4, maxdict=4)
_RECORD_REPR = _bounded_repr(maxlevel=3, maxstring=RECORD_CHARS, maxother=RECORD_CHARS)


@dataclass(frozen=True)
class Action:
    """A parsed action.

    Attributes:
        type: ``sql`` | ``clarify`` | ``feedback`` | ``classify``.
        content: the stripped body (SQL text, question, explanation or category label).
    """

    type: str
    content: str

    def render(self) -> str:
        """The canonical tagged spelling, e.g. ``<sql>SELECT 1</sql>``."""
        tag = _KIND_TO_TAG[self.type]
        return f"<{tag}>{self.content}</{tag}>"


def strip_think(text: str) -> str:
    """Replace every ``<think>…</think>`` block of ``text`` with one space, in time linear in ``len(text)``.

    Blocks pair as a lazy regex pairs them: an opening tag ends at the first closing tag after it (an
    opening tag inside a block is part of the block), a closing tag outside any block is kept, and an
    opening tag that is never closed is kept with everything after it. Tags are case-insensitive and may
    hold spaces (``< / THINK >``).

    Args:
        text: the action string.
    Returns:
        ``text`` without its closed think blocks.

    Source: ``docs/platform.md`` "Action strings and episode state" (a lazy ``<think>.*?</think>`` regex takes
    9.1 s on ``"<think>" * 9362``).
    """
    out: list[str] = []
    pos = 0                                  # text[pos:] is not yet copied to ``out``
    while (opening := _THINK_OPEN.search(text, pos)) is not None:
        closing = _THINK_CLOSE.search(text, opening.end())
        if closing is None:                  # never closed: kept, with everything after it
            break
        out += [text[pos:opening.start()], " "]
        pos = closing.end()
    if not out:
        return text
    out.append(text[pos:])
    return "".join(out)


def text_problem(text: str) -> str | None:
    """Why ``text`` cannot be an action's text, or ``None`` when it can.

    Refused: a NUL character (U+0000: C APIs such as SQLite's read it as the end of the string) and a
    surrogate code point (U+D800..U+DFFF, alone or paired: a Python ``str`` holding one cannot be encoded
    as UTF-8, which crashed tokenizers, the MiniLM judge and JSON writers). Other control characters are
    allowed. Linear time.

    Args:
        text: any string.
    Returns:
        a short reason naming the first bad character and its position, or ``None``.

    Source: ``docs/platform.md`` "Action strings and episode state" (``{"type": "feedback", "content":
    "Sorry \\ud83d"}`` must not crash ``step()``).
    """
    nul = text.find("\x00")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        if nul < 0 or e.start < nul:
            return f"is not valid Unicode: lone surrogate U+{ord(text[e.start]):04X} at character {e.start}"
    if nul >= 0:
        return f"contains a NUL character (U+0000) at character {nul}"
    return None


def record_text(raw: object, limit: int = RECORD_CHARS) -> str:
    """A malformed action as its trajectory turn records it: at most ``limit`` characters, always valid
    UTF-8 (surrogates become U+FFFD), never raising (a non-string is shown by a bounded ``repr``).

    Args:
        raw: what the agent sent.
        limit: most characters kept.
    Returns:
        The text to record.
    """
    if isinstance(raw, str):
        text = raw[:limit]
    elif isinstance(raw, (bytes, bytearray)):
        text = repr(bytes(raw[:limit]))[:limit]
    else:
        try:
            text = _RECORD_REPR.repr(raw)[:limit]
        except Exception:  # a broken __repr__ must not break the step
            text = f"<{type(raw).__name__} object>"
    return valid_unicode(text)


def _check_strings(obj: dict) -> None:
    """Refuse a decoded JSON action any of whose strings (keys and values, at any depth) is bad text.
    The reason names the top-level field (``'content'``) and never quotes the bad text itself."""
    stack: list[tuple[object, str]] = []
    for k, v in obj.items():
        plain = isinstance(k, str) and k.isascii() and k.isidentifier() and len(k) <= 20
        stack += [(k, "field name"), (v, f"'{k}'" if plain else "field")]
    while stack:
        value, where = stack.pop()
        if isinstance(value, str):
            problem = text_problem(value)
            if problem:
                raise ActionError(f"the JSON action's {where} {problem}")
        elif isinstance(value, dict):
            stack += [(x, where) for kv in value.items() for x in kv]
        elif isinstance(value, list):
            stack += [(x, where) for x in value]


def _clean_body(kind: str, body: str) -> str:
    """The action's body as the env reads it: stripped, a SQL code fence removed; ``""`` (an empty action) when
    no letter or digit is left. A body of zero-width characters (U+200B, U+2060, a soft hyphen) or of
    punctuation alone (``"?"``) says nothing: read as a clarification it would take the ``decision``
    component's credit for asking (``rewards/decision.py``) with no question in it, so it is malformed like an
    empty body (TIDE App. D's malformed-action contract)."""
    body = body.strip()
    if kind == "sql" and len(body) >= 6 and body.startswith("```") and body.endswith("```"):
        # a Markdown code fence with an optional language word: ```sql\n...\n``` (string operations: the
        # former ``^```[a-zA-Z]*\s*\n?(.*?)\n?```$`` regex was quadratic on "```" + spaces)
        inner = body[3:-3]
        body = inner[_FENCE_LANG.match(inner).end():].strip()
    if not any(ch.isalnum() for ch in body):  # str.isalnum: Unicode letters and digits (categories L*, N*)
        return ""
    return body


def _parse_json(text: str) -> Action:
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as e:  # ValueError: integer too long to convert
        msg = getattr(e, "msg", None) or ("too deeply nested" if isinstance(e, RecursionError) else str(e)[:80])
        raise ActionError(f"invalid JSON action: {msg}") from None
    if not isinstance(obj, dict):
        raise ActionError("a JSON action must be an object with 'type' and 'content'")
    _check_strings(obj)  # JSON escapes (\\ud83d, \\u0000) decode to text the raw check never saw
    kind, content = obj.get("type"), obj.get("content")
    if not isinstance(kind, str) or kind.strip().lower() not in ACTION_KINDS:
        shown = _SHORT_REPR.repr(kind)  # bounded: a huge or deep JSON value must not flood the message
        raise ActionError(f"unknown action type {shown}; expected one of {list(ACTION_KINDS)}")
    if not isinstance(content, str):
        raise ActionError("a JSON action's 'content' must be a string")
    kind = kind.strip().lower()
    content = _clean_body(kind, content)
    if not content:
        raise ActionError(f"empty {kind} action (no letter or digit)")
    return Action(kind, content)


def parse_action(raw: object, *, max_chars: int = MAX_ACTION_CHARS) -> Action:
    """Parse one action string.

    Args:
        raw: the agent's output: a ``str``, or UTF-8 ``bytes``; anything else is malformed.
        max_chars: longer inputs (characters) are refused without parsing.

    Returns:
        The :class:`Action`.

    Raises:
        ActionError: the input is malformed; ``reason`` says how.
    """
    if isinstance(raw, bytes):
        try:
            raw = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ActionError("action bytes are not valid UTF-8") from None
    if not isinstance(raw, str):
        raise ActionError(f"an action must be a string, got {type(raw).__name__}")
    if len(raw) > max_chars:
        raise ActionError(f"action too long: {len(raw)} characters (limit {max_chars})")
    problem = text_problem(raw)
    if problem:
        raise ActionError(f"action {problem}")
    if raw.startswith("<sql>") and raw.endswith("</sql>") and len(raw) >= 11 and "<" not in raw[5:-6]:
        # the plain ``<sql>…</sql>`` of an RL completion, without reasoning around it: no other ``<`` means no
        # think block, no BOM, nothing to strip and exactly these two tags, so the general path below would
        # read the same body (``docs/platform.md`` "Step cost": the EX-only step's fixed cost)
        body = _clean_body("sql", raw[5:-6])
        if not body:
            raise ActionError("empty <sql> action (no letter or digit)")
        return Action("sql", body)
    text = strip_think(raw.lstrip(_BOM)).strip()
    if not text:
        raise ActionError("empty action")
    if text.startswith("{"):
        return _parse_json(text)

    tokens = _OPEN_OR_CLOSE.finditer(text)  # lazily: a nested or unmatched tag stops the scan
    first = next(tokens, None)
    if first is None:
        raise ActionError("no action found: wrap it in <sql>, <clarify>, <feedback> or <category> tags, "
                          "or send JSON {\"type\": ..., \"content\": ...}")
    actions: list[tuple[str, str]] = []
    open_tag: tuple[str, int] | None = None
    for tok in itertools.chain((first,), tokens):
        closing, tag = tok.group(1) == "/", tok.group(2).lower()
        if not closing:
            if open_tag is not None:
                raise ActionError(f"<{tag}> is nested inside <{open_tag[0]}>: send exactly one action")
            open_tag = (tag, tok.end())
        else:
            if open_tag is None or open_tag[0] != tag:
                raise ActionError(f"unmatched </{tag}>")
            actions.append((tag, text[open_tag[1]:tok.start()]))
            open_tag = None
    if open_tag is not None:
        err = ActionError(f"<{open_tag[0]}> is not closed")
        err.unclosed_tag = open_tag[0]  # read by unclosed_action_tag: the text ends inside this action
        raise err
    if len(actions) != 1:
        raise ActionError(f"found {len(actions)} actions; send exactly one")
    tag, body = actions[0]
    kind = _TAG_TO_KIND[tag]
    body = _clean_body(kind, body)
    if not body:
        raise ActionError(f"empty <{tag}> action (no letter or digit)")
    return Action(kind, body)


def unclosed_action_tag(raw: object, *, max_chars: int = MAX_ACTION_CHARS) -> str | None:
    """The action tag that ``raw`` leaves open at its end, as :func:`parse_action` reads it, or ``None``.

    ``parse_action`` refuses such text with ``"<tag> is not closed"`` once every earlier tag paired up (no
    nested action, no unmatched closing tag before it); think blocks, the BOM and JSON are handled as there.
    A generator that drops the matched stop string (OpenAI-compatible servers) returns ``<sql>SELECT 1`` for
    the completion ``<sql>SELECT 1</sql>``; this names the tag whose closing one it dropped.

    Args:
        raw: the text, as for :func:`parse_action`.
        max_chars: as for :func:`parse_action`.
    Returns:
        the lower-case tag name (``"sql"``, ``"clarify"``, ``"feedback"`` or ``"category"``), or ``None`` when
        ``raw`` parses or is refused for another reason. Never raises.
    """
    try:
        parse_action(raw, max_chars=max_chars)
    except ActionError as e:
        return getattr(e, "unclosed_tag", None)
    return None
