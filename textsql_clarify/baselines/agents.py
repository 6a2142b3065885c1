"""Baseline agents (``oracle``, ``no-clarify``, ``random``) and :func:`make_agent`, which also builds LLM
agents (``hf:<model>``, ``openai:<base_url>/<model>``) and user classes (``<module>:<Class>``) from a spec.

An agent maps an observation (plus ``info``) to an action string. Privileged agents (the oracle) are
told the sample at the start of each episode through :meth:`Agent.begin_episode`; the rollout runner
only does so for agents whose ``privileged`` attribute is True.
"""
from __future__ import annotations

import random as _random
from typing import Any, Protocol, runtime_checkable

from ..samples import Sample


@runtime_checkable
class Agent(Protocol):
    """An agent: ``begin_episode(sample_or_None)`` then ``act(obs, info) -> str`` each turn."""

    name: str
    privileged: bool

    def begin_episode(self, sample: Sample | None) -> None:  # pragma: no cover - protocol
        ...

    def act(self, observation: dict[str, Any], info: dict[str, Any]) -> str:  # pragma: no cover - protocol
        ...


def _clarification_for(sample: Sample) -> str:
    """A clarification that targets the sample's ambiguity, phrased from its hidden knowledge."""
    hk = sample.hidden_knowledge.strip().rstrip(".")
    return f"Before I write the query, can you confirm: {hk}?"


class _PrivilegedAgent:
    """Shared episode state of the agents that are told the sample (oracle, no-clarify).

    Both answer a drift utterance (TIDE §4.1) with the post-drift gold SQL once their first SQL is sent.
    """

    name = "privileged"
    privileged = True

    def __init__(self) -> None:
        self._sample: Sample | None = None
        self._sql_sent = False

    def begin_episode(self, sample: Sample | None) -> None:
        """Receive the sample.

        Raises:
            ValueError: ``sample`` is None (these agents cannot act without it).
        """
        if sample is None:
            raise ValueError(f"the {self.name} agent needs the sample (privileged access)")
        self._sample = sample
        self._sql_sent = False

    def _sql(self, sql: str) -> str:
        self._sql_sent = True
        return f"<sql>{sql}</sql>"

    def _after_drift(self) -> str | None:
        s = self._sample
        return f"<sql>{s.drift.post_gold_sql}</sql>" if self._sql_sent and s.drift is not None else None


#: the oracle's last action on a withheld-gold sample: an honest statement that it has no query to give.
WITHHELD_FEEDBACK = ("I have the clarification I needed, but I cannot give the query: the source withholds this "
                     "task's gold SQL, so there is no reference answer to submit.")


class OracleAgent(_PrivilegedAgent):
    """Knows the sample: asks the relevant clarification where one is needed, then answers exactly.

    * answerable: submits the gold SQL;
    * ambiguous: asks one clarification built from the hidden knowledge (for a chain sample: the L1
      then the L2 question, TIDE §2.1), then submits the gold SQL;
    * unanswerable: gives the hidden knowledge as feedback;
    * ambiguous with a withheld gold (:attr:`~textsql_clarify.samples.Sample.gold_withheld`, mini-interact): asks
      the same clarification, then ends with a feedback that says it has no query to give (:data:`WITHHELD_FEEDBACK`).
      It cannot write the gold and submits no stand-in SQL; the env scores that feedback ``None`` (undefined), so
      the episode pays nothing and the run measures only its clarification (``docs/datasets.md``, mini-interact);
    * in a classification phase: the sample's subcategory, or its group when the subcategory is unknown;
    * after a drift utterance: submits the post-drift gold SQL (TIDE §4.1).
    """

    name = "oracle"

    def __init__(self) -> None:
        super().__init__()
        self._plan: list[str] = []

    def begin_episode(self, sample: Sample | None) -> None:
        """Receive the sample and plan the clarifications (raises ValueError without a sample)."""
        super().begin_episode(sample)
        self._plan = []
        if sample.group == "ambiguous":
            if sample.chain is not None:
                self._plan = [f"<clarify>{sample.chain.l1.question}</clarify>",
                              f"<clarify>{sample.chain.l2.question}</clarify>"]
            else:
                self._plan = [f"<clarify>{_clarification_for(sample)}</clarify>"]

    def act(self, observation: dict[str, Any], info: dict[str, Any]) -> str:
        """The next action of the plan (see class doc)."""
        s = self._sample
        if observation.get("phase") == 0:  # classification phase
            # an unknown subcategory (None): the group is all the oracle knows (Rec scores it, Cls is undefined)
            return f"<category>{s.subcategory or s.group}</category>"
        post = self._after_drift()
        if post:
            return post
        if s.gold_sql is None and not s.gold_withheld:
            return f"<feedback>{s.hidden_knowledge or 'The database does not hold what this question asks for.'}</feedback>"
        history = observation.get("history", "")
        # skip a chain's L1 question when it is already in the history (p-protocol primes it)
        while self._plan and observation.get("clarifications_left", 0) > 0:
            nxt = self._plan.pop(0)
            if nxt in history:
                continue
            return nxt
        if s.gold_withheld:
            return f"<feedback>{WITHHELD_FEEDBACK}</feedback>"
        return self._sql(s.gold_sql)


