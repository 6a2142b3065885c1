"""Baseline agents: ``oracle``, ``no-clarify`` and ``random``.

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


class OracleAgent(_PrivilegedAgent):
    """Knows the sample: asks the relevant clarification where one is needed, then answers exactly.

    * answerable: submits the gold SQL;
    * ambiguous: asks one clarification built from the hidden knowledge (for a chain sample: the L1
      then the L2 question, TIDE §2.1), then submits the gold SQL;
    * unanswerable: gives the hidden knowledge as feedback;
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
            return f"<category>{s.subcategory}</category>"
        post = self._after_drift()
        if post:
            return post
        if s.gold_sql is None:
            return f"<feedback>{s.hidden_knowledge or 'The database does not hold what this question asks for.'}</feedback>"
        history = observation.get("history", "")
        # skip a chain's L1 question when it is already in the history (p-protocol primes it)
        while self._plan and observation.get("clarifications_left", 0) > 0:
            nxt = self._plan.pop(0)
            if nxt in history:
                continue
            return nxt
        return self._sql(s.gold_sql)


class NoClarifyAgent(_PrivilegedAgent):
    """Never asks: submits the first interpretation's SQL (or the gold SQL when there is none).

    For an unanswerable sample it gives a generic refusal, which names no cause. In a classification
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


def make_agent(name: str, *, seed: int = 0):
    """Build a baseline agent by name (``oracle`` | ``no-clarify`` | ``random``).

    Raises:
        ValueError: unknown name (lists the valid ones).
    """
    if name not in AGENTS:
        raise ValueError(f"unknown agent {name!r}; available: {sorted(AGENTS)}")
    return RandomAgent(seed) if name == "random" else AGENTS[name]()
