"""What an LLM agent is shown and how its completion becomes one action.

Shared by every LLM agent (transformers, OpenAI-compatible server), the SFT export and the trainer
adapters, so a model trained on one path reads the same prompt on the others.

The prompt is the env's own ``info["messages"]`` (instructions, the category information of the
chosen ABISS §5.1 mode, the schema, then the dialogue) with one worked example appended to the system
message, in the spirit of ABISS's baseline agent prompt (§5.1: schema, category information, action
format, one example) and TIDE's agent prompt (App. D: one tagged action per turn). The example is a
fixed, invented exchange over a database that no benchmark uses, so it leaks no gold.

Generation stops at the first closing action tag (:data:`STOP_STRINGS`). The env's parser
(:func:`~textsql_clarify.envs.actions.parse_action`) alone decides what a completion means:
:func:`extract_action` hands the env a completion as it is or a shorter form that the parser reads as the
same action, never a repaired one, so a trainer charges the format penalty wherever ``env.step`` on the
completion charges it (two actions, an action only inside ``<think>``, an unclosed tag, ...).
"""
from __future__ import annotations

from typing import Any, Sequence

from ..envs.actions import MAX_ACTION_CHARS, parse_action, unclosed_action_tag
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


def extract_action(text: str, *, dropped_stop: str | bool | None = None, max_chars: int = MAX_ACTION_CHARS) -> str:
    """The action string to step the env with for one completion: what the env's parser reads in it, no more.

    The completion is ``text``, plus the stop string the generator matched and dropped (``dropped_stop``).
    When :func:`~textsql_clarify.envs.actions.parse_action` refuses the completion, it is returned unchanged,
    so ``env.step`` refuses it with the same reason and the same ``format`` penalty. When it parses, the
    return is the canonical ``<tag>body</tag>`` of that action (the completion cut after the action's closing
    tag, reasoning and think blocks left out) if the parser reads that as the same action, else the completion.
    So ``parse_action(extract_action(t, ...))`` equals ``parse_action`` of the completion, action or refusal:
    one parser for training and evaluation (``tests/test_parse_parity.py``).

    Args:
        text: the decoded completion.
        dropped_stop: ``None`` (default): ``text`` is the whole completion (``transformers``' ``generate`` keeps
            the matched stop string; a completion cut by the token limit stays cut, and an action it left open
            is malformed). A string: the stop string the generator matched and dropped, appended back. ``True``:
            the generator drops the matched stop string (OpenAI-compatible servers, which do not say which of
            :data:`STOP_STRINGS` matched): the closing tag of the action ``text`` leaves open at its end is
            appended back (:func:`~textsql_clarify.envs.actions.unclosed_action_tag`), the only stop string
            after which the completion can be one action; nothing is added when no action is left open.
        max_chars: the env's ``max_action_chars`` (a completion longer than that is refused, not cut).
    Returns:
        The action string.
    """
    s = text if isinstance(text, str) else str(text)
    if isinstance(dropped_stop, str):
        s += dropped_stop
    elif dropped_stop is True:
        tag = unclosed_action_tag(s, max_chars=max_chars)
        if tag is not None:
            s += f"</{tag}>"
    try:
        action = parse_action(s, max_chars=max_chars)
    except ActionError:
        return s
    short = action.render()
    try:
        same = parse_action(short, max_chars=max_chars) == action
    except ActionError:  # e.g. JSON content holding an action tag: only the completion itself says it
        same = False
    return short if same else s


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
