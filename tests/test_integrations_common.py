"""integrations.common.jsonable: one JSON conversion for the OpenEnv and verifiers payloads."""
import json
import math

import numpy as np

from textsql_clarify.integrations.common import jsonable


def test_jsonable_converts_numpy_nonfinite_sets_and_to_dict():
    class Traj:
        def to_dict(self):
            return {"turns": (1, 2)}

    out = jsonable({1: np.float64(0.5), "n": np.int64(3), "bad": math.nan, "s": {"b", "a"}, "t": Traj(),
                    "o": object.__new__(object)})
    assert out["1"] == 0.5 and type(out["1"]) is float and out["n"] == 3 and type(out["n"]) is int
    assert out["bad"] is None and out["s"] == ["a", "b"] and out["t"] == {"turns": [1, 2]}
    assert out["o"].startswith("<object object")
    json.dumps(out, allow_nan=False)  # raises if anything non-JSON survived


def test_add_components_sums_numbers_and_keeps_undefined_as_none():
    from textsql_clarify.integrations.common import add_components

    totals = {}
    add_components(totals, {"ex": None, "format": -1, "drift": True, "components": {"x": 1}})
    add_components(totals, {"ex": 1.0, "format": math.nan, "drift": False, "feedback": None})
    add_components(totals, None)
    assert totals == {"ex": 1.0, "format": -1.0, "drift": 1.0, "feedback": None}
