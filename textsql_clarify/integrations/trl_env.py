"""The env as TRL tools: ``GRPOTrainer(environment_factory=...)``, its prompt dataset and a chat template.

API: :func:`make_environment_factory(samples, **env_kwargs) <make_environment_factory>` returns the
zero-argument factory TRL's ``GRPOTrainer(environment_factory=...)`` calls once per concurrent rollout;
each call builds a :class:`TextSQLClarifyToolEnv` (all of them share one simulated user and one FB
judge). TRL turns the env's public methods into tools: ``ask_user(question)`` (a clarification; returns
the simulated user's reply), ``submit_sql(sql)``, ``report_unanswerable(explanation)`` and, only with
the classification phase on (:class:`TextSQLClarifyClassifyToolEnv`), ``classify(category)``. TRL calls
``reset(**row)`` before each rollout (the row's ``sample_id`` picks the sample) and ``get_reward()``
after it. :func:`build_prompt_dataset(samples, sample_ids, style="tools") <build_prompt_dataset>` gives
the ``datasets.Dataset`` of prompts (``style="tags"`` for :mod:`.trl_rollout`). For models whose chat
template has no tool calling (SmolLM2-Instruct), :func:`apply_tool_chat_template(tokenizer)
<apply_tool_chat_template>` installs ``chat_templates/tool_calling.jinja`` and the response template
TRL parses tool calls with.

How a rollout runs (TRL 1.16, ``trl/trainer/grpo_trainer.py``): the trainer renders each row's
``prompt`` with the tools' JSON schemas (``apply_chat_template(tools=...)``), samples a completion,
parses it with ``trl.chat_template_utils.parse_response`` (the tokenizer's ``response_template``),
calls each parsed tool on that rollout's env instance, appends the results as ``tool`` messages
(their tokens masked out of the loss: ``tool_mask``) and samples again, until the model calls no tool
or ``max_completion_length`` / ``max_tool_calling_iterations`` is reached. A tool call whose arguments
do not bind (a wrong argument name) is answered by TRL with ``{"error": ...}`` and never reaches the
env; arguments that bind go to the env's own action parser as ``{"type": ..., "content": ...}`` JSON,
so an empty or non-string argument is a malformed action there (``format`` component -1, one retry,
then the episode ends as an abstention: TIDE App. D). A completion that calls no tool took no action
and ends with reward 0 under ``binary``.

Reward: :meth:`TextSQLClarifyToolEnv.get_reward` is the sum of the env's step rewards under the env's
preset (``reward_preset``, ``docs/rewards.md``): for an episode that ended it is the env's episode
return, for one that did not (no tool call, tokens ran out) the rewards of the steps taken. The env
keeps ``reward_components`` (each component summed over the episode's turns, ``None`` where never
defined), ``scores`` (the env's ``info["scores"]`` at the end), ``trajectory`` and ``tool_calls`` as
attributes, not methods, since TRL exposes every public method as a tool.

Tool calling with SmolLM2 (``apply_tool_chat_template``). SmolLM2-135M-Instruct's template renders only
``role`` and ``content``, so TRL refuses it (``supports_tool_calling`` is false) and
``trl.chat_template_utils.add_response_schema`` does not know it. The shipped template is ChatML with
the SmolLM2 default system turn (without tools it renders byte for byte as SmolLM2's own, so the tagged
rollout path is unchanged) and Hermes / Qwen2.5 tool blocks: the tools' schemas inside ``<tools>`` in the
system turn, calls as ``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` in the assistant
turn, results as ``<tool_response>\\n...\\n</tool_response>`` in a user turn. It is prefix-preserving, so
TRL keeps it for multi-turn training instead of looking for a patched one. The response template set
with it (:data:`TOOL_RESPONSE_TEMPLATE`, transformers >= 5.13; the legacy ``response_schema`` on older
versions) is TRL's Qwen3 one without the thinking field: JSON between ``<tool_call>`` and
``</tool_call>``, content up to ``<|im_end|>``. An untrained 135M model rarely writes a well-formed call;
the system prompt (:data:`TOOL_INSTRUCTIONS`) and the worked example show the exact form.
"""
from __future__ import annotations

