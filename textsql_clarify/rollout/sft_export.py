"""Demonstrations from the env: play an agent (the oracle by default) and export its solved episodes
as chat-format SFT records for TRL's ``SFTTrainer``.

Each episode becomes one record ``{"messages": [...], "sample_id", "group", "subcategory"}`` (plus
``"tools"`` in the tools style), a conversational language-modelling example in TRL's dataset format
(TRL docs, "Dataset formats": ``{"messages": [...]}``; tool calling: assistant ``tool_calls`` and
``tool`` messages, the tools' JSON schemas in a ``tools`` column).

Two styles:

* ``"tagged"``: the chat an LLM agent answers on the tagged path
  (:func:`~textsql_clarify.baselines.llm_prompt.agent_messages`: the env's system message with the worked
  example, the question, then each action as an assistant message and each user reply or drift
  utterance as a user message). The messages are the env's own ``info["messages"]`` of the episode's
  last step, so the prompt of every turn is byte for byte what the agent saw; this is checked turn by
  turn, and an episode whose prompts do not nest (the classification phase rewrites the system message)
  is an error in this style.
* ``"tools"``: the chat a model sees under ``GRPOTrainer(environment_factory=...)`` with
  :mod:`textsql_clarify.integrations.trl_env`: the tools variant of the system message
  (``tool_system_message`` with ``TOOL_WORKED_EXAMPLE``, as ``build_prompt_dataset(style="tools")``),
  each action as an assistant ``tool_calls`` message (``ask_user(question)``, ``submit_sql(sql)``,
  ``report_unanswerable(explanation)``, ``classify(category)``) followed by a ``tool`` message with what
  that tool returned. The tool results come from replaying the episode's actions through
  ``TextSQLClarifyToolEnv`` itself (so they are the texts the trainer shows), and the user replies are
  checked to be those of the played episode. ``tools`` holds the JSON schemas transformers derives from
  the tool env's methods (``transformers.utils.get_json_schema``, what ``apply_chat_template(tools=...)``
  does with TRL's callables), in TRL's order.

Only solved episodes are kept (:func:`episode_solved`: every SQL turn has EX 1, feedback accepted by the
FB judge, no malformed turn); :class:`SFTRecords` says how many were dropped and why.

Loading for training: :func:`sft_dataset` builds the ``datasets.Dataset``; it stores ``tools`` and
tool-call ``arguments`` as JSON strings, because Arrow unifies the differently keyed dicts of one column
into one struct and would give every tool call the other tools' argument names as nulls. TRL's
``SFTTrainer`` decodes a string ``tools`` column, and chat templates print string arguments verbatim
(the same text as ``tojson`` of the dict).
"""
from __future__ import annotations

import inspect
import json
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

from ..samples import Sample
from ..trajectory import Trajectory
from ..baselines.llm_prompt import agent_messages
from .episodes import _act

__all__ = ["SFTRecords", "sft_records", "episode_solved", "tool_schemas", "write_sft_jsonl", "read_sft_jsonl",
           "sft_dataset", "TOOL_NAMES", "STYLES"]

STYLES = ("tagged", "tools")
#: action type -> (tool name, argument name), as in ``integrations/trl_env.py``
TOOL_NAMES = {"clarify": ("ask_user", "question"), "sql": ("submit_sql", "sql"),
              "feedback": ("report_unanswerable", "explanation"), "classify": ("classify", "category")}


class SFTRecords(list):
    """The kept records (a plain ``list`` of dicts) and what was left out.

    Attributes:
        dropped: one ``{"sample_id", "group", "subcategory", "reason"}`` per episode left out.
        n_played: episodes played (kept + dropped).
        style: ``"tagged"`` | ``"tools"``.
    """

    def __init__(self, records: Iterable[dict] = (), *, dropped: Sequence[dict] = (), style: str = "tagged"):
        super().__init__(records)
        self.dropped = list(dropped)
        self.style = style

    @property
    def n_played(self) -> int:
        """Episodes played: kept plus dropped."""
        return len(self) + len(self.dropped)

    def summary(self) -> str:
        """One line: kept / dropped counts, kept per group, the dropped sample ids."""
        groups: dict[str, int] = {}
        for r in self:
            groups[r["group"]] = groups.get(r["group"], 0) + 1
        per = ", ".join(f"{g} {n}" for g, n in sorted(groups.items()))
        out = f"kept {len(self)} of {self.n_played} episodes ({per or 'none'}); dropped {len(self.dropped)}"
        if self.dropped:
            out += ": " + ", ".join(f"{d['sample_id']} ({d['reason']})" for d in self.dropped[:10])
            out += " ..." if len(self.dropped) > 10 else ""
        return out


