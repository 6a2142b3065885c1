"""Action parsing: the two spellings, and survival of junk (README "Using it")."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from textsql_clarify.envs.actions import MAX_ACTION_CHARS, Action, parse_action
from textsql_clarify.errors import ActionError


@pytest.mark.parametrize("raw, kind, content", [
    ("<sql>SELECT 1</sql>", "sql", "SELECT 1"),
    ("  <clarify> Which email? </clarify>\n", "clarify", "Which email?"),
    ("<feedback>No staff table.</feedback>", "feedback", "No staff table."),
    ("<category>lexical_overlap</category>", "classify", "lexical_overlap"),
    ("I think this is it.\n<SQL>SELECT name FROM t</SQL>", "sql", "SELECT name FROM t"),
    ("<sql>```sql\nSELECT 2\n```</sql>", "sql", "SELECT 2"),
    ('{"type": "sql", "content": "SELECT 3"}', "sql", "SELECT 3"),
    ('{"type": "Clarify", "content": "Sorted how?"}', "clarify", "Sorted how?"),
    ('{"type": "classify", "content": "scope"}', "classify", "scope"),
])
def test_valid_actions(raw, kind, content):
    assert parse_action(raw) == Action(kind, content)


@pytest.mark.parametrize("raw, reason_part", [
    ("", "empty"),
    ("   \n ", "empty"),
    ("SELECT 1", "no action"),
    ("<foo>bar</foo>", "no action"),
    ("<sql>SELECT 1</sql><clarify>x</clarify>", "2 actions"),
    ("<sql><clarify>x</clarify></sql>", "nested"),
    ("<sql>SELECT 1", "not closed"),
    ("SELECT 1</sql>", "unmatched"),
    ("<sql>  </sql>", "empty"),
    ("{not json", "invalid JSON"),
    ('{"type": "drop", "content": "x"}', "unknown action type"),
    ('{"type": "sql", "content": 5}', "must be a string"),
    ('["sql", "x"]', "no action"),
    ('{"type": "sql"}', "must be a string"),
])
def test_malformed_actions(raw, reason_part):
    with pytest.raises(ActionError) as ei:
        parse_action(raw)
    assert reason_part in ei.value.reason


def test_non_string_and_oversized():
    with pytest.raises(ActionError, match="must be a string"):
        parse_action(None)
    with pytest.raises(ActionError, match="must be a string"):
        parse_action(12)
    big = "<sql>" + "x" * (1024 * 1024) + "</sql>"
    with pytest.raises(ActionError, match="too long"):
        parse_action(big)
    assert parse_action("<sql>" + "x" * 100 + "</sql>", max_chars=MAX_ACTION_CHARS).content == "x" * 100


def test_deeply_nested_json_is_malformed_not_a_crash():
    with pytest.raises(ActionError):
        parse_action("{" + '"a":[' * 50_000 + "]" * 50_000 + "}")


def test_render_roundtrip():
    for a in [Action("sql", "SELECT 1"), Action("clarify", "Which?"), Action("classify", "scope")]:
        assert parse_action(a.render()) == a


_tags = st.sampled_from(["<sql>", "</sql>", "<clarify>", "</clarify>", "<feedback>", "</feedback>",
                         "<category>", "</category>", "<foo>", "</foo>", "{", "}", '"type"', '"content"', ":"])


@settings(max_examples=400, deadline=None)
@given(st.lists(st.one_of(_tags, st.text(max_size=20)), max_size=12).map("".join))
def test_junk_never_crashes(raw):
    try:
        a = parse_action(raw)
    except ActionError as e:
        assert e.reason
    else:
        assert a.type in ("sql", "clarify", "feedback", "classify") and a.content.strip()


@settings(max_examples=200, deadline=None)
@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                    lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=5), c, max_size=3),
                    max_leaves=10))
def test_json_junk_never_crashes(obj):
    try:
        parse_action(json.dumps(obj))
    except ActionError:
        pass


def _outcome(raw: str):
    try:
        return parse_action(raw)
    except ActionError as e:
        return ("error", e.reason)


PLAIN_SQL_CASES = [
    "<sql>SELECT 1</sql>", "<sql></sql>", "<sql>   </sql>", "<sql> SELECT name FROM singer ; </sql>",
    "<sql>```sql\nSELECT 1\n```</sql>", "<sql>``````</sql>", "<sql>```</sql>", "<sql>SELECT '</sql>'</sql>",
    "<sql>SELECT a FROM t WHERE b < 3</sql>", "<sql>SELECT 1</sql></sql>", "<sql><sql>SELECT 1</sql>",
    "<sql>SELECT 'x > y'</sql>", "<sql>SELECT '\u00e9\U0001F600'</sql>", "<sql>\n\tSELECT 1\n</sql>",
    "<sql>SELECT 1 -- done</sql>", "<sql>{\"type\": \"sql\"}</sql>", "<sql>\ufeffSELECT 1</sql>",
]


@pytest.mark.parametrize("raw", PLAIN_SQL_CASES)
def test_plain_sql_fast_path_reads_what_the_general_path_reads(raw):
    """A leading space sends the same action through the general path (which strips it): same action or
    the same refusal, for the fast path's boundary cases (empty body, fences, tags and ``<`` in the body)."""
    assert _outcome(raw) == _outcome(" " + raw)


