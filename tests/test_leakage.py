"""Tests for the simulated user's leakage guard (TIDE App. E validator; ABISS §5.2 no-SQL answers)."""
from __future__ import annotations

import gc
import json
import math
import random
import re
import time

import pytest

from textsql_clarify.simulators import leakage
from textsql_clarify.simulators.leakage import (
    identifier_forms, identifier_used, is_full_gold_leak, leakage_reasons,
)
from textsql_clarify.sql.schema import read_schema

IDS = ("singer", "singer_id", "name", "country", "song_name", "age", "StuID", "home_city")


def reasons(reply, question="How old is each singer?", clarification="", ids=IDS, gold=None):
    return leakage_reasons(reply, question=question, clarification=clarification, schema_identifiers=ids,
                           gold_sql=gold)


def test_clean_reply_has_no_reasons():
    assert reasons("Please have them sorted from highest to lowest.") == []
    assert reasons("Recent means offered in 2023 or later.") == []


@pytest.mark.parametrize("reply", [
    "Just run SELECT name FROM singer, thanks",
    "use count(*) for that",
    "join concert c on c.id = s.id",
    "where age >= 20 please",
    "sort with ORDER BY age DESC",
    "T1.singer_id = T2.singer_id",
    "DELETE FROM singer",
])
def test_sql_patterns_are_caught(reply):
    assert "sql" in reasons(reply, ids=())


def test_statement_found_only_by_sqlglot():
    # no keyword pattern matches DDL; sqlglot parses it as a CREATE statement
    assert reasons("CREATE TABLE x (a INT)", ids=()) == ["sql"]


@pytest.mark.parametrize("reply", [
    "Update my address later",      # sqlglot parses it as UPDATE, but with no SET it is not SQL
    "Delete it",
    "Sorted from highest to lowest by age.",
    "With pleasure, only the first 5 results.",
    "Yes, order them by age, oldest first.",
])
def test_plain_sentences_are_not_sql(reply):
    assert "sql" not in reasons(reply, question="How old is each singer, by age?", ids=())


def test_full_gold_leak_ignores_case_and_whitespace():
    gold = "SELECT name ,  country ,  age FROM singer ORDER BY age DESC"
    reply = "Here: select name, country, age\nfrom singer order by age desc;"
    assert is_full_gold_leak(reply, gold)
    assert reasons(reply, gold=gold, ids=()) == ["sql", "gold"]
    # a part of the gold is not a full leak
    assert not is_full_gold_leak("order by age desc", gold)
    assert not is_full_gold_leak("anything", None)


def test_unused_identifier_is_reported_in_every_form():
    q = "How old is each singer?"
    assert reasons("The stuid is 3.", question=q) == ["identifier:stuid"]
    assert reasons("The stu id is 3.", question=q) == ["identifier:stuid"]
    assert reasons("The STU_ID is 3.", question=q) == ["identifier:stuid"]
    assert reasons("Their home city matters.", question=q) == ["identifier:home_city"]
    assert reasons("home_city and song name", question=q) == ["identifier:home_city", "identifier:name",
                                                           "identifier:song_name"]


def test_identifier_used_by_question_or_clarification_is_allowed():
    assert reasons("Just the name.", question="What are the names of singers?") == []
    assert reasons("Just the name.", question="How old?") == ["identifier:name"]
    assert reasons("Just the name.", question="How old?", clarification="Do you want the name?") == []
    assert reasons("By home city.", question="Group students by their home cities") == []
    assert reasons("By stu id.", question="List each StuID") == []


def test_whole_words_only_and_case_insensitive():
    assert reasons("The average page count.", question="x") == []        # age inside average / page
    assert reasons("By AGE, please.", question="x") == ["identifier:age"]
    assert reasons("Nationality does not matter.", question="x", ids=("nation",)) == []


def test_one_letter_identifiers_are_skipped_and_bad_types_raise():
    assert reasons("a b c", question="x", ids=("a", "b")) == []
    with pytest.raises(TypeError, match="reply must be a string"):
        leakage_reasons(None, question="q", clarification="c", schema_identifiers=(), gold_sql=None)


def test_identifier_forms_and_use():
    assert identifier_forms("StuID") == {"stuid", "stu_id", "stu id"}
    assert identifier_forms("home_city") == {"home_city", "home city"}
    assert identifier_used("name", "What are the names?")
    assert not identifier_used("surfacearea", "What is the area?")
    assert identifier_used("SurfaceArea", "the 5 largest surface areas")


def test_real_spider_questions_and_gold(spider_root):
    """On all 1,034 Spider dev items: a question never leaks its own words, and every gold is caught."""
    dev = json.loads((spider_root / "dev.json").read_text())
    assert len(dev) == 1034
    missed_sql, self_leaks = [], []
    for d in dev:
        ids = {c for t, cols in read_schema(str(spider_root / "database" / d["db_id"] / f"{d['db_id']}.sqlite")).items()
               for c in [t, *cols]}
        r = leakage_reasons(d["query"], question=d["question"], clarification="", schema_identifiers=ids,
                            gold_sql=d["query"])
        if r[:2] != ["sql", "gold"]:
            missed_sql.append(d["query"])
        own = leakage_reasons(d["question"], question=d["question"], clarification="", schema_identifiers=ids,
                              gold_sql=d["query"])
        if own:
            self_leaks.append((d["question"], own))
    assert missed_sql == []
    assert self_leaks == []


# ----------------------------------------------------------------------------- enumeration probes

from textsql_clarify.simulators.leakage import (  # noqa: E402
    LICENSE_LIMIT, PROBE_LIMIT, gold_exposure, gold_leaks, is_identifier_probe, named_identifiers,
)

