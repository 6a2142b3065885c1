"""The env as a verifiers environment: ``load_environment(...)`` for prime-rl, ``vf-eval`` and GEPA.

API (``pip install textsql-clarify[verifiers]``, verifiers 0.4, the ``verifiers.v1`` stack):

* :func:`load_environment(dataset="embedded", *, sample_ids=None, simulator="rule",
  reward_preset="binary", max_turns=None, **env_kwargs) <load_environment>` returns a
  :class:`TextSQLClarifyVfEnv` (a ``verifiers.v1.Env``) ready for ``env.serving()`` /
  ``env.run_slot(...)``, the calls ``vf-eval`` makes (``verifiers/v1/cli/eval/runner.py``).
* The plugin the loaders resolve by taskset id :data:`TASKSET_ID` (``"textsql_clarify_verifiers"``):
  :class:`TextSQLClarifyTaskset` (one task per sample), its :class:`TextSQLClarifyTask` (the reward),
  :class:`TextSQLClarifyVfEnv` (the episode loop) and :class:`TextSQLClarifyHarness` (the policy's
  program), all exported through ``__all__`` as verifiers' loaders require.
* CLI: ``python -m textsql_clarify.integrations.verifiers_env [vf-eval flags]`` runs verifiers' own
  ``vf-eval`` on this taskset, e.g. ``-m my-model --client.base-url http://127.0.0.1:8001/v1
  --env.taskset.dataset embedded -n 8 --no-rich``. Unlike plain ``vf-eval`` it pushes nothing to the Prime
  Intellect platform unless given ``--push`` (:func:`vf_eval_args`).

verifiers 0.4 has no ``MultiTurnEnv`` / ``Rubric`` / ``env_response`` any more (those were the 0.1
API): an environment is a taskset of tasks plus an ``Env`` whose ``run(task, agents)`` drives an
agent turn by turn through ``agent.interaction(task)``, the caller playing the user, as verifiers'
own TextArena and OpenEnv environments do (``verifiers/v1/tasksets/textarena``, ``.../openenv``);
rewards are ``@vf.reward`` methods of the task, run when the interaction closes. Here:

1. Each task row carries the sample id and the env's own first chat as its prompt (the system message
   with the worked example, then the question: ``agent_messages(info)``).
2. :meth:`TextSQLClarifyVfEnv.run` resets a ``TextSQLClarify-v0`` env on the row's sample, takes the
   model's first reply, and then each turn hands the reply to the env as its parser reads it
   (``extract_action``: the dropped stop string put back, nothing repaired), steps the env with it, and
   sends the env's next user message back (the simulated user's answer to a clarification, a drift
   utterance, or a format error). The exchange ends when the env terminates or
   truncates, or when verifiers stops the agent (``max_turns``, token limits).
3. The reward, :meth:`TextSQLClarifyTask.episode_reward`, is the env's episode reward: the sum of its
   step rewards under ``reward_preset`` (``docs/rewards.md``), as the TRL adapters count it. The reward
   components (each summed over the episode, ``None`` where never defined), the env's ``scores``, the
   actions and replies stay in ``trace.state`` (a :class:`TextSQLClarifyState`) and in
   ``trace.info["textsql_clarify"]`` (kept in ``traces.jsonl``); the numeric ones are also metrics.

The policy's program, :class:`TextSQLClarifyHarness`, is an in-process chat loop: one chat completion
per segment through the rollout's interception endpoint (so verifiers records every model call), no
tools, nothing installed, and it runs on verifiers' local ``subprocess`` runtime by default. verifiers'
built-in ``null`` harness would do the same in a ``uv``-installed subprocess, which needs the network.

Taskset ids: verifiers' loaders import a plugin by a bare module name (``verifiers/v1/utils/
loaders.py``: ``_import_plugin``; a dotted id fails there), so importing this module also registers it
as the module ``textsql_clarify_verifiers``. Source: verifiers 0.4 ``verifiers.v1`` (``env.py``,
``agent.py`` ``Interaction``, ``task.py``, ``taskset.py``, ``harness.py``), TIDE App. D (one action per
turn, one retry on a malformed action).
"""
from __future__ import annotations

