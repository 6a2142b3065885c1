"""Training parses as evaluation does: one parser (``envs.actions.parse_action``) decides for both.

The tagged training paths (``integrations.trl_rollout``, ``integrations.verifiers_env``, and the baseline LLM
agents) step the env with ``extract_action(completion)``; evaluation (``env.step``, the OpenEnv server) steps
it with the completion itself. Over a few thousand fuzzed completions (tags in any case and spacing,
``<think>`` blocks closed or not, two actions, JSON actions, unclosed and nested tags, whitespace, a BOM,
unicode), built deterministically from one seed, the action the training path sends must get the same
verdict from ``env.step`` as the completion: the same ``format`` component, the same refusal reason, the
same action type and content.
"""
from __future__ import annotations

import json
import random
from collections import Counter

import pytest

from textsql_clarify.baselines.llm_prompt import STOP_STRINGS, extract_action
from textsql_clarify.datasets import load_dataset
from textsql_clarify.envs.actions import parse_action, unclosed_action_tag
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.errors import ActionError

N_COMPLETIONS = 3000
TAGS = ("sql", "clarify", "feedback", "category")
BODIES = ("SELECT count(*) FROM student", "Which year do you mean?", "The table of owners is not kept.",
          "scope", "", "   ", "café ☕ 数据", "SELECT '<x>' FROM t", "```sql\nSELECT 1\n```", "SELECT 1 -- </b>",
          "a\nb\tc", "{\"type\": \"sql\"}")
PROSE = ("Let me think.", "Sure!", "\n", "  ", "\ufeff", "Hope this helps.", "I'll answer: ", "ü ß ✓",
         "<b>bold</b>")


def _tag(rng: random.Random, name: str, closing: bool) -> str:
    spelled = rng.choice([name, name.upper(), name.capitalize()])
    slash = "/" if closing else ""
    return rng.choice([f"<{slash}{spelled}>", f"< {slash}{spelled} >", f"<{slash} {spelled}>"])


def _action(rng: random.Random) -> str:
    name = rng.choice(TAGS)
    body = rng.choice(BODIES)
    form = rng.random()
    if form < 0.6:
        return _tag(rng, name, False) + body + _tag(rng, name, True)
    if form < 0.7:  # closed by another tag
        return _tag(rng, name, False) + body + _tag(rng, rng.choice(TAGS), True)
    if form < 0.8:  # unclosed (a token-limit cut)
        return _tag(rng, name, False) + body
    if form < 0.9:  # nested
        inner = rng.choice(TAGS)
        return (_tag(rng, name, False) + body + _tag(rng, inner, False) + "x" + _tag(rng, inner, True)
                + _tag(rng, name, True))
    return _tag(rng, name, True)  # a stray closing tag


def _json(rng: random.Random) -> str:
    kind = rng.choice(["sql", "clarify", "feedback", "classify", "SQL", "nope", 3])
    content = rng.choice(list(BODIES) + [None, 7, "<sql>SELECT 1</sql>", "<think>x</think>SELECT 1"])
    obj = rng.choice([{"type": kind, "content": content}, {"type": kind}, [kind, content]])
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
    return text[: rng.randrange(1, len(text))] if rng.random() < 0.1 else text  # sometimes cut mid-JSON


def _think(rng: random.Random) -> str:
    inner = rng.choice(["", "hmm", _action(rng), _action(rng) + " " + _action(rng)])
    closing = rng.choice(["</think>", "</THINK>", "< / think >", ""])
    return rng.choice(["<think>", "<Think>", "< think >"]) + inner + closing


def fuzzed_completions(n: int = N_COMPLETIONS, seed: int = 20) -> list[str]:
    """``n`` completions built from one seed: 1 to 4 pieces (prose, actions, JSON, think blocks) joined."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        pieces = []
        for _ in range(rng.randint(1, 4)):
            r = rng.random()
            pieces.append(rng.choice(PROSE) if r < 0.25 else _action(rng) if r < 0.6 else
                          _think(rng) if r < 0.8 else _json(rng))
        if rng.random() < 0.3:  # JSON alone, as a model may answer
            pieces = [_json(rng)]
        out.append(rng.choice(["", " ", "\n"]).join(pieces))
    return out


class _NoJudge:
    """An FB judge that says no: the parity is about the action's verdict, not its FB score."""

    def judge(self, sample, feedback, schema_identifiers=()) -> bool:
        return False


@pytest.fixture(scope="module")
def envs():
    sample = next(s for s in load_dataset("embedded") if s.group == "answerable")
    return tuple(TextSQLClarifyEnv(samples=[sample], simulator="rule", feedback_judge=_NoJudge(), validate=False)
                 for _ in range(2)) + (sample.id,)


