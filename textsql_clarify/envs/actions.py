"""Parse an agent's action string into an :class:`Action`.

Two spellings are accepted (DESIGN.md "Contracts"):

* JSON: ``{"type": "sql" | "clarify" | "feedback" | "classify", "content": "..."}``
* tagged text: ``<sql>…</sql>``, ``<clarify>…</clarify>``, ``<feedback>…</feedback>``,
  ``<category>…</category>`` (``category`` is the tag of the ``classify`` action).

Text outside the one action tag (an LLM's reasoning) is ignored, and so is everything inside a
``<think>…</think>`` block, action tags included. Anything else is
malformed and raises :class:`~textsql_clarify.errors.ActionError` with a reason the env shows back to
the agent: empty input, no action, two actions, an action nested in another, an empty body, invalid
JSON, an unknown type, or input longer than ``max_chars``. The parser never raises anything else.

An action tag written inside the body (``<sql>SELECT '<sql>'</sql>``) reads as a nested action and is
refused; send such SQL as JSON (``{"type": "sql", "content": "SELECT '<sql>'"}``), whose content is taken
verbatim.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass

from ..errors import ActionError

ACTION_KINDS = ("sql", "clarify", "feedback", "classify")
_TAG_TO_KIND = {"sql": "sql", "clarify": "clarify", "feedback": "feedback", "category": "classify"}
_KIND_TO_TAG = {v: k for k, v in _TAG_TO_KIND.items()}
#: default cap on an action's length, in characters (1 MB of junk is refused fast, not parsed).
MAX_ACTION_CHARS = 65_536

_OPEN_OR_CLOSE = re.compile(r"<\s*(/?)\s*(sql|clarify|feedback|category)\s*>", re.IGNORECASE)
_THINK = re.compile(r"<\s*think\s*>.*?<\s*/\s*think\s*>", re.IGNORECASE | re.DOTALL)
_CODE_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)


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


def _clean_body(kind: str, body: str) -> str:
    body = body.strip()
    if kind == "sql":
        m = _CODE_FENCE.match(body)
        if m:
            body = m.group(1).strip()
    return body


def _parse_json(text: str) -> Action:
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, RecursionError, ValueError) as e:  # ValueError: integer too long to convert
        msg = getattr(e, "msg", None) or ("too deeply nested" if isinstance(e, RecursionError) else str(e)[:80])
        raise ActionError(f"invalid JSON action: {msg}") from None
    if not isinstance(obj, dict):
        raise ActionError("a JSON action must be an object with 'type' and 'content'")
    kind, content = obj.get("type"), obj.get("content")
    if not isinstance(kind, str) or kind.strip().lower() not in ACTION_KINDS:
        raise ActionError(f"unknown action type {kind!r}; expected one of {list(ACTION_KINDS)}")
    if not isinstance(content, str):
        raise ActionError("a JSON action's 'content' must be a string")
    kind = kind.strip().lower()
    content = _clean_body(kind, content)
    if not content:
        raise ActionError(f"empty {kind} action")
    return Action(kind, content)


def parse_action(raw: object, *, max_chars: int = MAX_ACTION_CHARS) -> Action:
    """Parse one action string.

    Args:
        raw: the agent's output (anything; non-strings are malformed).
        max_chars: longer inputs are refused without parsing.

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
    try:
        raw.encode("utf-8")
    except UnicodeEncodeError:
        raise ActionError("action is not valid Unicode (lone surrogate)") from None
    text = _THINK.sub(" ", raw).strip()
    if not text:
        raise ActionError("empty action")
    if text.startswith("{"):
        return _parse_json(text)

    tokens = list(_OPEN_OR_CLOSE.finditer(text))
    if not tokens:
        raise ActionError("no action found: wrap it in <sql>, <clarify>, <feedback> or <category> tags, "
                          "or send JSON {\"type\": ..., \"content\": ...}")
    actions: list[tuple[str, str]] = []
    open_tag: tuple[str, int] | None = None
    for tok in tokens:
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
        raise ActionError(f"<{open_tag[0]}> is not closed")
    if len(actions) != 1:
        raise ActionError(f"found {len(actions)} actions; send exactly one")
    tag, body = actions[0]
    kind = _TAG_TO_KIND[tag]
    body = _clean_body(kind, body)
    if not body:
        raise ActionError(f"empty <{tag}> action")
    return Action(kind, body)