import asyncio
import math
import sys
import threading
from typing import Any, Iterator, Sequence
from .common import add_components, jsonable

try:
    import verifiers.v1 as vf
    from verifiers.v1.runtimes import ProgramResult, SubprocessConfig
except ImportError as e:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "textsql_clarify.integrations.verifiers_env needs verifiers>=0.4: "
        "pip install 'textsql-clarify[verifiers]'") from e
from pydantic import Field

__all__ = ["TASKSET_ID", "load_environment", "TextSQLClarifyTaskset", "TextSQLClarifyTasksetConfig",
           "TextSQLClarifyTask", "TextSQLClarifyData", "TextSQLClarifyState", "TextSQLClarifyVfEnv",
           "TextSQLClarifyVfEnvConfig", "TextSQLClarifyHarness", "TextSQLClarifyHarnessConfig", "main"]

#: the taskset (and harness) id verifiers resolves to this module
TASKSET_ID = "textsql_clarify_verifiers"
sys.modules.setdefault(TASKSET_ID, sys.modules[__name__])

#: one lock per process around env resets and steps: the simulated user and the FB judge are shared by
#: every episode, and steps run in worker threads so the event loop keeps serving other rollouts
_STEP_LOCK = threading.RLock()


# ---------------------------------------------------------------------------------------------- data
class TextSQLClarifyData(vf.TaskData):
    """One task row: the sample id plus the sample's group, subcategory (``unknown`` where the sample's
    source does not say, as in the metrics breakdowns) and database (for reports); ``prompt`` /
    ``system_prompt`` are the env's first chat (``agent_messages``)."""

    sample_id: str
    group: str = ""
    subcategory: str = ""
    db_id: str = ""


class TextSQLClarifyState(vf.State):
    """What the episode measured (``trace.state``; copied to ``trace.info["textsql_clarify"]``).

    Fields: ``episode_reward`` (sum of step rewards), ``step_rewards``, ``reward_components`` (each
    summed over the turns, ``None`` where never defined), ``scores`` (the env's ``info["scores"]`` at
    the end, ``None`` when unfinished), ``finished`` (the env terminated or truncated), ``outcome``
    (the trajectory's), ``decision`` (the env's ``info["decision"]`` of the decision turn, ``{"kind",
    "expected"}``; ``None`` before one), ``actions`` (what the env was sent) and ``replies`` (its user messages
    back).
    """

    episode_reward: float = 0.0
    step_rewards: list[float] = Field(default_factory=list)
    reward_components: dict[str, Any] = Field(default_factory=dict)
    scores: dict[str, Any] | None = None
    finished: bool = False
    outcome: str | None = None
    decision: dict[str, Any] | None = None
    actions: list[str] = Field(default_factory=list)
    replies: list[str] = Field(default_factory=list)

    def record(self, reward: float, comps: dict) -> None:
        """Add one step's reward and reward components (numeric ones summed, nested dicts and ``None`` skipped)."""
        self.step_rewards.append(float(reward))
        self.episode_reward = float(sum(self.step_rewards))
        add_components(self.reward_components, comps)

    def summary(self) -> dict[str, Any]:
        """The JSON-ready record kept in ``trace.info["textsql_clarify"]``."""
        return {"episode_reward": self.episode_reward, "step_rewards": list(self.step_rewards),
                "reward_components": dict(self.reward_components), "scores": jsonable(self.scores),
                "finished": self.finished, "outcome": self.outcome, "decision": jsonable(self.decision),
                "actions": list(self.actions),
                "replies": list(self.replies)}