def episode_solved(traj: Trajectory) -> tuple[bool, str]:
    """Whether an episode is a demonstration worth imitating, from its turns' reward components.

    Solved: it ended on an action (outcome ``sql`` or ``feedback``), no turn was malformed, every SQL turn
    has ``ex`` 1.0 (the pre-drift and, on a drift sample, the post-drift SQL: ABISS §5.3 EX, TIDE §4.1),
    a feedback turn has ``feedback`` 1.0 (the FB judge accepted it, ABISS §5.3) or, on an unanswerable
    sample without a stated rationale, ``abstained`` 1.0, a classification-phase label is the sample's
    subcategory (``classification`` 1.0, ABISS §5.1; a sample whose subcategory is unknown has no
    label to demonstrate and is dropped), and a drift sample answered both requests.

    Returns:
        ``(solved, reason)``; the reason says what failed (``""`` when solved).
    """
    if traj.outcome not in ("sql", "feedback"):
        return False, f"outcome {traj.outcome}"
    if any(t.action_type == "invalid" for t in traj.turns):
        return False, "malformed action"
    sql = [t for t in traj.turns if t.action_type == "sql"]
    for t in sql:
        ex = t.reward_components.get("ex")
        if ex != 1.0:
            return False, f"EX {ex} on turn {t.index + 1}"
    if traj.has_drift and traj.outcome == "sql" and len(sql) < 2:
        return False, "drift request not answered"
    for t in traj.turns:
        if t.action_type == "classify" and t.reward_components.get("classification") is None:
            return False, "subcategory unknown: no classification to demonstrate"
        if t.action_type == "classify" and t.reward_components.get("classification") != 1.0:
            return False, f"wrong category {t.content!r}"
        if t.action_type == "feedback":
            c = t.reward_components
            if c.get("feedback") != 1.0 and c.get("abstained") != 1.0:
                return False, f"feedback not accepted (FB {c.get('feedback')})"
    return True, ""


def _tool_env_class(classify: bool):
    try:
        from ..integrations import trl_env
    except ImportError as e:  # pragma: no cover - the module ships with the package
        raise ImportError(f"style='tools' needs textsql_clarify.integrations.trl_env: {e}") from e
    return trl_env, (trl_env.TextSQLClarifyClassifyToolEnv if classify else trl_env.TextSQLClarifyToolEnv)


def tool_schemas(tool_env: Any) -> list[dict]:
    """The JSON schemas of a tool env's tools, as TRL lists them and transformers renders them.

    TRL's ``GRPOTrainer(environment_factory=...)`` exposes every public method of the env class except
    ``reset`` and ``get_reward`` (``inspect.getmembers`` order, i.e. by name) and hands the bound methods
    to ``apply_chat_template(tools=...)``, which turns each into ``transformers.utils.get_json_schema``.

    Args:
        tool_env: an instance of ``TextSQLClarifyToolEnv`` (or any class with tool methods).
    Returns:
        ``[{"type": "function", "function": {"name", "description", "parameters"}}, ...]``.
    Raises:
        ImportError: transformers is not installed (extra ``hf``).
    """
    from transformers.utils import get_json_schema

    out = []
    for name, _ in inspect.getmembers(type(tool_env), predicate=inspect.isfunction):
        if name in ("reset", "get_reward") or name.startswith("_"):
            continue
        out.append(get_json_schema(getattr(tool_env, name)))
    return out