def _verdict(env: TextSQLClarifyEnv, action: str) -> tuple:
    """What ``env.step`` reports for ``action`` on a fresh episode: (format, error, action type, content)."""
    env.reset()
    _obs, _reward, _term, _trunc, info = env.step(action)
    turn = env._traj.turns[-1]
    content = turn.content if turn.action_type != "invalid" else None  # a refusal records the raw text
    return info["reward_components"]["format"], info.get("error"), turn.action_type, content


def _parse(text: str) -> tuple:
    try:
        a = parse_action(text)
        return "ok", a.type, a.content
    except ActionError as e:
        return "refused", e.reason


def test_fuzzed_completions_cover_every_verdict():
    """The fuzz (seed 20, 3,000 completions) reaches every action type and every kind of refusal."""
    verdicts = [_parse(c) for c in fuzzed_completions()]
    assert Counter(v[1] for v in verdicts if v[0] == "ok") == {"sql": 195, "classify": 137, "clarify": 123,
                                                               "feedback": 122}
    refused = [v[1] for v in verdicts if v[0] == "refused"]
    assert len(refused) == 3000 - 577
    for why, n in [("no action found", 654), ("unmatched </", 303), ("found 2 actions", 142), ("is nested inside", 182),
                   ("is not closed", 105), ("invalid JSON", 282), ("unknown action type", 191), ("empty", 290)]:
        assert sum(why in r for r in refused) == n, why


def test_training_action_gets_the_env_verdict_of_the_completion(envs):
    """The TRL rollout path (``extract_action`` of a whole completion) against ``env.step`` of it."""
    train_env, eval_env, _sid = envs
    mismatches = []
    charged = 0
    for c in fuzzed_completions():
        a = extract_action(c, max_chars=train_env.max_action_chars)
        got, want = _verdict(train_env, a), _verdict(eval_env, c)
        charged += want[0] == -1.0
        if got != want:
            mismatches.append((c, a, got, want))
    assert mismatches == []
    # the format penalty was at stake on 2,560 of the 3,000: 2,423 refused by the parser, 137 classify actions
    # refused outside the classification phase (the former extract_action read 947 of them differently)
    assert charged == 2560


def test_training_cut_changes_nothing_the_parser_reads():
    """``parse_action(extract_action(c)) == parse_action(c)``; a refused completion is sent unchanged."""
    for c in fuzzed_completions():
        a = extract_action(c)
        assert _parse(a) == _parse(c), c
        if _parse(c)[0] == "refused":
            assert a == c


def _server_cut(c: str) -> tuple[str, str, str] | None:
    """What an OpenAI-compatible server does with ``stop=STOP_STRINGS``: (returned text, matched stop,
    the completion the model wrote up to the stop), or None when no stop string occurs."""
    hits = [(c.find(s), s) for s in STOP_STRINGS if s in c]
    if not hits:
        return None
    at, stop = min(hits)
    return c[:at], stop, c[:at + len(stop)]


def test_dropped_stop_string_is_put_back_as_the_generator_matched_it():
    """The verifiers / OpenAI-compatible path: the server matched a closing tag and dropped it."""
    checked = inferred = 0
    for c in fuzzed_completions():
        cut = _server_cut(c)
        if cut is None:
            continue
        text, stop, written = cut
        assert _parse(extract_action(text, dropped_stop=stop)) == _parse(written), c
        checked += 1
        if unclosed_action_tag(text) == stop[2:-1]:  # the stop closes the action the text leaves open
            assert _parse(extract_action(text, dropped_stop=True)) == _parse(written), c
            inferred += 1
    assert (checked, inferred) == (343, 175)


def test_think_block_and_two_actions_are_charged_on_both_paths(envs):
    train_env, eval_env, _sid = envs
    for c in ("<think><sql>SELECT 1</sql></think>", "<sql>SELECT 1</sql><sql>SELECT 2</sql>",
              "<sql>SELECT count(*) FROM student", "<think>x</think><clarify>Which year?</clarify><sql>x</sql>"):
        assert _verdict(train_env, extract_action(c))[:2] == _verdict(eval_env, c)[:2]
        assert _verdict(eval_env, c)[0] == -1.0
    # an action after a closed think block is one action on both paths
    c = "<think>maybe <sql>SELECT 2</sql></think> <sql>SELECT count(*) FROM student</sql>"
    assert extract_action(c) == "<sql>SELECT count(*) FROM student</sql>"
    assert _verdict(train_env, extract_action(c)) == _verdict(eval_env, c)
    assert _verdict(eval_env, c)[0] == 0.0