import json
import re
from importlib import resources
from typing import Any, Callable, Sequence

from .common import add_components
from ..samples import Sample

__all__ = ["TextSQLClarifyToolEnv", "TextSQLClarifyClassifyToolEnv", "make_environment_factory",
           "build_prompt_dataset", "tool_system_message", "apply_tool_chat_template", "tool_chat_template",
           "TOOL_INSTRUCTIONS", "TOOL_CLASSIFY_INSTRUCTIONS", "TOOL_WORKED_EXAMPLE", "TOOL_RESPONSE_TEMPLATE",
           "EPISODE_OVER", "tool_text"]

#: The tools variant of :data:`textsql_clarify.envs.render.INSTRUCTIONS` (the same three actions, as tools).
TOOL_INSTRUCTIONS = (
    "You are a text-to-SQL assistant working on a SQLite database. Each turn, call exactly one tool:\n"
    "  submit_sql(sql): one SQLite SELECT query that answers the question (this ends the episode unless the user "
    "then changes the request),\n"
    "  ask_user(question): a question to the user when the request is ambiguous; the user's reply comes back,\n"
    "  report_unanswerable(explanation): why the question cannot be answered from this database (this ends the "
    "episode).\n"
    "Query results are not shown to you."
)
#: The tools variant of :data:`textsql_clarify.envs.render.CLASSIFY_INSTRUCTIONS`.
TOOL_CLASSIFY_INSTRUCTIONS = (
    "First, classify the question: call classify(category) with one subcategory name from this list:\n"
)
#: The tools variant of :data:`textsql_clarify.baselines.llm_prompt.WORKED_EXAMPLE` (same invented exchange).
TOOL_WORKED_EXAMPLE = (
    "Example (a different database, with a table pets(name, species, age)):\n"
    "user: How many old pets are there?\n"
    "assistant: <tool_call>\n{\"name\": \"ask_user\", \"arguments\": {\"question\": \"What age counts as old for "
    "you?\"}}\n</tool_call>\n"
    "tool response: Older than 10 years.\n"
    "assistant: <tool_call>\n{\"name\": \"submit_sql\", \"arguments\": {\"sql\": \"SELECT COUNT(*) FROM pets WHERE "
    "age > 10\"}}\n</tool_call>\n"
    "If the database has no column or table that the question needs, call instead\n"
    "<tool_call>\n{\"name\": \"report_unanswerable\", \"arguments\": {\"explanation\": \"The database records no "
    "owner of a pet, so this cannot be answered.\"}}\n</tool_call>\n"
    "Call exactly one tool and write nothing else."
)
#: What a tool returns once the episode has ended (the call earns nothing and changes nothing).
EPISODE_OVER = "The episode is over: no further actions are accepted."

#: transformers' new-style response template for the shipped tool-calling template (TRL's ``qwen3_template``
#: without its thinking field): JSON tool calls between ``<tool_call>`` and ``</tool_call>``.
TOOL_RESPONSE_TEMPLATE = {
    "defaults": {"role": "assistant"},
    "start_anchor": "<|im_start|>assistant\n",
    "fields": {
        "tool_calls": {
            "open": "<tool_call>",
            "close_pattern": r"</tool_call>\s*",
            "repeats": True,
            "content": "json",
            "transform": {"type": "function", "function": "{content}"},
        },
        "content": {
            "close_pattern": r"<\|im_end\|>\s*",
            "content": "text",
        },
    },
}