def _play(env: Any, agent: Any, index: int, seed: int) -> tuple[dict, list[list[dict]], list[Any]]:
    """One episode: ``(final info, each turn's info["messages"], each turn's action)``
    (as :func:`~textsql_clarify.rollout.episodes.run_episode`, keeping what the agent was shown; an
    agent with only ``act_batch``, which :func:`~textsql_clarify.baselines.agents.make_agent` accepts,
    is asked one observation at a time)."""
    obs, info = env.reset(seed=seed, options={"index": index})
    sample = env.current_sample
    agent.begin_episode(sample if getattr(agent, "privileged", False) else None)
    prompts, actions = [], []
    for turn in range(env.max_turns + 1):
        prompts.append(info["messages"])
        action = _act(agent, obs, info, f"sample {sample.id} (turn {turn + 1})")  # errors get that note
        actions.append(action)
        obs, _reward, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            return info, prompts, actions
    raise RuntimeError(f"episode for sample {sample.id} did not end within {env.max_turns} turns")


def _tagged_messages(info: dict, prompts: list[list[dict]], sample_id: str, example: bool) -> list[dict]:
    """The final step's messages (with the worked example); each turn's prompt checked to be a prefix
    followed by that turn's assistant action."""
    msgs = agent_messages(info, example=example)
    for k, prompt in enumerate(prompts):
        seen = agent_messages({"messages": prompt}, example=example)
        n = len(seen)
        if msgs[:n] != seen or len(msgs) <= n or msgs[n]["role"] != "assistant":
            raise ValueError(
                f"sample {sample_id}: the prompt of turn {k + 1} is not a prefix of the episode's final messages "
                f"(the classification phase changes the system message and drops its user turns), so one chat "
                f"cannot hold every turn's prompt in style='tagged'; use style='tools' or turn the classification "
                f"phase off")
    return msgs


def _tool_messages(tool_env: Any, trl_env: Any, traj: Trajectory, tagged: list[dict], first_prompt: list[dict],
                   example: bool) -> list[dict]:
    """The tools-style chat of an episode, its tool results replayed through ``tool_env``."""
    msgs = [dict(m) for m in first_prompt]
    msgs[0]["content"] = trl_env.tool_system_message(msgs[0]["content"]) + (
        "\n\n" + trl_env.TOOL_WORKED_EXAMPLE if example else "")
    for m in msgs[1:]:  # the classification phase asks in a user turn: in tool terms, as build_prompt_dataset
        m["content"] = trl_env.tool_text(m["content"])
    tool_env.reset(sample_id=traj.sample_id)
    # the user messages that followed each action in the played episode (None after the last action)
    n_pre = sum(m["role"] == "assistant" for m in first_prompt)  # the p-protocol's pre-filled L1 exchange
    after = [tagged[i + 1]["content"] if i + 1 < len(tagged) and tagged[i + 1]["role"] == "user" else None
             for i, m in enumerate(tagged) if m["role"] == "assistant"][n_pre:]
    turns = [t for t in traj.turns if t.action_type != "invalid"]
    for k, t in enumerate(turns):
        name, arg = TOOL_NAMES[t.action_type]
        result = getattr(tool_env, name)(t.content)
        if k < len(after) and after[k] is not None and t.action_type != "classify" and result != after[k]:
            raise RuntimeError(f"sample {traj.sample_id}: the tool env's {name} returned {result!r}, the played "
                               f"episode showed {after[k]!r} (a simulated user that is not deterministic?)")
        msgs.append({"role": "assistant", "content": "",
                     "tool_calls": [{"type": "function", "function": {"name": name, "arguments": {arg: t.content}}}]})
        msgs.append({"role": "tool", "name": name, "content": result})
    if not tool_env.done:
        raise RuntimeError(f"sample {traj.sample_id}: the replayed tool episode did not end")
    return msgs