# ---------------------------------------------------------------------------------------------- task
class TextSQLClarifyTask(vf.Task[TextSQLClarifyData, TextSQLClarifyState]):
    """One sample's task; its reward is the env's episode reward (module doc)."""

    @property
    def key(self) -> str:
        """The sample id (unique in a taskset; stable across runs, unlike the content hash with ``idx``)."""
        return self.data.sample_id

    @vf.reward
    async def episode_reward(self, trace) -> float:
        """The env's episode reward: the sum of its step rewards (``trace.state.episode_reward``)."""
        return float(trace.state.episode_reward)

    @vf.metric
    async def episode(self, trace) -> dict[str, float]:
        """Numeric episode facts as metrics: ``finished``, ``num_actions``, each defined reward component
        (``component/<name>``, summed) and each defined numeric score (``score/<name>``)."""
        st = trace.state
        out = {"finished": float(st.finished), "num_actions": float(len(st.actions))}
        for k, v in st.reward_components.items():
            if v is not None:
                out[f"component/{k}"] = float(v)
        for k, v in (st.scores or {}).items():
            if isinstance(v, (bool, int, float)) and v is not None and math.isfinite(float(v)):
                out[f"score/{k}"] = float(v)
        return out


# ---------------------------------------------------------------------------------------------- taskset
class TextSQLClarifyTasksetConfig(vf.TasksetConfig):
    """Which samples load and how the env is built (``--env.taskset.*`` on the CLI)."""

    id: str = TASKSET_ID
    dataset: str = "embedded"
    """dataset spec for :func:`textsql_clarify.datasets.load_dataset` (``embedded``, ``spider:<root>`` ...)"""
    sample_ids: list[str] | None = None
    """keep only these samples, in this order (``None``: all)"""
    limit: int | None = None
    """keep the first ``limit`` samples of the dataset (before ``sample_ids``, ``split`` and ``exclude_flags``)"""
    exclude_flags: list[str] = Field(default_factory=list)
    """leave out samples carrying any of these load-time flags (e.g. ``["indistinguishable"]``)"""
    split: str | None = None
    """``train`` | ``heldout``: keep one side of a split (``splits.select_samples``); ``None``: all"""
    split_by: str = "db"
    """the split's kind: ``db`` (database-disjoint) or ``group``"""
    heldout_fraction: float = 0.25
    """the split's held-out fraction"""
    split_seed: int = 0
    """the split's seed"""
    simulator: Any = "rule"
    """the simulated user: ``rule`` | ``transformers`` | a dict of its options"""
    reward_preset: Any = "binary"
    """a preset name (``docs/rewards.md``) or ``{component: weight}``"""
    example: bool = True
    """append the worked example to the system prompt (``llm_prompt.agent_messages``)"""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """further :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` options (``max_clarifications``,
    ``category_mode``, ``protocol``, ``timeout_s`` ...)"""