class NoClarifyAgent(_PrivilegedAgent):
    """Never asks: submits the first interpretation's SQL (or the gold SQL when there is none).

    For an unanswerable sample, and for an ambiguous one whose gold is withheld (nothing to submit), it gives a
    generic refusal, which names no cause. In a classification
    phase it calls every question answerable. It is the ABISS "answer directly" baseline that the
    oracle must beat on ambiguous samples.
    """

    name = "no-clarify"

    def act(self, observation: dict[str, Any], info: dict[str, Any]) -> str:
        """SQL of the first interpretation, or of the gold; a generic feedback when there is no SQL."""
        s = self._sample
        if observation.get("phase") == 0:
            return "<category>answerable_without_evidence</category>"
        post = self._after_drift()
        if post:
            return post
        sql = s.interpretations[0].gold_sql if s.interpretations else s.gold_sql
        if sql is None:
            return "<feedback>I cannot answer this question.</feedback>"
        return self._sql(sql)


class RandomAgent:
    """Uniformly random action type with simple content; seeded per observation, so runs repeat.

    SQL is ``SELECT * FROM <random table>`` from the tables named in the schema text.
    """

    name = "random"
    privileged = False
    _CLARIFICATIONS = ("Can you clarify what you mean?", "Should the results be sorted?",
                       "How many results do you want?", "Which columns should I show?")

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed
        self._rng = _random.Random(seed)

    def begin_episode(self, sample: Sample | None) -> None:
        """Nothing to prepare (not privileged)."""

    def act(self, observation: dict[str, Any], info: dict[str, Any]) -> str:
        """A random action, drawn from a generator seeded by ``seed`` and the observation (question,
        dialogue so far, turn): the same episode gets the same actions whatever runs before it or
        beside it (``evaluate(num_envs=N)`` gives the same trajectories for every N)."""
        key = f"{self.seed}|{observation.get('question', '')}|{observation.get('history', '')}|{observation.get('turn', 0)}"
        self._rng = _random.Random(key)
        if observation.get("phase") == 0:
            from ..taxonomy import SUBCATEGORIES
            return f"<category>{self._rng.choice(sorted(SUBCATEGORIES))}</category>"
        kinds = ["sql", "feedback"] + (["clarify"] if observation.get("clarifications_left", 0) > 0 else [])
        kind = self._rng.choice(kinds)
        if kind == "clarify":
            return f"<clarify>{self._rng.choice(self._CLARIFICATIONS)}</clarify>"
        if kind == "feedback":
            return "<feedback>The database does not contain the information needed.</feedback>"
        tables = [line.split("(")[0].split()[-1].strip('"`[]') for line in observation.get("schema", "").splitlines()
                  if line.upper().startswith("CREATE")]
        table = self._rng.choice(tables) if tables else "sqlite_master"
        return f"<sql>SELECT * FROM {table}</sql>"