def sft_records(samples: Sequence[Sample] | str, agent: Any = "oracle", *, style: str = "tagged", seed: int = 0,
                example: bool = True, **env_kwargs: Any) -> SFTRecords:
    """Play ``agent`` once per sample through the env and keep its solved episodes as SFT records.

    Args:
        samples: the samples, or a dataset spec for :func:`textsql_clarify.datasets.load_dataset`
            (``"embedded"``, ``"spider:<root>"``, a ``.jsonl`` file ...).
        agent: an agent name for :func:`~textsql_clarify.baselines.agents.make_agent` (default ``"oracle"``)
            or an agent object (``begin_episode``, ``act``); any agent works, its unsolved episodes are dropped.
        style: ``"tagged"`` (actions as tagged text) or ``"tools"`` (tool calls; module doc).
        seed: reset seed of the first episode (episode ``i`` uses ``seed + i``, as ``evaluate``).
        example: include the worked example in the system message (as the LLM agents do by default).
        env_kwargs: :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` options (``simulator``,
            ``reward_preset``, ``max_clarifications``, ``protocol``, ``limit`` ...).
    Returns:
        :class:`SFTRecords`: a list of ``{"messages", "sample_id", "group", "subcategory"}`` dicts (and
        ``"tools"`` in the tools style), in sample order, with ``dropped`` (which episodes were not solved).
    Raises:
        ValueError: unknown style or agent, bad env options, or (tagged style) an episode whose turn prompts
            do not nest (classification phase). ImportError: the tools style without transformers.
        DatasetError: ``samples`` is a spec that cannot be loaded.
    Source: TRL docs "Dataset formats" (conversational language modelling, tool calling) and
    ``SFTTrainer``; TRL ``GRPOTrainer(environment_factory=...)`` for the tools' schemas.
    """
    from ..envs.env import TextSQLClarifyEnv, episode_samples
    from ..rewards.feedback import default_judge
    from ..simulators import make_simulator
    from ..baselines.agents import make_agent

    if style not in STYLES:
        raise ValueError(f"style must be one of {list(STYLES)}, got {style!r}")
    samples = episode_samples(samples if isinstance(samples, str) else "",
                              None if isinstance(samples, str) else samples, env_kwargs.pop("limit", None))
    if isinstance(agent, str):
        agent = make_agent(agent, seed=seed)
    kw = dict(env_kwargs)
    sim = make_simulator(kw.pop("simulator", "rule"))
    judge = kw.pop("feedback_judge", None) or default_judge()
    env = TextSQLClarifyEnv(samples=samples, simulator=sim, feedback_judge=judge, **kw)
    tool_env = trl_env = tools = None
    if style == "tools":
        classify = bool(kw.get("classification_phase")) or kw.get("category_mode") == "predicted"
        trl_env, cls = _tool_env_class(classify)
        tool_env = cls(samples, simulator=sim, feedback_judge=judge, **kw)
        tools = tool_schemas(tool_env)
    kept, dropped = [], []
    for i, s in enumerate(samples):
        info, prompts, _actions = _play(env, agent, i, seed + i)
        traj: Trajectory = info["trajectory"]
        meta = {"sample_id": s.id, "group": s.group, "subcategory": s.subcategory}
        ok, reason = episode_solved(traj)
        if not ok:
            dropped.append({**meta, "reason": reason})
            continue
        if style == "tagged":
            msgs = _tagged_messages(info, prompts, s.id, example)
            kept.append({"messages": msgs, **meta})
        else:
            tagged = [dict(m) for m in info["messages"]]
            msgs = _tool_messages(tool_env, trl_env, traj, tagged, prompts[0], example)
            kept.append({"messages": msgs, **meta, "tools": tools})
    return SFTRecords(kept, dropped=dropped, style=style)