class TextSQLClarifyTaskset(vf.Taskset[TextSQLClarifyTask, TextSQLClarifyTasksetConfig]):
    """One :class:`TextSQLClarifyTask` per sample; also owns the samples, the simulated user and the FB
    judge that every episode's env shares.

    Raises (on first use): DatasetError (dataset), KeyError (an unknown id in ``sample_ids``),
    ValueError (bad env options, an empty selection).
    """

    def __init__(self, config: TextSQLClarifyTasksetConfig) -> None:
        super().__init__(config)
        self._shared: dict[str, Any] | None = None
        self._shared_lock = threading.Lock()

    def shared(self) -> dict[str, Any]:
        """``{"samples", "simulator", "judge", "env_kwargs"}``, built once (thread-safe)."""
        with self._shared_lock:
            if self._shared is None:
                from ..envs.env import episode_samples
                from ..rewards.feedback import default_judge
                from ..simulators import make_simulator

                cfg = self.config
                kw = dict(cfg.env_kwargs)
                for k in ("samples", "dataset", "limit", "simulator", "reward_preset"):
                    if k in kw:
                        raise ValueError(f"taskset env_kwargs must not set {k!r}: it is its own taskset option")
                from .splits import select_samples

                samples = episode_samples(cfg.dataset, None, cfg.limit)
                if cfg.sample_ids is not None:
                    by_id = {s.id: s for s in samples}
                    unknown = [i for i in cfg.sample_ids if i not in by_id]
                    if unknown:
                        raise KeyError(f"sample_ids not in dataset {cfg.dataset!r}: {unknown[:5]}")
                if not samples:
                    raise ValueError(f"no samples selected from dataset {cfg.dataset!r}")
                env_flags = kw.pop("exclude_flags", ())
                flags = [*cfg.exclude_flags, *([env_flags] if isinstance(env_flags, str) else env_flags)]
                samples = select_samples(samples, sample_ids=cfg.sample_ids, split=cfg.split, split_by=cfg.split_by,
                                         heldout_fraction=cfg.heldout_fraction, split_seed=cfg.split_seed,
                                         exclude_flags=flags)
                samples = list({s.id: s for s in samples}.values())
                judge = kw.pop("feedback_judge", None) or default_judge()
                self._shared = {"samples": samples, "simulator": make_simulator(cfg.simulator), "judge": judge,
                                "env_kwargs": {"reward_preset": cfg.reward_preset, **kw}}
            return self._shared

    def make_env(self):
        """A new :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` over the shared samples, user and judge."""
        from ..envs.env import TextSQLClarifyEnv

        sh = self.shared()
        return TextSQLClarifyEnv(samples=sh["samples"], simulator=sh["simulator"], feedback_judge=sh["judge"],
                                 **sh["env_kwargs"])

    def load(self) -> Iterator[TextSQLClarifyTask]:
        """One task per sample: prompt = the env's first chat for it (system message + question)."""
        from ..baselines.llm_prompt import agent_messages

        env = self.make_env()
        for s in self.shared()["samples"]:
            _obs, info = env.reset(options={"sample_id": s.id})
            msgs = agent_messages(info, example=self.config.example)
            system = "\n\n".join(m["content"] for m in msgs if m["role"] == "system")
            chat = [m for m in msgs if m["role"] != "system"]
            prompt: Any = chat[0]["content"] if len(chat) == 1 and chat[0]["role"] == "user" else \
                [vf.UserMessage(content=m["content"]) if m["role"] == "user" else
                 vf.AssistantMessage(content=m["content"]) for m in chat]
            yield TextSQLClarifyTask(
                TextSQLClarifyData(id=s.id, name=s.id, sample_id=s.id, group=s.group,
                                   subcategory=s.subcategory or "unknown",
                                   db_id=s.db_id, prompt=prompt, system_prompt=system or None),
                self.config.task)


# ---------------------------------------------------------------------------------------------- harness
class TextSQLClarifyHarnessConfig(vf.HarnessConfig):
    """The in-process chat harness's knobs (``--env.agent.harness.*``)."""

    id: str = TASKSET_ID
    stop: list[str] | None = None
    """stop strings sent with each request (default: the closing action tags, ``llm_prompt.STOP_STRINGS``;
    ``[]`` sends none)"""
    request_timeout_s: float = Field(600.0, gt=0)
    """seconds one chat completion may take"""


class TextSQLClarifyHarness(vf.Harness[TextSQLClarifyHarnessConfig]):
    """The policy's program: one chat completion per segment, in-process, through the interception.

    A resumed segment replays the whole conversation (verifiers' default ``resume``), so the model
    always sees the full dialogue. Source: verifiers 0.4 ``Harness.launch`` ("a harness may run its
    loop in-process ... as long as every model call goes through endpoint + secret").
    """

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        """Send the segment's conversation to ``endpoint`` once; a failed call is a failed program."""
        from openai import AsyncOpenAI

        from ..baselines.llm_prompt import STOP_STRINGS
        from verifiers.v1.dialects.chat import message_to_wire

        system, prompt = self.resolve_prompt(data)
        messages: list[dict] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            messages.append({"role": "user", "content": prompt})
        elif prompt:
            messages.extend(message_to_wire(m) for m in prompt)
        stop = list(STOP_STRINGS) if self.config.stop is None else list(self.config.stop)
        kwargs: dict[str, Any] = {"stop": stop[:4]} if stop else {}  # OpenAI accepts at most 4
        client = AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0,
                             timeout=self.config.request_timeout_s)
        try:
            await client.chat.completions.create(model=ctx.model, messages=messages, **kwargs)
        except Exception as e:  # noqa: BLE001 - reported as the program's failure, the trace keeps the call
            return ProgramResult(exit_code=1, stdout="", stderr=f"{type(e).__name__}: {e}")
        finally:
            await client.close()
        return ProgramResult(exit_code=0, stdout="", stderr="")


