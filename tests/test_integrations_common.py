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
