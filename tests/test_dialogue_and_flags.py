"""The Sample fields ``dialogue``, ``flags`` and an unknown (``None``) subcategory, consumed by the
env (history, messages, category context, classification), the simulated users, the trajectory and the
metrics (``unknown`` row, Cls undefined, ``indistinguishable`` samples left out unless asked, flag counts).

Fixture: ``tests/fixtures/dialogue_flags/followups.jsonl``, five samples on the embedded university
database (gold rows checked below against the database itself)."""
from __future__ import annotations

import dataclasses
import json
import sqlite3
import warnings
from pathlib import Path

import pytest
from gymnasium.utils.env_checker import check_env

from conftest import MeanIs
from textsql_clarify.baselines.agents import NoClarifyAgent, OracleAgent
from textsql_clarify.rollout.evaluation import evaluate, run_episode
from textsql_clarify.cli import main as cli_main
from textsql_clarify.datasets import embedded_db_path
from textsql_clarify.envs import render
from textsql_clarify.envs.env import TextSQLClarifyEnv
from textsql_clarify.rewards.metrics import MetricsError, aggregate, trajectory_metrics
from textsql_clarify.rewards.report import render_table
from textsql_clarify.samples import DIFFICULTIES, load_jsonl
from textsql_clarify.simulators.base import SQL_ONLY_TURN, UserRequest, dialogue_said, said_before
from textsql_clarify.simulators.grounding import LexicalGrounder
from textsql_clarify.simulators.prompts import answer_task, label_task
from textsql_clarify.simulators.rule_based import RuleBasedUser
from textsql_clarify.simulators.transformers_user import TransformersUserSimulator
from textsql_clarify.trajectory import Trajectory

FIXTURE = Path(__file__).parent / "fixtures" / "dialogue_flags" / "followups.jsonl"
PHYS = ("SELECT p.first_name, p.last_name FROM professors p JOIN departments d ON p.dept_id = d.dept_id "
        "WHERE d.name = 'Physics'")
CS = ("SELECT p.first_name, p.last_name, p.salary FROM professors p JOIN departments d ON p.dept_id = d.dept_id "
      "WHERE d.name = 'Computer Science'")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TEXTSQL_CLARIFY_CACHE", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def samples():
    return load_jsonl(FIXTURE)


@pytest.fixture(scope="module")
def by_id(samples):
    return {s.id: s for s in samples}