#: env texts that tell the agent to write tagged (or JSON) actions, and their wording on the tools path
_TOOL_WORDING = (
    ("reply <category>SUBCATEGORY</category>", "call classify(category) with one subcategory name"),
    ("answer with <sql> or <feedback>", "call submit_sql(sql) or report_unanswerable(explanation)"),
    ("a JSON action's 'content' must be a string", "the tool's argument must be a string"),
)
_TOO_LONG = re.compile(r"action too long: \d+ characters \(limit \d+\)")

_ENDED = {"sql": "SQL received. The episode is over.",
          "feedback": "Explanation received. The episode is over.",
          "abstain": "The episode is over without an answer.",
          "truncated": "The episode is over without an answer."}


def tool_chat_template() -> str:
    """The text of the shipped ``chat_templates/tool_calling.jinja`` (module doc)."""
    return resources.files(__package__).joinpath("chat_templates/tool_calling.jinja").read_text(encoding="utf-8")


def apply_tool_chat_template(tokenizer: Any, *, force: bool = False) -> Any:
    """Install the tool-calling chat template and its response template on a tokenizer (or a processor's).

    A tokenizer whose template already passes TRL's ``supports_tool_calling`` and that has a response
    template or schema is left as it is unless ``force``.

    Args:
        tokenizer: a ``transformers`` tokenizer with ChatML special tokens (``<|im_start|>``, ``<|im_end|>``;
            SmolLM2, Qwen2 ...), or a processor holding one.
        force: install even when the tokenizer's own template already supports tool calling.
    Returns:
        The same object, changed in place: ``chat_template`` set to :func:`tool_chat_template` and
        ``response_template`` (transformers >= 5.13) or the legacy ``response_schema`` set.
    Raises:
        ValueError: the tokenizer has no ``<|im_start|>`` / ``<|im_end|>`` tokens (the template's markers
            would be split into plain text).

    Source: TRL 1.16 ``trl/chat_template_utils.py`` (``supports_tool_calling``, ``add_response_schema``,
    ``qwen3_template``); Qwen2.5's tool-calling template.
    """
    from trl.chat_template_utils import supports_tool_calling

    tok = getattr(tokenizer, "tokenizer", tokenizer)
    has_parser = (getattr(tok, "response_template", None) is not None
                  or getattr(tok, "response_schema", None) is not None)
    if not force and getattr(tokenizer, "chat_template", None) and supports_tool_calling(tokenizer) and has_parser:
        return tokenizer
    vocab = tok.get_vocab()
    missing = [t for t in ("<|im_start|>", "<|im_end|>") if t not in vocab]
    if missing:
        raise ValueError(f"the tool-calling chat template needs ChatML tokens; this tokenizer lacks {missing}")
    template = tool_chat_template()
    tok.chat_template = template
    if tok is not tokenizer:
        tokenizer.chat_template = template
    from trl.chat_template_utils import _SUPPORTS_RESPONSE_TEMPLATE, qwen3_schema

    if _SUPPORTS_RESPONSE_TEMPLATE:
        tok.response_template = json.loads(json.dumps(TOOL_RESPONSE_TEMPLATE))
    else:  # older transformers: the legacy schema of the same Hermes format
        tok.response_schema = qwen3_schema
    return tokenizer


def tool_text(text: str) -> str:
    """An env text (a refusal, the classification-phase request) worded for the tools path: where it tells the
    agent to write a tagged action (``reply <category>...``, ``answer with <sql> or <feedback>``) it names the
    tool to call instead; other text is returned unchanged."""
    from ..envs import render

    text = text.replace(render.CLASSIFY_INSTRUCTIONS, TOOL_CLASSIFY_INSTRUCTIONS)
    for tagged, tools in _TOOL_WORDING:
        text = text.replace(tagged, tools)
    return text