# Spider dev, concert_singer: "Show name, country, age for all singers ordered by age ..."
SINGER_Q = "Show name, country, age for all singers ordered by age from the oldest to the youngest."
SINGER_GOLD = "SELECT name ,  country ,  age FROM singer WHERE country = 'France' ORDER BY age DESC"


def test_named_identifiers_counts_names_once_and_skips_what_is_known():
    ids = ("singer", "singer_id", "name", "song_name", "StuID", "stu_id", "age", "is_male")
    # song_name counts once (its "name" is inside it); StuID / stu_id are one name; age is in the question
    assert named_identifiers("the song_name, StuID or stu_id, and the age?", ids, known="How old, by age?") == \
        ["song_name", "stuid"]
    assert named_identifiers("Is it about is_male?", ids) == ["is_male"]
    assert named_identifiers("nothing here", ids) == []


def test_identifier_probe_is_more_than_two_new_names():
    assert (LICENSE_LIMIT, PROBE_LIMIT) == (1, 2)
    ids = IDS + ("song_release_year", "is_male")
    q = "How old is each singer?"
    assert not is_identifier_probe("Do you want the country too?", question=q, schema_identifiers=ids)
    assert not is_identifier_probe("The home_city or the country?", question=q, schema_identifiers=ids)
    assert is_identifier_probe("Which of these: name, country, song_name, is_male?", question=q,
                               schema_identifiers=ids)
    # names the hidden knowledge already holds are not counted
    assert not is_identifier_probe("Which of these: name, country, song_name?", question=q,
                                   hidden_knowledge="I mean the song_name, by country.", schema_identifiers=ids)


def test_a_listing_clarification_licenses_no_name():
    ids = IDS
    one = reasons("I'd like to see the country.", clarification="Should I show the country too?")
    assert one == []                      # one new name: the clarification licenses it
    two = reasons("I'd like to see the country.", clarification="The country or the home_city?")
    assert two == ["identifier:country"]  # two new names: neither is licensed
    many = reasons("I'd like to see the name and country.",
                   clarification="Which of these: " + ", ".join(ids) + "?")
    assert many == ["identifier:country", "identifier:name"]
    # the hidden knowledge licenses its names whatever the clarification lists
    assert leakage_reasons("The country, please.", question="How old is each singer?",
                           clarification="Which of these: " + ", ".join(ids) + "?", schema_identifiers=ids,
                           gold_sql=None, hidden_knowledge="I want the country of each singer.") == []


def test_gold_values_are_guarded_like_names():
    assert gold_exposure(SINGER_GOLD) == (frozenset({"name", "country", "age"}), frozenset({"singer"}),
                                          frozenset({"france"}))
    r = leakage_reasons("Only those from France.", question=SINGER_Q, clarification="Any filter?",
                        schema_identifiers=IDS, gold_sql=SINGER_GOLD)
    assert r == ["value:france"]
    assert leakage_reasons("Only those from France.", question=SINGER_Q, clarification="Only France?",
                           schema_identifiers=IDS, gold_sql=SINGER_GOLD) == []


def test_gold_leaks_measure():
    # the question names name/country/age and the table in words; the value France is new
    assert gold_leaks("Only the singers from France.", question=SINGER_Q, hidden_knowledge="",
                      gold_sql=SINGER_GOLD) == ["value:france"]
    assert gold_leaks("the song name", question="How many songs?", hidden_knowledge="",
                      gold_sql="SELECT song_name FROM singer") == ["column:song_name"]
    # every word of a coordinated phrase counts ("codes and descriptions")
    assert gold_leaks("the template type code and template type description",
                      question="Show all template type codes and descriptions.", hidden_knowledge="",
                      gold_sql="SELECT template_type_code, template_type_description FROM Ref_template_types") == []
    assert gold_leaks("anything", question="q", hidden_knowledge="", gold_sql=None) == []


# ----------------------------------------------------------------------------- linear word split of agent text
def _cpu(fn, arg, repeats: int = 5) -> float:
    """Least thread CPU time of ``fn(arg)`` over ``repeats`` calls, the collector off."""
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


def _ratio(fn, make, n: int) -> float:
    """CPU time on ``make(4 n)`` over that on ``make(n)``: about 4 when linear, 16 when quadratic."""
    return _cpu(fn, make(4 * n)) / max(_cpu(fn, make(n)), 1e-6)


def test_capital_run_split_is_linear_and_unchanged():
    ratio = _ratio(leakage._split_words, lambda n: "A" * n, 2_000)  # 15.8 before (43 ms -> 679 ms)
    assert ratio < 8, f"4x the input took {ratio:.1f}x the CPU time"
    assert leakage._split_words("HTMLParser") == ["html", "parser"]
    assert leakage._split_words("StuID") == ["stu", "id"]
    assert leakage._split_words("ABCdEFg_hIJk") == ["ab", "cd", "e", "fg", "h", "i", "jk"]
    # the former two-regex split, derandomized: same words on 2,000 random identifiers
    rng = random.Random(12)

    def former(s: str) -> list[str]:
        s = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", s)
        s = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1 \2", s)
        return [w for w in re.split(r"[^0-9A-Za-z]+", s.lower()) if w]

    for _ in range(2_000):
        s = "".join(rng.choice("AaBb1_ Z") for _ in range(rng.randint(0, 14)))
        assert leakage._split_words(s) == former(s), s


def test_clarification_of_capitals_is_checked_fast():
    """A clarification is agent text: the identifier checks split it into words (``named_identifiers``)."""
    fresh = iter(range(10**6))  # a new text each call: the word split is cached per text

    def named(text: str):
        return leakage.named_identifiers(f"{text} {next(fresh)}", ["stu_id", "HomeCity"])

    ratio = _ratio(named, lambda n: "A" * n, 2_000)
    assert ratio < 8, f"4x the input took {ratio:.1f}x the CPU time"