# ---------------------------------------------------------------------------------------------- env
class TextSQLClarifyVfEnvConfig(vf.EnvConfig):
    """The environment's config: the taskset and the one ``agent`` seat (the policy)."""

    agent: vf.AgentConfig = vf.AgentConfig(runtime=SubprocessConfig())
    """the policy's seat; its harness defaults to :class:`TextSQLClarifyHarness` on the local runtime"""


class TextSQLClarifyVfEnv(vf.Env[TextSQLClarifyVfEnvConfig]):
    """The episode loop: our env plays the user of the ``agent`` seat (module doc, step 2)."""

    async def run(self, task, agents) -> None:
        """Play one episode of ``task``; the measured reward and components land in ``trace.state``."""
        from ..baselines.llm_prompt import extract_action

        taskset: TextSQLClarifyTaskset = self.taskset
        env = await asyncio.to_thread(taskset.make_env)
        # the harness sends the closing action tags as stop strings unless configured with none (stop=[])
        harness = getattr(getattr(self.config, "agent", None), "harness", None)
        stops_sent = getattr(harness, "stop", None) is None or bool(harness.stop)

        def locked(fn, *a, **k):
            with _STEP_LOCK:
                return fn(*a, **k)

        await asyncio.to_thread(locked, env.reset, options={"sample_id": task.data.sample_id})
        async with agents.agent.interaction(task) as interaction:
            trace = interaction.trace
            st: TextSQLClarifyState = trace.state
            try:
                segment = await interaction.turn()  # the task is prompted: the model speaks first
                while not segment.terminated:
                    # the server drops the matched stop string (the harness sends the closing action tags):
                    # put it back, then hand the env the completion as its parser reads it
                    action = extract_action(segment.last_reply, dropped_stop=stops_sent,
                                            max_chars=env.max_action_chars)
                    st.actions.append(action)
                    _obs, reward, terminated, truncated, info = await asyncio.to_thread(locked, env.step, action)
                    st.record(reward, info.get("reward_components") or {})
                    if info.get("decision") is not None:  # the decision turn (rewards/decision.py)
                        st.decision = dict(info["decision"])
                    if terminated or truncated:
                        st.finished = True
                        st.scores = dict(info.get("scores") or {})
                        traj = info.get("trajectory")
                        st.outcome = traj.outcome if traj is not None else None
                        break
                    last = info["messages"][-1]
                    if last.get("role") != "user":
                        raise RuntimeError(f"the env's next message is from {last.get('role')!r}, not the user")
                    st.replies.append(last["content"])
                    segment = await interaction.turn(last["content"])
            finally:
                # before the interaction closes: scoring (the task's @vf.reward) runs at close
                trace.info["textsql_clarify"] = st.summary()