@settings(max_examples=300, deadline=None, derandomize=True)
@given(st.text(alphabet=st.sampled_from(list("<>/sqlSQL `{}'\"\n xyz;-")), max_size=30))
def test_plain_sql_fast_path_matches_on_generated_bodies(body):
    raw = f"<sql>{body}</sql>"
    assert _outcome(raw) == _outcome(" " + raw)


def test_plain_sql_fast_path_on_spider_like_sql():
    got = parse_action("<sql>SELECT count(*) FROM singer WHERE age  >  20</sql>")
    assert got == Action("sql", "SELECT count(*) FROM singer WHERE age  >  20")
    with pytest.raises(ActionError, match="empty <sql> action"):
        parse_action("<sql> </sql>")


def test_unclosed_action_tag_names_the_action_left_open_at_the_end():
    from textsql_clarify.envs.actions import unclosed_action_tag

    assert unclosed_action_tag("Sure: <SQL>SELECT 1") == "sql"
    assert unclosed_action_tag("<think><clarify>x</clarify></think><feedback>No owner") == "feedback"
    assert unclosed_action_tag("<sql>SELECT 1</sql>") is None           # parses
    assert unclosed_action_tag("<sql>a<clarify>b") is None              # nested: refused before the end
    assert unclosed_action_tag("</sql><sql>a") is None                  # unmatched closing tag first
    assert unclosed_action_tag('{"type": "sql"') is None                # JSON has no tags
    assert unclosed_action_tag("<think><sql>a") == "sql"                # an unclosed think block is kept


@pytest.mark.parametrize("body", ["\u200b\u200b", "\u2060", "\u00ad", " \u200c ", "?", "\u200b?", "...", "\u00a0"])
@pytest.mark.parametrize("spelling", ["tag", "json"])
def test_a_body_without_a_letter_or_digit_is_an_empty_action(body, spelling):
    """Zero-width characters or punctuation alone say nothing: refused as empty, in either spelling."""
    raw = f"<clarify>{body}</clarify>" if spelling == "tag" else json.dumps({"type": "clarify", "content": body})
    with pytest.raises(ActionError, match=r"empty .*clarify.* action \(no letter or digit\)"):
        parse_action(raw)


def test_a_one_letter_or_non_latin_body_is_still_an_action():
    assert parse_action("<clarify>\u200bwhich year?</clarify>") == Action("clarify", "\u200bwhich year?")
    assert parse_action("<clarify>哪一年？</clarify>").content == "哪一年？"
    assert parse_action("<sql>SELECT 1</sql>").content == "SELECT 1"


def test_a_zero_width_clarification_earns_no_decision_credit():
    """Through the env, on an ambiguous embedded sample: the format penalty, not the decision's credit for
    asking (a real one-word question there earns decision 1.0)."""
    import gymnasium as gym

    import textsql_clarify

    env = gym.make(textsql_clarify.ENV_ID, reward_preset="shaped_decision")
    k = next(i for i, s in enumerate(env.unwrapped.samples) if s.group == "ambiguous")
    env.reset(options={"index": k})
    _o, r, _t, _tr, info = env.step(json.dumps({"type": "clarify", "content": "\u200b\u2060"}))
    assert info["reward_components"]["format"] == -1.0 and "decision" not in info["reward_components"]
    env.reset(options={"index": k})
    _o, r2, _t, _tr, info2 = env.step("<clarify>Which?</clarify>")
    assert info2["reward_components"]["decision"] == 1.0 and r2 > r
    env.close()