def _env_options(kwargs: dict, where: str) -> None:
    """Raise ValueError naming the keys of ``kwargs`` that are no ``TextSQLClarifyEnv`` option."""
    import inspect

    from ..envs.env import TextSQLClarifyEnv

    known = set(inspect.signature(TextSQLClarifyEnv.__init__).parameters) - {"self"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise ValueError(f"{where}: unknown env option(s) {unknown}; TextSQLClarifyEnv takes {sorted(known)}")


def tool_system_message(tag_system: str) -> str:
    """The tools variant of an env system message: the tag instructions replaced by :data:`TOOL_INSTRUCTIONS`
    (and the classification instructions by :data:`TOOL_CLASSIFY_INSTRUCTIONS`); context and schema kept.

    Raises:
        ValueError: ``tag_system`` does not start with the env's instructions (``render.INSTRUCTIONS``).
    """
    from ..envs import render

    if not tag_system.startswith(render.INSTRUCTIONS):
        raise ValueError("not an env system message: it does not start with render.INSTRUCTIONS")
    out = TOOL_INSTRUCTIONS + tag_system[len(render.INSTRUCTIONS):]
    return out.replace(render.CLASSIFY_INSTRUCTIONS, TOOL_CLASSIFY_INSTRUCTIONS, 1)


class TextSQLClarifyToolEnv:
    """One ``TextSQLClarify-v0`` episode at a time, driven through tool calls (module doc).

    Its public methods are the tools TRL exposes (their Google-style docstrings become the JSON schemas
    the model reads), besides ``reset`` and ``get_reward``; everything else is private or an attribute.

    Args:
        samples: the samples rows may name.
        simulator: the simulated user (built once by :func:`make_environment_factory` and shared); any
            :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` ``simulator`` value.
        feedback_judge: the FB judge (shared likewise); ``None``: the default judge.
        env_kwargs: every other :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` option
            (``reward_preset``, ``max_clarifications``, ``category_mode`` ...).

    Attributes (read after a rollout): ``sample_id``, ``done``, ``step_rewards``, ``reward_components``
    (every component the env's preset writes, ``decision`` included under the ``decision`` /
    ``shaped_decision`` presets), ``scores``, ``trajectory``, ``decision`` (the env's ``info["decision"]``,
    ``{"kind", "expected"}``, from the episode's decision turn; ``None`` before it), ``tool_calls`` (``[(tool, argument, returned text)]``),
    ``max_argument_chars`` (the env's ``max_action_chars``, applied to a tool's argument itself, as the
    tagged path applies it to the action text; the JSON envelope and its escapes are not counted).

    A refusal a tool returns names tools, not tags (:func:`tool_text`): in the final turn an ``ask_user``
    call is told to call ``submit_sql(sql)`` or ``report_unanswerable(explanation)``.

    Raises:
        ValueError: as :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` (bad options, no samples); an
            unknown option (named); ``classification_phase=True`` or ``category_mode="predicted"`` on this
            class, which has no ``classify`` tool (use :class:`TextSQLClarifyClassifyToolEnv` or
            :func:`make_environment_factory`).
    """

    def __init__(self, samples: Sequence[Sample], *, simulator: Any = "rule", feedback_judge: Any = None,
                 **env_kwargs: Any):
        from ..envs.env import TextSQLClarifyEnv

        for k in ("samples", "dataset", "limit"):
            if k in env_kwargs:
                raise ValueError(f"env_kwargs must not set {k!r}: the samples are given as an argument")
        _env_options(env_kwargs, type(self).__name__)
        wants_classify = bool(env_kwargs.get("classification_phase")) or env_kwargs.get("category_mode") == "predicted"
        if wants_classify and not callable(getattr(self, "classify", None)):
            raise ValueError(
                f"{type(self).__name__} has no classify tool, so with classification_phase=True or "
                f"category_mode='predicted' every episode would stop at the classification phase and score 0; "
                f"use TextSQLClarifyClassifyToolEnv, or make_environment_factory(samples, **env_kwargs), which "
                f"picks it")
        self._env = TextSQLClarifyEnv(samples=samples, simulator=simulator, feedback_judge=feedback_judge,
                                      **env_kwargs)
        #: the longest tool argument accepted, in characters: the env's ``max_action_chars`` applied to the
        #: argument itself, as on the tagged path, not to its JSON envelope and escapes
        self.max_argument_chars = self._env.max_action_chars
        self._clear()

    def _clear(self) -> None:
        self.sample_id: str | None = None
        self.done = True
        self.step_rewards: list[float] = []
        self.reward_components: dict[str, float | None] = {}
        self.scores: dict | None = None
        self.trajectory = None
        self.decision: dict | None = None
        self.tool_calls: list[tuple[str, Any, str]] = []

    @property
    def env(self) -> Any:
        """The underlying :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv`."""
        return self._env

    def reset(self, **row: Any) -> str | None:
        """Start the episode of a dataset row (TRL calls it with the row's columns as keywords).

        Args:
            row: the row; ``row["sample_id"]`` names the sample (``prompt`` and other columns are ignored).
        Returns:
            ``None``: the row's prompt (:func:`build_prompt_dataset`) already holds the env's first
            observation (TRL appends a returned string to the last user message).
        Raises:
            KeyError: no ``sample_id`` in the row, or an unknown one.
        """
        sid = row.get("sample_id")
        if not isinstance(sid, str):
            raise KeyError("TextSQLClarifyToolEnv.reset needs the row's 'sample_id' column "
                           "(build the dataset with build_prompt_dataset)")
        self._clear()
        self._env.reset(options={"sample_id": sid})
        self.sample_id = sid
        self.done = False
        return None

    def _act(self, tool: str, kind: str, value: Any) -> str:
        """Send ``{"type": kind, "content": value}`` to the env; the text the tool returns."""
        if self.sample_id is None:
            raise RuntimeError("reset(sample_id=...) must be called before a tool")
        if self.done:
            self.tool_calls.append((tool, value, EPISODE_OVER))
            return EPISODE_OVER
        action = json.dumps({"type": kind, "content": value}, ensure_ascii=False, default=str)
        limit = self.max_argument_chars
        # the env measures the whole JSON action; count only the argument (the envelope and escapes are ours)
        overhead = len(action) - len(value) if isinstance(value, str) else 0
        self._env.max_action_chars = limit + overhead
        try:
            _obs, reward, terminated, truncated, info = self._env.step(action)
        finally:
            self._env.max_action_chars = limit
        self.step_rewards.append(float(reward))
        add_components(self.reward_components, info.get("reward_components"))
        if info.get("decision") is not None:  # the decision turn: {"kind", "expected"} (rewards/decision.py)
            self.decision = dict(info["decision"])
        last = info["messages"][-1]
        if terminated or truncated:
            self.done = True
            self.scores = dict(info.get("scores") or {})
            self.trajectory = info.get("trajectory")
            outcome = getattr(self.trajectory, "outcome", None)
            err = info.get("error")
            text = (f"{err}. " if err else "") + _ENDED.get(outcome, "The episode is over.")
        elif last.get("role") == "user":
            text = last["content"]
        else:  # pragma: no cover - the env always ends a non-terminal step on a user message
            text = ""
        err = info.get("error")
        if err:  # the env's refusal, worded for tools (the user's replies are left as they are)
            worded = tool_text(err)
            if _TOO_LONG.fullmatch(err):
                n = len(value) if isinstance(value, str) else len(action)
                worded = f"{tool} argument too long: {n} characters (limit {limit})"
            text = text.replace(err, worded)
        self.tool_calls.append((tool, value, text))
        return text

    def ask_user(self, question: str) -> str:
        """Ask the user a clarification question about their request, when it is ambiguous.

        Args:
            question: The clarification question for the user.

        Returns:
            The user's reply.
        """
        return self._act("ask_user", "clarify", question)

    def submit_sql(self, sql: str) -> str:
        """Submit the final answer: one SQLite SELECT query that answers the user's question.

        Args:
            sql: The SQLite SELECT query.

        Returns:
            Whether the episode is over, or what the user says next.
        """
        return self._act("submit_sql", "sql", sql)

    def report_unanswerable(self, explanation: str) -> str:
        """Report that the question cannot be answered from this database, and explain why.

        Args:
            explanation: Why the question cannot be answered from this database.

        Returns:
            Confirmation that the episode is over.
        """
        return self._act("report_unanswerable", "feedback", explanation)

    def get_reward(self) -> float:
        """The episode reward: the sum of the env's step rewards under its preset (module doc)."""
        return float(sum(self.step_rewards))


class TextSQLClarifyClassifyToolEnv(TextSQLClarifyToolEnv):
    """:class:`TextSQLClarifyToolEnv` with the classification phase on (``classify`` is a tool too)."""

    def __init__(self, samples: Sequence[Sample], **kwargs: Any):
        kwargs.setdefault("classification_phase", True)
        super().__init__(samples, **kwargs)

    def classify(self, category: str) -> str:
        """Classify the user's question before answering it (classification phase).

        Args:
            category: One subcategory name from the list in the instructions.

        Returns:
            What to do next.
        """
        return self._act("classify", "classify", category)


def make_environment_factory(samples: Sequence[Sample], *, sample_ids: Sequence[str] | None = None,
                             split: str | None = None, split_by: str = "db", heldout_fraction: float = 0.25,
                             split_seed: int = 0, **env_kwargs: Any) -> Callable[[], TextSQLClarifyToolEnv]:
    """The ``environment_factory`` for TRL's ``GRPOTrainer``: a zero-argument callable building tool envs.

    Args:
        samples: the samples the dataset rows name.
        sample_ids, split, split_by, heldout_fraction, split_seed: which of them the envs hold
            (:func:`~textsql_clarify.integrations.splits.select_samples`: e.g. ``split="train"`` with a split
            by database); with ``exclude_flags`` (an env option, applied the same way) a row naming a sample
            left out raises ``KeyError`` at ``reset``.
        env_kwargs: :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` options. ``simulator`` (default
            ``"rule"``) and ``feedback_judge`` are built once here and shared by every env the factory
            builds (one model per process). ``classification_phase=True`` or ``category_mode="predicted"``
            gives :class:`TextSQLClarifyClassifyToolEnv` (with the ``classify`` tool).
    Returns:
        ``factory() -> TextSQLClarifyToolEnv``.
    Raises:
        ValueError: bad env options (checked here, by building the first env); a bad selection (as
            ``select_samples``).

    Source: TRL 1.16 ``GRPOTrainer(environment_factory=...)`` (``trl/trainer/grpo_trainer.py``).
    """
    from ..rewards.feedback import default_judge
    from ..simulators import make_simulator

    from .splits import select_samples

    kw = dict(env_kwargs)
    samples = select_samples(samples, sample_ids=sample_ids, split=split, split_by=split_by,
                             heldout_fraction=heldout_fraction, split_seed=split_seed,
                             exclude_flags=kw.pop("exclude_flags", ()))
    sim = make_simulator(kw.pop("simulator", "rule"))
    judge = kw.pop("feedback_judge", None) or default_judge()
    classify = bool(kw.get("classification_phase")) or kw.get("category_mode") == "predicted"
    cls = TextSQLClarifyClassifyToolEnv if classify else TextSQLClarifyToolEnv
    first = [cls(samples, simulator=sim, feedback_judge=judge, **kw)]  # checks the options now

    def factory() -> TextSQLClarifyToolEnv:
        if first:
            return first.pop()
        return cls(samples, simulator=sim, feedback_judge=judge, **kw)

    factory.env_class = cls  # type: ignore[attr-defined]
    return factory


def build_prompt_dataset(samples: Sequence[Sample], sample_ids: Sequence[str] | None = None, *,
                         style: str = "tools", env_kwargs: dict | None = None, example: bool = True,
                         exclude_flags: Sequence[str] = (), split: str | None = None, split_by: str = "db",
                         heldout_fraction: float = 0.25, split_seed: int = 0) -> Any:
    """The prompt dataset for ``GRPOTrainer``: one row per selected sample.

    Args:
        samples: the samples.
        sample_ids: which samples, in this order (e.g. the train ids of
            :func:`~textsql_clarify.integrations.splits.split_sample_ids`); ``None``: all, in order.
        exclude_flags: skip the samples carrying any of these load-time flags (e.g. ``("indistinguishable",)``),
            also those ``sample_ids`` names; ``env_kwargs["exclude_flags"]`` is added to them.
        split, split_by, heldout_fraction, split_seed: keep one side of a split (``split="train"`` /
            ``"heldout"``; by database by default), drawn over all ``samples``
            (:func:`~textsql_clarify.integrations.splits.select_samples`).
        style: ``"tools"`` (for :func:`make_environment_factory`: the system message describes the tools,
            :func:`tool_system_message`, with :data:`TOOL_WORKED_EXAMPLE`) or ``"tags"`` (for
            :func:`~textsql_clarify.integrations.trl_rollout.make_rollout_func`: the env's own messages with
            the worked example, ``baselines.llm_prompt.agent_messages``).
        env_kwargs: the env options the training uses (``category_mode``, ``classification_phase``,
            ``protocol``, ``schema_tables`` ...), which shape the system message.
        example: include the worked example.
    Returns:
        A ``datasets.Dataset`` with columns ``prompt`` (chat messages: the system message and the question,
        or for p-protocol chain samples the pre-filled L1 exchange too; every message also carries the row's
        ``sample_id`` key, which chat templates ignore and the rollout reads), ``sample_id`` and ``group``.
    Raises:
        KeyError: a sample id not among ``samples``. ValueError: an unknown style, an unknown env option
            (named) or bad env option values; an id on the other side of ``split``, an unknown flag, or nothing
            left to build.
    """
    import datasets

    from ..baselines.llm_prompt import agent_messages
    from ..envs.env import TextSQLClarifyEnv

    if style not in ("tools", "tags"):
        raise ValueError(f"style must be 'tools' or 'tags', got {style!r}")
    from .splits import select_samples

    kw = {k: v for k, v in dict(env_kwargs or {}).items()
          if k not in ("simulator", "feedback_judge", "samples", "dataset", "limit")}
    _env_options(kw, "build_prompt_dataset env_kwargs")
    flags = (exclude_flags,) if isinstance(exclude_flags, str) else tuple(exclude_flags or ())
    env_flags = kw.pop("exclude_flags", ())
    flags += (env_flags,) if isinstance(env_flags, str) else tuple(env_flags or ())
    chosen = select_samples(samples, sample_ids=sample_ids, split=split, split_by=split_by,
                            heldout_fraction=heldout_fraction, split_seed=split_seed, exclude_flags=flags)
    env = TextSQLClarifyEnv(samples=list({s.id: s for s in chosen}.values()), simulator="rule", **kw)
    ids = [s.id for s in chosen]  # a repeated id gives repeated rows, as before
    rows: dict[str, list] = {"prompt": [], "sample_id": [], "group": []}
    for sid in ids:
        env.sample_index(sid)  # KeyError naming the id
        _obs, info = env.reset(options={"sample_id": sid})
        if style == "tags":
            msgs = agent_messages(info, example=example)
        else:
            msgs = [dict(m) for m in info["messages"]]
            msgs[0]["content"] = tool_system_message(msgs[0]["content"]) + (
                "\n\n" + TOOL_WORKED_EXAMPLE if example else "")
            for m in msgs[1:]:  # the classification phase asks in a user turn
                m["content"] = tool_text(m["content"])
        rows["prompt"].append([{"role": m["role"], "content": m["content"], "sample_id": sid} for m in msgs])
        rows["sample_id"].append(sid)
        rows["group"].append(env.current_sample.group)
    return datasets.Dataset.from_dict(rows)