AGENTS = {"oracle": OracleAgent, "no-clarify": NoClarifyAgent, "random": RandomAgent}

#: the agent spec forms :func:`make_agent` reads (for help texts and error messages).
AGENT_SPEC_FORMS = ("oracle", "no-clarify", "random", "hf:<model path or id>", "openai:<base_url>/<model>",
                    "<module>:<Class>", "<path/to/file.py>:<Class>")
#: options that only LLM agents take: option -> (TransformersAgent keyword, OpenAIAgent keyword or None)
_LLM_OPTIONS = {"max_new_tokens": ("max_new_tokens", "max_tokens"), "device": ("device", None),
                "dtype": ("dtype", None), "batch_size": ("batch_size", None)}


def _bad(spec: str, why: str) -> ValueError:
    return ValueError(f"bad agent spec {spec!r}: {why}; valid forms: {', '.join(AGENT_SPEC_FORMS)}")


def _import_failure(e: BaseException) -> str:
    """How an import failed, for an error message (``SystemExit`` says that the module exited)."""
    if isinstance(e, SystemExit):
        return f"it called sys.exit({e.code!r}) on import"
    return f"{type(e).__name__}: {e}"


def _load_class(spec: str, target: str, cls_name: str):
    """The class ``cls_name`` from a module name (``pkg.mod``) or a Python file (``dir/file.py``).

    Raises:
        ValueError: naming ``spec``: no such file or module, or importing it raised anything but
            ``KeyboardInterrupt`` (``SystemExit`` included: a module calling ``sys.exit`` on import), or no
            such callable attribute.
    """
    import importlib
    import importlib.util
    import sys
    from pathlib import Path

    if target.endswith(".py") or "/" in target or "\\" in target:
        path = Path(target).expanduser()
        if not path.is_file():
            raise _bad(spec, f"agent file {str(path)!r} does not exist")
        mod_name = f"_textsql_clarify_agent_{path.stem}_{abs(hash(str(path.resolve())))}"
        module_spec = importlib.util.spec_from_file_location(mod_name, path)
        if module_spec is None or module_spec.loader is None:
            raise _bad(spec, f"cannot import {str(path)!r} as a Python file")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules[mod_name] = module  # dataclasses and pickling look the module up by name
        try:
            module_spec.loader.exec_module(module)
        except KeyboardInterrupt:
            sys.modules.pop(mod_name, None)
            raise
        except BaseException as e:  # SystemExit too: an agent file that exits on import must not end the run
            sys.modules.pop(mod_name, None)
            raise _bad(spec, f"importing {str(path)!r} failed: {_import_failure(e)}") from e
    else:
        try:
            module = importlib.import_module(target)
        except ModuleNotFoundError as e:
            raise _bad(spec, f"no module named {target!r} ({e})") from e
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # SystemExit too (module doc of make_agent)
            raise _bad(spec, f"importing module {target!r} failed: {_import_failure(e)}") from e
    cls = getattr(module, cls_name, None)
    if cls is None:
        raise _bad(spec, f"{target!r} has no attribute {cls_name!r}")
    if not callable(cls):
        raise _bad(spec, f"{target}:{cls_name} is not a class or callable")
    return cls


