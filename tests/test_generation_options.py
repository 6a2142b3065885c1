"""``generate --option key=value`` is checked before the run: unknown names, values that do not
parse or are out of range stop it with a clear error (exit 2 in the CLI); valid options pass through unchanged."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from textsql_clarify.generation.base import OptionError, OptionSpec, check_options
from textsql_clarify.generation.drift import DEFAULT_PER_ANCHOR, DEFAULT_PROJECTION_FILL, DEFAULT_TRIES
from textsql_clarify.generation.pipeline import generate
from textsql_clarify.generation.recipes import MODEL_FREE, make_recipes, recipe_names
from textsql_clarify.generation.anchors import load_anchors

DOCS = Path(__file__).resolve().parents[1] / "docs" / "generation.md"


@pytest.fixture(scope="module")
def every_recipe():
    return make_recipes(",".join(recipe_names()))


@pytest.fixture(scope="module")
def model_free():
    return make_recipes(",".join(MODEL_FREE))


def test_unknown_name_lists_what_the_selected_recipes_accept(model_free):
    with pytest.raises(OptionError) as e:
        check_options(model_free, {"max_trys": "3"})
    msg = str(e.value)
    assert "max_trys" in msg and "drift, missing_schema, lexical_overlap" in msg
    accepted = msg.split("they accept: ")[1].split(" (")[0].split(", ")
    assert accepted == ["drift_per_anchor", "drift_per_subtype", "drift_projection_fill", "drift_tries", "max_tries"]
    # an abiss option is unknown to the model-free recipes
    with pytest.raises(OptionError, match="per_anchor"):
        check_options(model_free, {"per_anchor": "2"})


def test_bad_int_and_out_of_range_name_option_value_and_expectation(model_free, every_recipe):
    with pytest.raises(OptionError, match=re.escape("option max_tries='abc' (recipe missing_schema): "
                                                    "expected an integer >= 1")):
        check_options(model_free, {"max_tries": "abc"})
    with pytest.raises(OptionError, match=re.escape("option max_tries='0' (recipe missing_schema): expected an "
                                                    "integer >= 1")):
        check_options(model_free, {"max_tries": "0"})
    with pytest.raises(OptionError, match=re.escape("option drift_tries='0'")):
        check_options(model_free, {"drift_tries": "0"})
    assert check_options(model_free, {"drift_per_anchor": "0"}) == {"drift_per_anchor": "0"}
    with pytest.raises(OptionError, match="drift_per_subtype='value=x'.*integer or 'value=N"):
        check_options(model_free, {"drift_per_subtype": "value=x"})
    with pytest.raises(OptionError, match="unknown drift subtype"):
        check_options(model_free, {"drift_per_subtype": "colour=1"})
    # max_new_tokens: abiss needs >= 16, tide and premise >= 1; each recipe that declares it checks it
    assert check_options(make_recipes("tide_chain"), {"max_new_tokens": "10"}) == {"max_new_tokens": "10"}
    with pytest.raises(OptionError, match=re.escape("option max_new_tokens='10' (recipe abiss): expected an "
                                                    "integer >= 16")):
        check_options(every_recipe, {"max_new_tokens": "10"})


def test_bad_choice_and_bad_list_item(every_recipe):
    with pytest.raises(OptionError, match=re.escape("tide_drift_source='llm' (recipe tide_drift): expected one of "
                                                    "rules, model")):
        check_options(every_recipe, {"tide_drift_source": "llm"})
    with pytest.raises(OptionError, match=re.escape("schema_scope='anchor,all' (recipe abiss): expected one of "
                                                    "anchor, all")):
        check_options(every_recipe, {"schema_scope": "anchor,all"})
    with pytest.raises(OptionError, match=r"styles='formal,loud'.*unknown \['loud'\]"):
        check_options(every_recipe, {"styles": "formal,loud"})
    with pytest.raises(OptionError, match="'E9.9' is not a rewriting premise flaw"):
        check_options(every_recipe, {"premise_flaws": "E2.1,E9.9"})


def test_valid_options_pass_through_as_text(every_recipe):
    given = {"max_tries": "5", "drift_per_subtype": "value=1,constraint=2", "per_anchor": "4", "styles": "formal",
             "schema_scope": "all", "tide_drift_source": "model", "premise_flaws": "E2.1,beyond_sql",
             "premise_per_anchor": "1", "max_new_tokens": "64", "tide_min_commitments": "3", "subcategories": ""}
    assert check_options(every_recipe, given) == given
    assert check_options(every_recipe, None) == {}


def test_declared_defaults_are_the_recipes_own(every_recipe):
    by = {r.name: r.options for r in every_recipe}
    assert by["drift"]["drift_tries"].default == str(DEFAULT_TRIES) == "24"
    assert by["drift"]["drift_per_anchor"].default == str(DEFAULT_PER_ANCHOR) == "3"
    assert by["drift"]["drift_projection_fill"].default == str(DEFAULT_PROJECTION_FILL) == "2"
    ms, lo = make_recipes("missing_schema,lexical_overlap")
    assert by["missing_schema"]["max_tries"].default == str(ms.max_tries) == "3"
    assert by["lexical_overlap"]["max_tries"].default == str(lo.max_tries) == "3"
    assert [by[n]["max_new_tokens"].default for n in ("abiss", "tide_chain", "premise")] == ["256", "320", "200"]


def test_docs_list_every_declared_option(every_recipe):
    text = DOCS.read_text()
    lines = {m.group(1): m.group(0) for m in re.finditer(r"`(\w+)`: `\w+` \((?:[^\n]|\n  |\n(?!\n|- ))*", text)}
    for r in every_recipe:
        assert r.name in lines, r.name
        assert re.findall(r"`(\w+)`\s+\(", lines[r.name]) == list(r.options), r.name


def test_spec_parse_kinds():
    assert OptionSpec("float", "0.5", "a share", minimum=0).parse("0.25") == 0.25
    with pytest.raises(ValueError, match="expected a number >= 0"):
        OptionSpec("float", "0.5", "a share", minimum=0).parse("nan")
    assert OptionSpec("list", "all", "x", choices=("a", "b")).parse(" a , b ") == ["a", "b"]


def test_generate_checks_before_any_unit(tmp_path):
    anchors = load_anchors("embedded", limit=2)
    with pytest.raises(OptionError, match="max_tries='abc'"):
        generate(anchors, ["missing_schema"], tmp_path / "out", progress=False, options={"max_tries": "abc"})
    assert not (tmp_path / "out").exists()


def test_cli_exit_2_with_the_message_and_no_traceback(tmp_path, capsys):
    from textsql_clarify.cli import main

    out = tmp_path / "out"
    for opt, want in (("max_tries=abc", "error: option max_tries='abc' (recipe missing_schema): expected an "
                                        "integer >= 1"),
                      ("max_trys=3", "error: unknown option(s) max_trys for recipe(s) drift, missing_schema, "
                                     "lexical_overlap; they accept: ")):
        assert main(["generate", "--anchors", "embedded", "--out", str(out), "--no-progress", "--option", opt]) == 2
        err = capsys.readouterr().err
        assert err.startswith(want) and "Traceback" not in err, err
    assert not out.exists()
    with pytest.raises(SystemExit):  # the --option help says where the options are listed
        main(["generate", "--help"])
    assert "docs/generation.md" in " ".join(capsys.readouterr().out.split()).split("--option KEY=VALUE")[-1]