def write_sft_jsonl(records: Iterable[dict], path: str | os.PathLike) -> Path:
    """Write records one JSON object per line (ASCII escapes, so a lone surrogate cannot break the file).

    Args:
        records: :func:`sft_records` output (or any JSON-ready dicts).
        path: the ``.jsonl`` file; its folder is created if needed.
    Returns:
        The path written.
    Raises:
        IsADirectoryError: ``path`` is an existing folder. TypeError: a record that is not JSON-ready (the
            message names its index). Nothing is left behind on an error: the records go to
            ``<path>.tmp`` first, which is removed, and ``path`` is only replaced once all are written.
    """
    p = Path(path)
    if p.is_dir():
        raise IsADirectoryError(f"SFT output {p} is a folder, expected a .jsonl file path")
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(p.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as fh:
            for i, r in enumerate(records):
                try:
                    line = json.dumps(r, ensure_ascii=True)
                except (TypeError, ValueError) as e:  # ValueError: a circular reference
                    raise TypeError(f"SFT record {i} is not JSON-ready: {e}") from e
                fh.write(line + "\n")
        tmp.replace(p)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return p


def _kind(value: Any) -> str:
    """The JSON kind of a value: ``string``, ``number`` (int or float), ``boolean``, ``list``, ``object``."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _check_record(rec: Any, where: str) -> None:
    """Raise ValueError (``where``: the file and line, or the record's index) unless ``rec`` is an SFT record:
    a dict whose ``messages`` is a list of dicts with a string ``role`` and a string ``content`` (``None``
    allowed beside ``tool_calls``), ``tool_calls`` a list of ``{"function": {"name": str, "arguments":
    dict | str}}`` dicts, and ``tools`` (when present) a list of dicts or a JSON string (TRL docs,
    "Dataset formats": conversational, tool calling)."""
    if not isinstance(rec, dict) or not isinstance(rec.get("messages"), list):
        raise ValueError(f"{where}: an SFT record needs a 'messages' list")
    for j, m in enumerate(rec["messages"]):
        at = f"{where}: messages[{j}]"
        if not isinstance(m, dict):
            raise ValueError(f"{at} must be a message dict with 'role' and 'content', got {_kind(m)}")
        if not isinstance(m.get("role"), str) or not m["role"]:
            raise ValueError(f"{at}: 'role' must be a non-empty string, got {m.get('role')!r}")
        calls = m.get("tool_calls")
        content = m.get("content")
        if not (isinstance(content, str) or (content is None and calls)):
            raise ValueError(f"{at}: 'content' must be a string, got {_kind(content) if 'content' in m else 'none'}")
        if calls is None:
            continue
        if not isinstance(calls, list):
            raise ValueError(f"{at}: 'tool_calls' must be a list, got {_kind(calls)}")
        for k, c in enumerate(calls):
            cat = f"{at}.tool_calls[{k}]"
            fn = c.get("function") if isinstance(c, dict) else None
            if not isinstance(fn, dict):
                raise ValueError(f"{cat} must be {{'type': 'function', 'function': {{'name': ..., 'arguments': ...}}}}, "
                                 f"got {c!r:.80}")
            if not isinstance(fn.get("name"), str) or not fn["name"]:
                raise ValueError(f"{cat}.function: 'name' must be a non-empty string, got {fn.get('name')!r:.80}")
            if "arguments" in fn and not isinstance(fn["arguments"], (dict, str)):
                raise ValueError(f"{cat}.function: 'arguments' must be an object or a JSON string, "
                                 f"got {_kind(fn['arguments'])}")
    tools = rec.get("tools")
    if tools is not None and not (isinstance(tools, str) or (isinstance(tools, list)
                                                             and all(isinstance(t, dict) for t in tools))):
        raise ValueError(f"{where}: 'tools' must be a list of tool schemas (dicts) or a JSON string")


def _check_columns(records: Sequence[dict], wheres: Sequence[str]) -> None:
    """Raise ValueError naming the field and two records where a top-level field changes JSON kind
    (Arrow stores one type per column; ``None`` fits any)."""
    first: dict[str, tuple[str, str]] = {}
    for rec, where in zip(records, wheres):
        for key, value in rec.items():
            if value is None or key in ("messages", "tools"):
                continue
            kind = _kind(value)
            if key not in first:
                first[key] = (kind, where)
            elif first[key][0] != kind:
                raise ValueError(f"field {key!r} is a {first[key][0]} in {first[key][1]} but a {kind} in {where}: "
                                 f"a dataset column holds one type")


def read_sft_jsonl(path: str | os.PathLike) -> list[dict]:
    """Read a file written by :func:`write_sft_jsonl`.

    Blank lines are skipped; a UTF-8 byte order mark at the start is allowed.

    Raises:
        FileNotFoundError: no such file. IsADirectoryError: ``path`` is a folder. ValueError: a line that is
            not UTF-8, not JSON (or nested too deeply to decode), or not an SFT record (``messages``: a list
            of ``{"role": str, "content": str}`` dicts, ``tool_calls`` of ``{"function": {"name", "arguments"}}``
            dicts), or a top-level field whose JSON type differs between lines; each message names the file
            and line (and the field).
    """
    out, wheres = [], []
    with open(path, "rb") as fh:
        for n, raw in enumerate(fh, 1):
            where = f"{path}, line {n}"
            try:
                line = raw.decode("utf-8-sig" if n == 1 else "utf-8")
            except UnicodeDecodeError as e:
                raise ValueError(f"{where}: not UTF-8 (byte {e.start}: {e.reason})") from None
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not JSON ({e})") from e
            except RecursionError:
                raise ValueError(f"{where}: JSON nested too deeply to decode") from None
            _check_record(rec, where)
            out.append(rec)
            wheres.append(where)
    _check_columns(out, wheres)
    return out


def _arrow_safe(record: dict) -> dict:
    """``record`` with ``tools`` and every tool call's ``arguments`` as JSON strings (module doc)."""
    r = dict(record)
    if "tools" in r and not isinstance(r["tools"], str):
        r["tools"] = json.dumps(r["tools"], ensure_ascii=False)
    msgs = []
    for m in r["messages"]:
        m = dict(m)
        if m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = dict(c["function"])
                if not isinstance(fn.get("arguments"), str):
                    # what the chat template's ``tojson`` prints for the dict (transformers: ensure_ascii=False)
                    fn["arguments"] = json.dumps(fn.get("arguments", {}), ensure_ascii=False)
                calls.append({**c, "function": fn})
            m["tool_calls"] = calls
        msgs.append(m)
    r["messages"] = msgs
    return r


def sft_dataset(records: Iterable[dict] | str | os.PathLike) -> Any:
    """The ``datasets.Dataset`` for ``trl.SFTTrainer(train_dataset=...)`` from records or a JSONL file.

    ``tools`` and tool-call ``arguments`` become JSON strings (module doc: Arrow would otherwise pad every
    call with the other tools' argument names as nulls); TRL's ``SFTTrainer`` parses a string ``tools``
    and chat templates print string arguments as they are.

    Args:
        records: :func:`sft_records` output, or the path of a :func:`write_sft_jsonl` file.
    Returns:
        A ``datasets.Dataset`` with a ``messages`` column and the records' other fields (``None`` in a row
        whose record lacks one: a tagged record mixed with tools records has ``tools`` None).
    Raises:
        ImportError: ``datasets`` is not installed (extra ``trl``). ValueError: no records; a bad file or
            record (as :func:`read_sft_jsonl`; a given record is named by its index); records that Arrow
            cannot hold in one table.
    """
    import datasets
    import pyarrow as pa

    if isinstance(records, (str, os.PathLike)):
        source = str(records)
        records = read_sft_jsonl(records)
    else:
        source = "records"
        records = list(records)
        wheres = [f"SFT record {i}" for i in range(len(records))]
        for rec, where in zip(records, wheres):
            _check_record(rec, where)
        _check_columns(records, wheres)
    rows = [_arrow_safe(r) for r in records]
    if not rows:
        raise ValueError("no SFT records to build a dataset from")
    # ``Dataset.from_list`` takes its columns from the first row: give every row every field (None where absent),
    # so mixing tagged and tools records keeps the tools records' ``tools``
    keys = list(dict.fromkeys(k for r in rows for k in r))
    try:
        return datasets.Dataset.from_list([{k: r.get(k) for k in keys} for r in rows])
    except (pa.ArrowException, TypeError, ValueError, RecursionError) as e:
        raise ValueError(f"{source}: the SFT records do not form one dataset table (a field whose type "
                         f"differs between records?): {type(e).__name__}: {e}") from e