def make_agent(spec: str, *, seed: int = 0, **options: Any):
    """Build an agent from a spec string.

    Specs:

    * ``oracle`` | ``no-clarify`` | ``random``: the baselines of this module (``random`` takes ``seed``);
    * ``hf:<path or id>``: a :class:`~textsql_clarify.baselines.llm_agents.TransformersAgent` on a local
      model (``hf:smollm2`` is the prepared SmolLM2-135M-Instruct, :func:`textsql_clarify.models.prepare_model`);
    * ``openai:<base_url>/<model>``: an :class:`~textsql_clarify.baselines.openai_agent.OpenAIAgent` on an
      OpenAI-compatible server; the base URL is everything up to the last ``/``, the model name the rest
      (``openai:http://127.0.0.1:8000/v1/Qwen2.5-7B-Instruct``), except that a URL with an API version
      segment (``/v1``) ends there, so a served name with a ``/`` stays whole
      (``openai:http://127.0.0.1:8000/v1/Qwen/Qwen2.5-7B-Instruct`` -> model ``Qwen/Qwen2.5-7B-Instruct``);
    * ``<module>:<Class>`` / ``<package.module>:<Class>`` / ``<path/to/file.py>:<Class>``: a user agent
      class, imported and built with no arguments; it needs ``act(obs, info)`` or ``act_batch``.

    Args:
        spec: the agent spec.
        seed: the random agent's seed.
        options: LLM options, passed to ``hf:`` and ``openai:`` agents and refused elsewhere when set
            (``None`` counts as unset): ``max_new_tokens`` (OpenAIAgent's ``max_tokens``), ``device``,
            ``dtype``, ``batch_size`` (``hf:`` only).
    Returns:
        The agent.
    Raises:
        ValueError: a spec of none of these forms, an empty model or class name, an ``openai:`` URL with no
            model name after it, a module or file that does not import (or exits on import), a missing class, a class that fails to build or lacks ``act`` / ``act_batch``,
            or an option the agent does not take (each message names the spec).
        ModelLoadError: an ``hf:`` model cannot be loaded offline.
        ImportError: the optional library of an ``hf:`` (transformers, torch) or ``openai:`` (openai) agent
            is not installed.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise _bad(str(spec), "empty or not a string")
    unknown = sorted(set(options) - set(_LLM_OPTIONS))
    if unknown:
        raise TypeError(f"make_agent got unknown option(s) {unknown}; valid: {sorted(_LLM_OPTIONS)}")
    given = {k: v for k, v in options.items() if v is not None}
    spec = spec.strip()
    kind, _, rest = spec.partition(":")
    if spec in AGENTS or kind not in ("hf", "openai"):
        if given:
            raise _bad(spec, f"option(s) {sorted(given)} apply only to hf: and openai: agents")
    if spec in AGENTS:
        return RandomAgent(seed) if spec == "random" else AGENTS[spec]()
    if kind == "hf":
        if not rest.strip():
            raise _bad(spec, "hf: needs a model path or id, e.g. hf:smollm2")
        from .llm_agents import TransformersAgent

        return TransformersAgent(rest.strip(), **{_LLM_OPTIONS[k][0]: v for k, v in given.items()})
    if kind == "openai":
        from .openai_agent import split_base_url_and_model

        example = "openai:http://127.0.0.1:8000/v1/Qwen2.5-7B-Instruct"
        try:
            base_url, model = split_base_url_and_model(rest)
        except ValueError as e:
            if "no model name" in str(e):
                raise _bad(spec, f"openai: needs <base_url>/<model>, but {e}; expected the form "
                                 f"openai:<base_url>/<model>, e.g. {example}") from None
            raise _bad(spec, f"openai: needs <base_url>/<model>, e.g. {example}") from None
        refused = [k for k in given if _LLM_OPTIONS[k][1] is None]
        if refused:
            raise _bad(spec, f"option(s) {refused} do not apply to openai: agents")
        from .openai_agent import OpenAIAgent

        return OpenAIAgent(base_url, model, **{_LLM_OPTIONS[k][1]: v for k, v in given.items()})
    target, sep, cls_name = spec.rpartition(":")
    if not sep:
        raise _bad(spec, "not a built-in agent name and no ':' for <module>:<Class>")
    if not target.strip() or not cls_name.strip() or not cls_name.isidentifier():
        raise _bad(spec, "<module>:<Class> needs a module (or .py file) and a class name")
    cls = _load_class(spec, target.strip(), cls_name.strip())
    try:
        agent = cls()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # SystemExit too
        raise _bad(spec, f"{cls_name}() failed: {_import_failure(e).replace('on import', 'when built')}") from e
    if not (callable(getattr(agent, "act", None)) or callable(getattr(agent, "act_batch", None))):
        raise _bad(spec, f"{cls_name} has no act(observation, info) or act_batch(observations, infos) method")
    if not callable(getattr(agent, "begin_episode", None)):
        raise _bad(spec, f"{cls_name} has no begin_episode(sample) method (it may do nothing)")
    return agent
