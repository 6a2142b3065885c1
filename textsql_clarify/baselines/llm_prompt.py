"""What an LLM agent is shown and how its completion becomes one action.

Shared by every LLM agent (transformers, OpenAI-compatible server), the SFT export and the trainer
adapters, so a model trained on one path reads the same prompt on the others.

The prompt is the env's own ``info["messages"]`` (instructions, the category information of the
chosen ABISS §5.1 mode, the schema, then the dialogue) with one worked example appended to the system
message, in the spirit of ABISS's baseline agent prompt (§5.1: schema, category information, action
format, one example) and TIDE's agent prompt (App. D: one tagged action per turn). The example is a
fixed, invented exchange over a database that no benchmark uses, so it leaks no gold.

A completion is cut after the first closing action tag (:func:`extract_action`): generation stops
there (:data:`STOP_STRINGS`), and any text after it would make the env read two actions.
"""
from __future__ import annotations

import re
from typing import Any, Sequence

from ..envs.actions import parse_action
from ..errors import ActionError

__all__ = ["WORKED_EXAMPLE", "STOP_STRINGS", "agent_messages", "extract_action", "is_format_valid"]

#: One worked example of the action format (invented database; three turns: ask, answer, SQL).
WORKED_EXAMPLE = (
    "Example (a different database, with a table pets(name, species, age)):\n"
    "user: How many old pets are there?\n"
    "assistant: <clarify>What age counts as old for you?</clarify>\n"
    "user: Older than 10 years.\n"
    "assistant: <sql>SELECT COUNT(*) FROM pets WHERE age > 10</sql>\n"
    "If the database has no column or table that the question needs, reply instead with\n"
    "<feedback>The database records no owner of a pet, so this cannot be answered.</feedback>\n"
    "Reply with exactly one action and nothing else."
)

#: Closing tags at which generation stops (one action per turn).
STOP_STRINGS = ("</sql>", "</clarify>", "</feedback>", "</category>")

_OPEN = re.compile(r"<\s*(sql|clarify|feedback|category)\s*>", re.IGNORECASE)


def agent_messages(info: dict[str, Any], *, example: bool = True) -> list[dict[str, str]]:
    """The chat an LLM agent answers: ``info["messages"]`` with the worked example in the system message.

    Args:
        info: the env's ``info`` of the current turn (needs ``"messages"``: a list of
            ``{"role", "content"}`` dicts, the first one the system message).
        example: append :data:`WORKED_EXAMPLE` to the system message.
    Returns:
        A new list of new dicts (the env's list is never changed).
    Raises:
        KeyError: ``info`` has no ``"messages"``.
    """
    msgs = [dict(m) for m in info["messages"]]
    if example and msgs and msgs[0].get("role") == "system":
        msgs[0]["content"] = msgs[0]["content"] + "\n\n" + WORKED_EXAMPLE
    return msgs


def extract_action(text: str) -> str:
    """The first tagged action of a completion, up to and including its closing tag.

    The completion is cut at the end of the first action (an opening tag and the matching closing
    tag that follows it). A completion with an opening tag and no closing tag gets the closing tag
    added (generation hit its token limit mid-action); an action left open when another opening tag
    follows ends where that tag begins. A completion without any action tag (JSON, or
    prose) is returned stripped, for the env to parse or refuse.

    Args:
        text: the decoded completion.
    Returns:
        The action string.
    """
    s = str(text)
    m = _OPEN.search(s)
    if m is None:
        return s.strip()
    tag = m.group(1).lower()
    close = re.compile(rf"<\s*/\s*{tag}\s*>", re.IGNORECASE)
    c = close.search(s, m.end())
    nxt = _OPEN.search(s, m.end())
    if nxt is not None and (c is None or nxt.start() < c.start()):
        # the action was left open and another one begins: the first ends where the next begins
        return f"<{tag}>{s[m.end():nxt.start()].strip()}</{tag}>"
    if c is None:
        return f"<{tag}>{s[m.end():].strip()}</{tag}>"
    return f"<{tag}>{s[m.end():c.start()]}</{tag}>"


def is_format_valid(action: str, *, kinds: Sequence[str] = ("sql", "clarify", "feedback", "classify")) -> bool:
    """True when the env's parser (:func:`~textsql_clarify.envs.actions.parse_action`) reads
    ``action`` as one action of one of ``kinds``.

    Args:
        action: the action string (tagged or JSON).
        kinds: the action types that count (default: all four).
    Returns:
        Whether it parses as one action of those types; never raises for a malformed action. Whether the
        env would also allow it in its turn (a clarification on the final turn is refused) is not checked.
    Source: TIDE App. D (one action per turn; malformed actions).
    """
    try:
        return parse_action(action).type in kinds
    except ActionError:
        return False