# ---------------------------------------------------------------------------------------------- entry
def load_environment(dataset: str = "embedded", *, sample_ids: Sequence[str] | None = None,
                     simulator: Any = "rule", reward_preset: Any = "binary", max_turns: int | None = None,
                     limit: int | None = None, example: bool = True, harness: dict | None = None,
                     runtime: dict | None = None, exclude_flags: Sequence[str] = (), split: str | None = None,
                     split_by: str = "db", heldout_fraction: float = 0.25, split_seed: int = 0,
                     **env_kwargs: Any) -> TextSQLClarifyVfEnv:
    """The verifiers environment over ``TextSQLClarify-v0`` (module doc).

    Args:
        dataset: dataset spec (``embedded``, ``spider:<root>``, a ``.jsonl`` ...).
        sample_ids: keep only these samples (``None``: all). limit: the first ``limit`` samples.
        exclude_flags, split, split_by, heldout_fraction, split_seed: leave out flagged samples, keep one side of
            a split (:func:`~textsql_clarify.integrations.splits.select_samples`; by database by default).
        simulator: the simulated user (``rule`` | ``transformers`` | dict). reward_preset: preset name or weights.
        max_turns: most model turns per episode (verifiers' ``AgentConfig.max_turns``); ``None``: only the
            env's own bound ends an episode.
        example: worked example in the system prompt.
        harness: ``HarnessConfig`` fields for the seat (default :class:`TextSQLClarifyHarness`).
        runtime: ``RuntimeConfig`` fields (default ``{"type": "subprocess"}``: local).
        env_kwargs: further :class:`~textsql_clarify.envs.env.TextSQLClarifyEnv` options (``max_clarifications``,
            ``category_mode`` ...); they must be JSON-like (they travel in the config).
    Returns:
        A :class:`TextSQLClarifyVfEnv`; run it as ``vf-eval`` does: ``async with env.serving():
        await env.run_slot(env.slots(task)[0], vf.ModelContext(model=..., client=vf.EvalClientConfig(...)))``.
    Raises:
        ValueError / pydantic ``ValidationError``: bad options. Dataset errors surface when tasks are loaded.
    """
    if max_turns is not None and (isinstance(max_turns, bool) or not isinstance(max_turns, int) or max_turns < 1):
        raise ValueError(f"max_turns must be an int >= 1 or None, got {max_turns!r}")
    taskset = {"id": TASKSET_ID, "dataset": dataset, "sample_ids": list(sample_ids) if sample_ids is not None else None,
               "limit": limit, "simulator": simulator, "reward_preset": reward_preset, "example": example,
               "exclude_flags": [exclude_flags] if isinstance(exclude_flags, str) else list(exclude_flags or ()),
               "split": split, "split_by": split_by, "heldout_fraction": heldout_fraction, "split_seed": split_seed,
               "env_kwargs": env_kwargs}
    agent: dict[str, Any] = {"max_turns": max_turns, "runtime": runtime or {"type": "subprocess"}}
    if harness is not None:
        agent["harness"] = {"id": TASKSET_ID, **harness}
    config = vf.resolve_env_config({"taskset": taskset, "agent": agent})
    return vf.load_environment(config)


def vf_eval_args(argv: Sequence[str]) -> list[str]:
    """The ``vf-eval`` arguments for this taskset: ``--env.taskset.id`` first, then ``argv``, with ``--no-push``
    added unless ``argv`` says ``--push`` or ``--no-push`` itself.

    verifiers 0.4's ``vf-eval`` uploads every finished run to the Prime Intellect platform unless told
    ``--no-push`` (``EvalConfig.push``, default on: ``verifiers/v1/configs/cli/eval.py``); this entry point
    keeps runs local unless the user asks for ``--push``.

    Args:
        argv: the command line after the program name.
    Returns:
        the list passed to ``verifiers.v1.cli.eval.main.main``.
    """
    args = list(argv)
    asked = any(a in ("--push", "--no-push") or a.startswith("--push=") for a in args)
    return ["--env.taskset.id", TASKSET_ID, *args, *(() if asked else ("--no-push",))]


def main(argv: Sequence[str] | None = None) -> None:
    """``vf-eval`` on this taskset: ``python -m textsql_clarify.integrations.verifiers_env [flags]``; nothing is
    pushed to the platform unless ``--push`` is given (:func:`vf_eval_args`)."""
    from verifiers.v1.cli.eval.main import main as vf_eval

    vf_eval(vf_eval_args(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    # run as a script: point the taskset id at the package module (the one the loaders import), not __main__
    from textsql_clarify.integrations import verifiers_env as _module

    sys.modules[TASKSET_ID] = _module
    _module.main()