def _rows(sql: str) -> list[tuple]:
    con = sqlite3.connect(Path(embedded_db_path()).resolve().as_uri() + "?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def test_fixture_golds_on_the_embedded_database(by_id):
    assert Path(by_id["dlg-ans"].db_path).resolve() == Path(embedded_db_path()).resolve()
    assert _rows(by_id["dlg-ans"].gold_sql) == [("Sergio", "Valentini")]
    amb = by_id["dlg-amb"]
    assert _rows(amb.gold_sql) == [("Roberto", "Moro", 107000), ("Anna", "Sala", 75000)]
    assert _rows(amb.interpretations[0].gold_sql) == [("Roberto", "Moro", 107000)]   # distinguishable
    ind = by_id["amb-indist"]
    assert _rows(ind.gold_sql) == _rows(ind.interpretations[0].gold_sql) == [("Moro", "Roberto")]
    assert ind.flags == ("indistinguishable",)
    assert by_id["dlg-merge"].subcategory is None and by_id["unans-unknown"].subcategory is None


# ------------------------------------------------------------------------------------ dialogue as history

def test_three_turn_dialogue_renders_messages_in_order(by_id):
    env = TextSQLClarifyEnv(samples=[by_id["dlg-ans"]])
    obs, info = env.reset(options={"sample_id": "dlg-ans"})
    msgs = info["messages"]
    assert msgs[0]["role"] == "system" and "Database schema:" in msgs[0]["content"]
    assert msgs[1:] == [
        {"role": "assistant", "content": "Hello! What would you like to know about the university?"},
        {"role": "user", "content": "Which professors work in the Physics department?"},
        {"role": "assistant", "content": f"<sql>{PHYS}</sql>"},
        {"role": "user", "content": "Which of them was hired first?"},
    ]
    assert obs["history"] == (
        "assistant: Hello! What would you like to know about the university?\n"
        "user: Which professors work in the Physics department?\n"
        f"assistant: <sql>{PHYS}</sql>\n"
        "user: Which of them was hired first?")
    assert obs["question"] == "Which of them was hired first?"
    assert env.observation_space.contains(obs)


def test_system_turn_with_text_and_sql_renders_text_then_sql(by_id):
    env = TextSQLClarifyEnv(samples=[by_id["dlg-amb"]])
    _obs, info = env.reset()
    assert [(m["role"], m["content"]) for m in info["messages"][1:]] == [
        ("user", "Show the first name, last name and salary of the professors in Computer Science."),
        ("assistant", f"Here are the three Computer Science professors.\n<sql>{CS}</sql>"),
        ("user", "Which of them are senior?"),
    ]


def test_same_role_turns_are_joined_so_roles_alternate(by_id):
    s = by_id["dlg-merge"]
    assert render.initial_history(s) == [
        ("user", "List the departments and their buildings."),
        ("assistant", "<sql>SELECT name, building FROM departments</sql>\n\nAnything else?"),
        ("user", "Yes, about the Physics department.\n\nWho are its best-paid professors?"),
    ]
    _obs, info = TextSQLClarifyEnv(samples=[s]).reset()
    roles = [m["role"] for m in info["messages"]]
    assert roles == ["system", "user", "assistant", "user"]


def test_history_keeps_the_dialogue_through_a_clarification(by_id):
    env = TextSQLClarifyEnv(samples=[by_id["dlg-amb"]])
    env.reset()
    obs, _r, term, _tr, info = env.step("<clarify>Do you mean professors hired before some year?</clarify>")
    assert not term
    assert obs["history"].startswith("user: Show the first name, last name and salary of the professors")
    assert [m["role"] for m in info["messages"]] == ["system", "user", "assistant", "user", "assistant", "user"]
    assert info["messages"][-2]["content"] == "<clarify>Do you mean professors hired before some year?</clarify>"
    assert info["messages"][-1]["content"] == "By senior I mean the professors hired before 2015."


def test_check_env_passes_with_dialogue_samples(samples):
    env = TextSQLClarifyEnv(samples=samples)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    assert [str(w.message) for w in caught] == []


def test_simulated_users_see_the_dialogue(by_id):
    s = by_id["dlg-ans"]
    assert dialogue_said(s) == (("system", "Hello! What would you like to know about the university?"),
                                ("user", "Which professors work in the Physics department?"),
                                ("system", SQL_ONLY_TURN))
    assert said_before(s) == ("Hello! What would you like to know about the university?\n"
                              "Which professors work in the Physics department?")
    env = TextSQLClarifyEnv(samples=[s])
    env.reset()
    req = env.begin_step("<clarify>Do you mean the earliest hire date?</clarify>")
    assert isinstance(req, UserRequest) and req.sample.dialogue == s.dialogue
    assert req.history[0] == ("assistant", "Hello! What would you like to know about the university?")
    assert req.history[-1] == ("user", "Which of them was hired first?")
    env.cancel_clarification()


def test_rule_user_answers_oracle_clarification_on_a_follow_up(by_id):
    s = by_id["dlg-amb"]
    env = TextSQLClarifyEnv(samples=[s])
    traj = run_episode(env, OracleAgent(), sample_id=s.id, seed=0)
    clar = traj.clarifications
    assert len(clar) == 1
    assert clar[0].content == "Before I write the query, can you confirm: By senior I mean the professors hired before 2015?"
    assert clar[0].user_reply["label"] == "relevant"
    assert clar[0].user_reply["text"] == "By senior I mean the professors hired before 2015."
    assert traj.scores["ex"] == 1.0


def test_rule_user_counts_earlier_turns_as_context(by_id):
    """Names the earlier turns used (first name, last name, salary) are no identifier probe; without the
    dialogue the same clarification names three schema names the user never said and is refused."""
    s = by_id["dlg-amb"]
    env = TextSQLClarifyEnv(samples=[s])
    env.reset()
    ids = env._schema_ids
    clar = "Should I keep the first name, last name and salary as before, and what counts as senior?"
    user = RuleBasedUser()
    with_d = user.respond([UserRequest(sample=s, clarification=clar, schema_identifiers=ids)])[0]
    without = user.respond([UserRequest(sample=dataclasses.replace(s, dialogue=()), clarification=clar,
                                        schema_identifiers=ids)])[0]
    assert (with_d.label, with_d.text) == ("relevant", "By senior I mean the professors hired before 2015.")
    assert (without.label, without.meta["reason"]) == ("irrelevant", "identifier_probe")


class _RecordingModel:
    """A plain-prompt backend that records its prompts: votes ``relevant``, replies with the fact."""

    chat = False
    name = "recorder"

    def __init__(self):
        self.prompts: list[str] = []

    def render_chat(self, messages, add_generation_prompt):  # pragma: no cover - plain model
        raise AssertionError("plain backend")

    def score(self, prompts, options, *, shared_prefix=""):
        self.prompts += prompts
        return [[0.0 if o.strip() in ("relevant", "A") else -1.0 for o in options] for _ in prompts]

    def generate(self, prompts, max_new_tokens, stop="\n", *, shared_prefix="", do_sample=False, temperature=1.0,
                 top_p=1.0, seed=None):
        self.prompts += prompts
        return [p.rsplit("Fact: ", 1)[1].split("\n", 1)[0] for p in prompts]


def test_transformers_user_prompts_hold_the_conversation(by_id):
    s = by_id["dlg-amb"]
    env = TextSQLClarifyEnv(samples=[s])
    env.reset()
    req = env.begin_step("<clarify>Do you mean professors hired before some year?</clarify>")
    env.cancel_clarification()
    model = _RecordingModel()
    reply = TransformersUserSimulator([model], grounding=LexicalGrounder()).respond([req])[0]
    assert reply.label == "relevant" and reply.text == "By senior I mean the professors hired before 2015."
    conv = ("Conversation so far: user: Show the first name, last name and salary of the professors in "
            "Computer Science. / system: Here are the three Computer Science professors.\n"
            "Question: Which of them are senior?")
    label_prompts = [p for p in model.prompts if p.endswith("Label:")]
    answer_prompts = [p for p in model.prompts if p.endswith("Reply:")]
    assert label_prompts and answer_prompts
    assert conv in label_prompts[0] and conv in answer_prompts[0]
    assert CS not in label_prompts[0].split("Conversation so far:", 1)[1]   # the system's SQL is not shown
    # this episode's history starts at the question: the earlier turns are not repeated as "Earlier"
    assert "Earlier: user: Which of them are senior?" in label_prompts[0]


def test_prompts_without_dialogue_are_unchanged():
    t = label_task(question="Q?", clarification="C?", knowledge="K.")
    assert t.query == "Question: Q?\nUnclear point: K.\nClarification: C?"
    a = answer_task(label="relevant", question="Q?", clarification="C?", fact="F.")
    assert a.query == "Question: Q?\nClarification: C?\nFact: F."


# ------------------------------------------------------------------------------------ unknown subcategory

@pytest.mark.parametrize("mode", ["ground_truth", "predicted", "taxonomy_only", "taxonomy_free"])
def test_unknown_subcategory_in_every_category_mode(by_id, mode):
    samples = [by_id["dlg-merge"], by_id["unans-unknown"]]
    env = TextSQLClarifyEnv(samples=samples, category_mode=mode)
    agent = OracleAgent()
    for s in samples:
        obs, _info = env.reset(options={"sample_id": s.id})
        if mode == "ground_truth":
            assert obs["context"].startswith(f"Question category: {s.group} (the subcategory is not known).")
        traj = run_episode(env, agent, sample_id=s.id, seed=0)
        if mode == "predicted":
            assert traj.predicted_category == s.group
            assert traj.turns[0].reward_components == {"classification": None}
        if s.group == "ambiguous":
            assert traj.scores["ex"] == 1.0 and traj.clarifications[0].user_reply["label"] == "relevant"
        else:
            assert traj.scores["fb"] == 1.0
    assert render.context_text("ground_truth", by_id["dlg-merge"]) == (
        "Question category: ambiguous (the subcategory is not known). "
        "The question can be read in more than one way: ask a clarification first.")


def test_classification_phase_with_unknown_subcategory(by_id):
    s = by_id["dlg-merge"]
    env = TextSQLClarifyEnv(samples=[s, by_id["dlg-amb"]], classification_phase=True)
    env.reset(options={"sample_id": s.id})
    _obs, _r, _t, _tr, info = env.step("<category>lexical_vagueness</category>")
    assert info["reward_components"]["classification"] is None          # undefined, not 0
    env.reset(options={"sample_id": "dlg-amb"})
    _obs, _r, _t, _tr, info = env.step("<category>lexical_vagueness</category>")
    assert info["reward_components"]["classification"] == 1.0
    trajs, m = evaluate([s, by_id["unans-unknown"], by_id["dlg-amb"]], OracleAgent(), progress=False,
                        classification_phase=True)
    cls = [trajectory_metrics(t)["Cls"] for t in trajs]
    rec = [trajectory_metrics(t)["Rec"] for t in trajs]
    assert cls == [None, None, 1.0] and rec == [1.0, 1.0, 1.0]
    assert m["overall"]["Cls"] == MeanIs(1.0, 1) and m["overall"]["Rec"] == MeanIs(1.0, 3)
    assert m["by_subcategory"]["unknown"]["metrics"]["Cls"] == MeanIs(None, 0)
    assert m["by_subcategory"]["unknown"]["metrics"]["Rec"] == MeanIs(1.0, 2)


def test_rule_user_unknown_subcategory_uses_generic_cues(by_id):
    s = by_id["dlg-merge"]
    env = TextSQLClarifyEnv(samples=[s])
    env.reset()
    ids = env._schema_ids
    user = RuleBasedUser()

    def label(clar, sample=s):
        return user.respond([UserRequest(sample=sample, clarification=clar, schema_identifiers=ids)])[0]

    meaning = label("What do you mean by best-paid?")
    assert (meaning.label, meaning.text) == ("relevant", "By best-paid I mean the two professors with the highest salary.")
    # the scope cue belongs to the scope subcategory only: with no subcategory it does not fire
    scoped = dataclasses.replace(s, subcategory="scope")
    clar = "Each one separately, or together?"
    assert label(clar, scoped).meta["reason"] == "scope"
    assert label(clar).label == "irrelevant"


# ------------------------------------------------------------------------------------ metrics and flags

def test_trajectory_carries_flags_and_round_trips(by_id):
    env = TextSQLClarifyEnv(samples=[by_id["amb-indist"]])
    traj = run_episode(env, NoClarifyAgent(), sample_id="amb-indist", seed=0)
    assert traj.flags == ["indistinguishable"] and traj.subcategory == "lexical_vagueness"
    back = Trajectory.from_dict(json.loads(json.dumps(traj.to_dict())))
    assert back.flags == ["indistinguishable"]
    old = traj.to_dict()
    del old["flags"]                       # a trajectories.jsonl line written before flags existed
    assert Trajectory.from_dict(old).flags == []


def test_indistinguishable_left_out_by_default_and_included_when_asked(samples, tmp_path):
    trajs, m = evaluate(samples, NoClarifyAgent(), progress=False, out_dir=tmp_path / "run")
    assert m["excluded_indistinguishable"] == 1 and m["include_indistinguishable"] is False
    assert m["flagged"]["indistinguishable"] == 1 and sum(m["flagged"].values()) == 1
    assert m["n_trajectories"] == 4
    # the never-asking agent misses both distinguishable ambiguous samples ...
    assert m["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(0.0, 2)
    assert m["overall"]["EX"] == MeanIs(1 / 3, 3)
    assert m["overall"]["AR"] == MeanIs(0.0, 4)
    assert m["by_subcategory"]["lexical_vagueness"]["n_trajectories"] == 1
    # ... and scores the indistinguishable one, where its reading returns the gold's rows
    ind = next(t for t in trajs if t.sample_id == "amb-indist")
    assert ind.scores["ex"] == 1.0
    on_disk = json.loads((tmp_path / "run" / "metrics.json").read_text(encoding="utf-8"))
    assert on_disk["excluded_indistinguishable"] == 1 and on_disk["flagged"]["indistinguishable"] == 1

    _t, inc = evaluate(samples, NoClarifyAgent(), progress=False, include_indistinguishable=True)
    assert inc["excluded_indistinguishable"] == 0 and inc["include_indistinguishable"] is True
    assert inc["flagged"]["indistinguishable"] == 1 and inc["n_trajectories"] == 5
    assert inc["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(1 / 3, 3)
    assert inc["by_subcategory"]["lexical_vagueness"]["n_trajectories"] == 2
    table = render_table(m)
    assert "1 indistinguishable left out" in table and "flagged samples (load-time validation): indistinguishable=1" in table


def test_oracle_beats_no_clarify_on_distinguishable_ambiguous(samples):
    _t, oracle = evaluate(samples, OracleAgent(), progress=False)
    _t, never = evaluate(samples, NoClarifyAgent(), progress=False)
    assert oracle["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(1.0, 2)
    assert never["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(0.0, 2)
    assert oracle["overall"]["FB"] == MeanIs(1.0, 1)


def test_by_subcategory_unknown_row_last_and_bird_difficulties(samples):
    _t, m = evaluate(samples, OracleAgent(), progress=False, include_indistinguishable=True)
    subs = list(m["by_subcategory"])
    assert subs == ["answerable_without_evidence", "lexical_vagueness", "unknown"]
    assert m["by_subcategory"]["unknown"]["n_trajectories"] == 2
    assert m["by_subcategory"]["unknown"]["metrics"]["EX"] == MeanIs(1.0, 1)
    assert m["by_subcategory"]["unknown"]["metrics"]["FB"] == MeanIs(1.0, 1)
    assert list(m["by_difficulty"]) == ["simple", "moderate", "challenging", "unknown"]
    assert [k for k in DIFFICULTIES if k in m["by_difficulty"]] == list(m["by_difficulty"])
    assert "unknown" in render_table(m).split("subcategory", 1)[1]


def test_unknown_row_is_last_even_after_keys_outside_the_taxonomy():
    base = dict(db_id="d", group="ambiguous", gold_status="ok", scores={"ex": 1.0})
    ts = [Trajectory(sample_id="a", subcategory=None, **base),
          Trajectory(sample_id="b", subcategory="scope", **base)]
    assert list(aggregate(ts)["by_subcategory"]) == ["scope", "unknown"]


def test_metrics_validation_of_none_subcategory_and_flags():
    ok = Trajectory(sample_id="u", db_id="d", group="unanswerable", subcategory=None, gold_status="none")
    assert aggregate([ok])["by_subcategory"]["unknown"]["n_trajectories"] == 1
    bad = Trajectory(sample_id="a", db_id="d", group="answerable", subcategory=None)
    with pytest.raises(MetricsError, match="subcategory.*only for an ambiguous or unanswerable"):
        aggregate([bad])
    flagged = Trajectory(sample_id="f", db_id="d", group="answerable", subcategory="answerable_without_evidence",
                         flags=["no_such_flag"])
    with pytest.raises(MetricsError, match=r"flags\[0\]"):
        aggregate([flagged])


def test_cli_eval_include_indistinguishable(tmp_path, capsys):
    out = tmp_path / "run"
    assert cli_main(["eval", "--dataset", str(FIXTURE), "--agent", "no-clarify", "--out", str(out),
                     "--no-progress", "--json"]) == 0
    default = json.loads(capsys.readouterr().out)
    assert default["excluded_indistinguishable"] == 1
    assert default["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(0.0, 2)
    assert cli_main(["eval", "--dataset", str(FIXTURE), "--agent", "no-clarify", "--out", str(out),
                     "--no-progress", "--json", "--include-indistinguishable"]) == 0
    inc = json.loads(capsys.readouterr().out)
    assert inc["excluded_indistinguishable"] == 0
    assert inc["by_group"]["ambiguous"]["metrics"]["EX"] == MeanIs(1 / 3, 3)


# -- record checks: a capitalised difficulty, a dialogue turn without text ----------------------
TURN_FIELDS = Path(__file__).parent / "fixtures" / "dialogue_flags" / "turn_fields.jsonl"


def test_system_turn_without_text_is_refused_with_file_line_and_field_and_difficulty_ignores_case(tmp_path):
    from textsql_clarify.errors import DatasetError

    with pytest.raises(DatasetError) as ei:
        load_jsonl(TURN_FIELDS)
    # line 1 ("Moderate") raises nothing; line 2's system turn has sql but no "text" key
    assert [(p.file, p.line, p.field) for p in ei.value.problems] == [(str(TURN_FIELDS), 2, "dialogue[1].text")]
    assert "is required" in ei.value.problems[0].message
    assert f"{TURN_FIELDS}:2: field 'dialogue[1].text'" in str(ei.value)
    first = tmp_path / "first.jsonl"
    rec = json.loads(TURN_FIELDS.read_text(encoding="utf-8").splitlines()[0])
    rec["db_path"] = str(embedded_db_path())
    first.write_text(json.dumps(rec) + "\n", encoding="utf-8")
    (s,) = load_jsonl(first)
    assert s.difficulty == "moderate" and [t.text for t in s.dialogue] == [
        "Which professors work in the Physics department?", ""]
