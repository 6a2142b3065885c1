"""``TextSQLClarify-v0``: one episode per sample; the agent answers (SQL), asks (clarify) or refuses (feedback).

Episode protocol (ABISS §5.1, TIDE §4.1, App. D):

1. Optional classification phase (``classification_phase=True`` or ``category_mode="predicted"``):
   one ``<category>`` action naming a subcategory.
2. Interactive phase: up to ``max_clarifications`` clarifications, each answered by the simulated user.
3. Forced final turn once the budget is spent: a clarification is refused (ABISS §5.1); the episode
   ends truncated, scored as no answer.
4. ``sql`` is terminal, except for a sample with a drift event still to come: then the drift
   utterance is injected verbatim after the first SQL (TIDE §4.1) and the episode goes on against the
   post-drift gold SQL. ``feedback`` is terminal.
5. A malformed action gets an error observation and a ``format`` component of -1. Two malformed
   actions in a row end the episode as an abstention (TIDE App. D: one retry).

A sample with a ``dialogue`` (earlier turns, MMSQL / CoSQL) starts with those turns in the history, before
the question: user turns as user messages, system turns as assistant messages (SQL as ``<sql>…</sql>``;
:func:`~textsql_clarify.envs.render.initial_history`). The simulated user gets them too (the sample is in its
request). In the classification phase, a sample whose subcategory is unknown (``None``) scores the
``classification`` component ``None`` (undefined, not 0).

A sample whose gold SQL the source withholds (:attr:`~textsql_clarify.samples.Sample.gold_withheld`,
mini-interact) is clarification-only: the simulated user still answers, but ``ex``, ``ex_strict``, every
detailed component and ``feedback`` are ``None`` on any terminal action (nothing to compare with, and the
question's answerability never ran here), so no action earns a gold-based reward; gold status ``withheld``.

Chain samples under the p-protocol (``protocol="p"``) start with the L1 clarification and its canonical
answer already in the history, and the simulated user's L1 state resolved (TIDE §4.1).

Test-suite EX (``ex_mode="suite"``; Zhong, Yu and Klein 2020): the env builds, once at construction, ``suite_k``
database variants of every database its samples use (:func:`~textsql_clarify.sql.variants.variants_for_samples`,
cached on disk in ``suite_cache_dir``), and every SQL turn also reports ``ex_suite`` and ``ex_strict_suite``: ``ex``
and ``ex_strict`` on the original *and* on every variant (:meth:`~textsql_clarify.rewards.ex_suite.VariantSuite.check`),
``None`` exactly where ``ex`` is, 0 where ``ex`` is 0. ``ex`` itself stays single-instance (comparable to published
numbers); the ``suite`` preset pays ``ex_suite``. Time: the prediction's statements on the original and on the
variants share its one time limit (``timeout_s``): the variants get what the run on the original left, each
statement what is left of that, and a check that runs out of it scores 0 (``execution["suite"]["out_of_time"]``,
with the reason), so a step costs at most what a single-instance step with the prediction at its limit costs.
The default ``ex_mode="single"`` changes nothing.

``info`` on every step: ``reward_components`` (this turn), ``messages`` (chat list for LLM agents),
``action_type``, ``phase``, ``sample_id``, ``error``; at episode end also ``trajectory`` (a
:class:`~textsql_clarify.trajectory.Trajectory`) and ``scores``. On the episode's decision turn (its first
well-formed ``sql`` / ``clarify`` / ``feedback``; :mod:`textsql_clarify.rewards.decision`) also ``decision``:
``{"kind": the action type, "expected": the sample's right type or None}``, with the ``decision`` reward
component; an episode that ends without one (malformed actions) gets ``{"kind": None, ...}`` and ``decision`` 0
(where defined) on its last turn.
"""
from __future__ import annotations

import operator
from typing import Any, Callable, Iterable, Sequence

import gymnasium as gym
import numpy as np

from ..sql.isolated import WorkerPool, check_isolation
from ..sql.private import PrivateSandboxes
from ..sql.sandbox import get_sandbox, release_sandbox
from ..errors import ActionError
from ..rewards.commitments import commitment_set, drift_revision, is_drift
from ..rewards.decision import decision_score, expected_decision
from ..rewards.ex_sql import gold_nondeterminism
from ..rewards.execution import EXOptions, gold_scorability
from ..rewards.ex_suite import VariantSuite
from ..rewards.feedback import FeedbackJudge, default_judge, has_rationale
from ..rewards.presets import resolve_preset, scalar_reward
from ..samples import Sample
from ..simulators import make_simulator
from ..simulators.base import UserReply, UserRequest
from ..taxonomy import SUBCATEGORIES
from ..trajectory import Trajectory, Turn
from . import render
from .actions import MAX_ACTION_CHARS, Action, parse_action, record_text
from ..sql.schema import shared_analysis
from .scoring import DETAIL_KEYS, SUITE_KEYS, score_sql_turn, suite_components
from .infos import resolve_info_format, typed_info
from .spaces import PHASES, UnicodeText, clip_text, observation_space

#: attributes that make up a running episode (what :meth:`TextSQLClarifyEnv.snapshot` saves by reference)
_EPISODE_STATE = (
    "_sample", "_pending", "_done", "_sandbox", "_offered", "_schema", "_schema_ids", "_static_obs", "_system",
    "_phase", "_clar_used", "_invalid_streak", "_turn", "_predicted", "_drift_done", "_gold", "_gold_key",
    "_pre_sql", "_l1_resolved", "_history", "_last_message", "_traj", "_scores", "_np_random",
    "_np_random_seed", "_decision")
_GET_STATE = operator.attrgetter(*_EPISODE_STATE)

#: components present in every step's ``info["reward_components"]``; ``None`` = not applicable this turn.
BASE_COMPONENTS = {"ex": None, "ex_strict": None, "feedback": None, "abstained": None, "format": 0.0,
                   "turn_penalty": 0.0}

#: ``ex_mode`` values: single-instance EX only (default), or test-suite EX beside it.
EX_MODES = ("single", "suite")

#: ``sql_connection`` values: the process's connection per database, shared by every env (default), or the
#: env's own (:mod:`textsql_clarify.sql.private`).
SQL_CONNECTIONS = ("shared", "private")

#: A hook that limits the schema shown: ``(sample, all_table_names) -> table names to show``.
SchemaTablesHook = Callable[[Sample, Sequence[str]], Iterable[str]]


class TextSQLClarifyEnv(gym.Env):
    """Gymnasium env over a list of samples (see module doc for the protocol).

    Args:
        dataset: a dataset spec for :func:`textsql_clarify.datasets.load_dataset` (``"embedded"``,
            ``"spider:<root>"``, a ``.jsonl`` path ...), ignored when ``samples`` is given.
        samples: the samples to draw episodes from.
        limit: keep only the first ``limit`` samples.
        db_root: folder of ``<db_id>/<db_id>.sqlite`` files for dataset records that name no database file.
        validate: run the load-time validation of :mod:`textsql_clarify.datasets.validate` (default ``True``;
            cached per file); ``False`` skips it.
        exclude_flags: leave out samples carrying any of these load-time flags, e.g. ``("indistinguishable",)``
            when training with RL (on such samples the never-asking policy earns as much as asking: the
            metrics leave them out by default, the env serves them unless told).
        simulator: ``"rule"`` | ``"transformers"`` | dict | object with ``respond(batch)``.
        reward_preset: a name in :data:`textsql_clarify.rewards.presets.PRESETS` or ``{component: weight}``.
        max_clarifications: clarification budget (default 3, ABISS §6.1).
        category_mode: ``ground_truth`` | ``predicted`` | ``taxonomy_only`` | ``taxonomy_free`` (ABISS §5.1).
        classification_phase: ask for a ``<category>`` first (forced on in ``predicted`` mode).
        protocol: ``f`` | ``p`` for chain samples (TIDE §4.1).
        schema_tables: optional hook limiting which tables' schema is shown (retrieval experiments).
        detailed_scores: compute cell / column / component / retrieval components on SQL turns (a preset that
            weights one of them, such as ``dense``, needs it: ``ValueError`` otherwise).
        timeout_s: time limit per query, seconds; row_cap: maximum rows fetched per query.
        isolation: ``"in_process"`` (default: the SQL runs in this process) or ``"process"`` (in worker
            processes killed at the deadline, with a memory cap: :mod:`textsql_clarify.sql.isolated`,
            ``docs/platform.md`` "Process isolation"); ``close()`` stops the env's workers.
        worker_pool: a :class:`~textsql_clarify.sql.isolated.WorkerPool` to share (``isolation="process"``
            only; the env does not close a pool it was given). Default: the env's own one-worker pool.
        sql_connection: ``"shared"`` (default: the process's one sandbox per database,
            :func:`~textsql_clarify.sql.sandbox.get_sandbox`, whose statements from all envs run one at a time) or
            ``"private"`` (the env's own read-only connections, one per database, at most
            :data:`~textsql_clarify.sql.private.MAX_PRIVATE_SANDBOXES` open, same limits, own gold cache: a slow
            query holds up only this env, and :meth:`interrupt_sql` can stop it). In-process only.
        feedback_judge: FB judge (default :func:`textsql_clarify.rewards.feedback.default_judge`).
        max_action_chars: longer actions are malformed.
        ex_options: relaxed EX policy options, a mapping of
            :class:`~textsql_clarify.rewards.execution.EXOptions` fields (``docs/metrics.md``): ``limit_ties``
            (default ``True``: rows tied with the last row kept by a gold ``ORDER BY ... LIMIT`` are
            interchangeable), ``round_to_gold_precision`` (default ``True``: a gold ``ROUND(x, d)`` column is
            compared at ``d`` decimals with a prediction column that does not round),
            ``exclude_nondeterministic_gold`` (default ``True``: a gold reading the clock or randomness is
            ``gold_nondeterministic``, left out of EX like an empty gold), ``max_extra_columns`` (3) and
            ``max_extra_columns_single_row`` (1): the column-superset bound, ``constant_columns`` (``True``).
            E.g. ``gym.make("TextSQLClarify-v0", ex_options={"limit_ties": False})``.
        ex_mode: ``"single"`` (default: EX on the sample's database only) or ``"suite"`` (also ``ex_suite`` and
            ``ex_strict_suite``: test-suite EX over ``suite_k`` database variants; module docstring).
        suite_k: database variants per database with ``ex_mode="suite"`` (default
            :data:`~textsql_clarify.sql.variants.DEFAULT_K`, 8); suite_seed: their seed (default 0);
            suite_cache_dir: the folder they are cached in (default
            :func:`~textsql_clarify.sql.variants.default_cache_dir`). Given with ``ex_mode="single"``: ``ValueError``.
        info_format: ``"python"`` (undefined components ``None``), ``"typed"`` (reward components and scores
            as ``float``, ``NaN`` = undefined, so that any Gymnasium vector env can merge the infos) or ``"auto"``
            (default: ``typed`` in a Gymnasium ``AsyncVectorEnv`` worker, else ``python``); see :mod:`.infos`.

    Raises:
        ValueError: bad option values; DatasetError: the dataset cannot be loaded.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(self, dataset: str = "embedded", *, samples: Sequence[Sample] | None = None,
                 limit: int | None = None, simulator: Any = "rule", reward_preset: Any = "binary",
                 max_clarifications: int = 3, category_mode: str = "taxonomy_free",
                 classification_phase: bool = False, protocol: str = "f",
                 schema_tables: SchemaTablesHook | None = None, detailed_scores: bool = True,
                 timeout_s: float = 5.0, row_cap: int = 10_000, feedback_judge: FeedbackJudge | None = None,
                 max_action_chars: int = MAX_ACTION_CHARS, render_mode: str | None = None, ex_options: Any = None,
                 db_root: str | None = None, validate: bool = True, exclude_flags: Sequence[str] = (),
                 isolation: str = "in_process", worker_pool: WorkerPool | None = None,
                 info_format: str = "auto", ex_mode: str = "single", suite_k: int | None = None,
                 suite_seed: int | None = None, suite_cache_dir: Any = None, sql_connection: str = "shared"):
        self.samples: list[Sample] = episode_samples(dataset, samples, limit, db_root=db_root, validate=validate,
                                                     exclude_flags=exclude_flags)
        if not self.samples:
            raise ValueError("the env needs at least one sample")
        self._by_id = {s.id: i for i, s in enumerate(self.samples)}
        if len(self._by_id) != len(self.samples):
            seen: set[str] = set()
            dups = sorted({s.id for s in self.samples if s.id in seen or seen.add(s.id)})
            raise ValueError(f"sample ids must be unique; repeated: {dups[:5]}")
        if not isinstance(max_clarifications, int) or max_clarifications < 0:
            raise ValueError(f"max_clarifications must be an int >= 0, got {max_clarifications!r}")
        if category_mode not in render.CATEGORY_MODES:
            raise ValueError(f"category_mode must be one of {list(render.CATEGORY_MODES)}, got {category_mode!r}")
        if protocol not in ("f", "p"):
            raise ValueError(f"protocol must be 'f' or 'p', got {protocol!r}")
        if render_mode not in (None, "ansi"):
            raise ValueError(f"render_mode must be None or 'ansi', got {render_mode!r}")
        self.render_mode = render_mode
        self.max_clarifications = max_clarifications
        self.category_mode = category_mode
        self.classification_phase = classification_phase or category_mode == "predicted"
        self.protocol = protocol
        self.schema_tables = schema_tables
        self.detailed_scores = detailed_scores
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not 0 < timeout_s < float("inf"):
            raise ValueError(f"timeout_s must be a finite number of seconds > 0, got {timeout_s!r}")
        if isinstance(row_cap, bool) or not isinstance(row_cap, int) or row_cap < 1:
            raise ValueError(f"row_cap must be an int >= 1, got {row_cap!r}")
        bad = [i for i, x in enumerate(self.samples) if not isinstance(x, Sample)]
        if bad:
            raise ValueError(f"samples must be Sample objects; items {bad[:5]} are not")
        if feedback_judge is not None and not callable(getattr(feedback_judge, "judge", None)):
            raise ValueError("feedback_judge needs a judge(sample, feedback, schema_identifiers) method")
        if schema_tables is not None and not callable(schema_tables):
            raise ValueError("schema_tables must be a callable (sample, table_names) -> table names")
        self.timeout_s, self.row_cap = float(timeout_s), int(row_cap)
        self.isolation = check_isolation(isolation)
        if worker_pool is not None and (isolation != "process" or not isinstance(worker_pool, WorkerPool)):
            raise ValueError("worker_pool must be a WorkerPool, given only with isolation='process'")
        self._own_pool = isolation == "process" and worker_pool is None
        #: the worker processes of ``isolation="process"`` (None in-process); started on first use
        self.worker_pool = WorkerPool(size=1, spares=1) if self._own_pool else worker_pool
        if sql_connection not in SQL_CONNECTIONS:
            raise ValueError(f"sql_connection must be one of {list(SQL_CONNECTIONS)}, got {sql_connection!r}")
        if sql_connection == "private" and isolation == "process":
            raise ValueError("sql_connection='private' is for isolation='in_process'; with isolation='process' "
                             "the SQL runs in the env's worker processes")
        self.sql_connection = sql_connection
        #: the env's own connections with ``sql_connection="private"`` (None: the shared ones)
        self._private = PrivateSandboxes() if sql_connection == "private" else None
        self.weights = resolve_preset(reward_preset)
        self._gold_csets: dict[tuple, frozenset | None] = {}  # gold pairs' commitment sets, across episodes
        needs_detail = sorted(k for k, w in self.weights.items() if w and k in DETAIL_KEYS)
        if needs_detail and not detailed_scores:
            # those components are never computed without detail: the preset would silently pay 0 for them
            raise ValueError(f"reward_preset weights {needs_detail}, which only detailed_scores=True computes; "
                             "keep detailed_scores=True or choose a preset without them (e.g. 'binary')")
        self._suite_setup(ex_mode, suite_k, suite_seed, suite_cache_dir, isolation)
        self.simulator = make_simulator(simulator)
        self.feedback_judge = feedback_judge or default_judge()
        use_corpus = getattr(self.feedback_judge, "use_corpus", None)
        if callable(use_corpus):  # the judge leaves out phrases that recur across this dataset's rationales
            use_corpus(self.samples)
        self.ex_options = EXOptions.from_mapping(ex_options)
        self.info_format = info_format
        self._typed_info = resolve_info_format(info_format) == "typed"  # ValueError for an unknown format
        self.max_action_chars = max_action_chars
        # worst case: classification (+retry), (malformed + clarify) x budget, final (+retry), twice with drift
        self.max_turns = 2 * (2 * (max_clarifications + 1) + 2) + 2
        self.observation_space = observation_space(max_clarifications, self.max_turns)
        self.action_space = UnicodeText(max_action_chars)
        self._sample: Sample | None = None
        self._done = True
        self._pending: tuple | None = None  # (action, request, undo state) of a clarification waiting for its reply
        self._last_parse: tuple | None = None  # ((action string, phase), parse result), see _parse
        self._static: dict[str, tuple] = {}

    def _suite_setup(self, ex_mode: Any, suite_k: Any, suite_seed: Any, suite_cache_dir: Any, isolation: str) -> None:
        """Check the test-suite EX options and, with ``ex_mode="suite"``, build (or find cached) the variants of
        every database of the samples (:func:`~textsql_clarify.sql.variants.variants_for_samples`).

        Raises:
            ValueError: an unknown ``ex_mode``; ``suite_k`` not an int >= 1; a suite option with ``"single"``; a
                preset weighting ``ex_suite`` / ``ex_strict_suite`` with ``"single"``; ``isolation="process"``
                with ``"suite"`` (the variants run in this process, which that isolation promises not to do).
            FileNotFoundError, VariantBuildError: a database cannot be read or its variants built (the message
                names the database).
        """
        from ..sql.variants import DEFAULT_K

        if ex_mode not in EX_MODES:
            raise ValueError(f"ex_mode must be one of {list(EX_MODES)}, got {ex_mode!r}")
        self.ex_mode = ex_mode
        self.suite_k = suite_k = DEFAULT_K if suite_k is None else suite_k
        self._suites: dict[str, VariantSuite] = {}
        self.variants: dict[str, list] = {}
        paid = sorted(k for k, w in self.weights.items() if w and k in SUITE_KEYS)
        if ex_mode == "single":
            given = [n for n, v in (("suite_k", suite_k if suite_k != DEFAULT_K else None), ("suite_seed", suite_seed),
                                    ("suite_cache_dir", suite_cache_dir)) if v is not None]
            if given:
                raise ValueError(f"{given} only apply with ex_mode='suite' (got ex_mode='single')")
            if paid:
                raise ValueError(f"reward_preset weights {paid}, which only ex_mode='suite' computes; pass "
                                 "ex_mode='suite' or choose a preset without them (e.g. 'binary')")
            return
        if isinstance(suite_k, bool) or not isinstance(suite_k, int) or suite_k < 1:
            raise ValueError(f"suite_k must be an int >= 1, got {suite_k!r}")
        if suite_seed is not None and (isinstance(suite_seed, bool) or not isinstance(suite_seed, int)):
            raise ValueError(f"suite_seed must be an int, got {suite_seed!r}")
        if isolation == "process":
            raise ValueError("ex_mode='suite' runs the database variants in this process; it cannot be combined "
                             "with isolation='process' (use isolation='in_process')")
        self.variants = _variants_for(self.samples, suite_k, suite_seed or 0, suite_cache_dir)

    # ------------------------------------------------------------------ public helpers
    @property
    def current_sample(self) -> Sample | None:
        """The sample of the running episode (for privileged agents such as the oracle)."""
        return self._sample

    def sample_index(self, sample_id: str) -> int:
        """Index of a sample id. Raises KeyError (listing a few valid ids) when unknown."""
        try:
            return self._by_id[sample_id]
        except KeyError:
            raise KeyError(f"unknown sample_id {sample_id!r}; e.g. {list(self._by_id)[:5]}") from None

    # ------------------------------------------------------------------ gym API
    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Start an episode.

        ``options``: ``{"sample_id": id}`` or ``{"index": i}`` choose the sample; otherwise it is drawn
        from the env's seeded generator (the same seed gives the same sample).

        All or nothing: the new sample's sandbox, schema and prompts are built before anything
        changes, and a reset that raises leaves the env as it was: the episode that was running (if any)
        goes on, with its sample, dialogue and RNG state; the RNG is neither reseeded nor advanced.

        Raises:
            KeyError: unknown ``sample_id``; IndexError: ``index`` out of range; ValueError: bad options.
            FileNotFoundError: the sample's database file is missing; DatabaseOpenError: it is not a
                readable SQLite database; or whatever a ``schema_tables`` hook raises. These carry a note
                naming the sample (``docs/platform.md``, "Action strings and episode state").
        """
        snap = self.snapshot(rng=False)
        gen = self._np_random
        rng = (gen, self._np_random_seed, gen.bit_generator.state if gen is not None else None)
        try:
            return self._start_episode(seed, options)
        except BaseException:
            self.restore(snap)
            self._np_random, self._np_random_seed = rng[0], rng[1]
            if gen is not None:
                gen.bit_generator.state = rng[2]
            raise

    def _start_episode(self, seed: int | None, options: dict | None):
        """The body of :meth:`reset`, which undoes it when it raises."""
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = set(options) - {"sample_id", "index"}
        if unknown:
            raise ValueError(f"unknown reset option(s) {sorted(unknown)}; use 'sample_id' or 'index'")
        if "sample_id" in options and "index" in options:
            raise ValueError("give either 'sample_id' or 'index' in reset options, not both")
        if "sample_id" in options:
            if not isinstance(options["sample_id"], str):
                raise ValueError(f"sample_id must be a string, got {type(options['sample_id']).__name__}")
            idx = self.sample_index(options["sample_id"])
        elif "index" in options:
            idx = options["index"]
            if isinstance(idx, bool) or not isinstance(idx, (int, np.integer)):
                raise ValueError(f"index must be an int, got {idx!r}")
            idx = int(idx)
            if not 0 <= idx < len(self.samples):
                raise IndexError(f"index {idx} out of range 0..{len(self.samples) - 1}")
        else:
            idx = int(self.np_random.integers(len(self.samples)))
        s = self.samples[idx]
        static = self._static.get(s.id)
        if static is None:
            try:
                static = self._build_static(s)  # first, so that a missing or corrupt database changes nothing
            except Exception as e:
                e.add_note(f"reset(): sample {s.id!r} (index {idx}) cannot start; the env is left as it was")
                raise
            self._static[s.id] = static
            self._prepare_judge(s, static)
        self._sample = s
        self._pending = None
        self._sandbox, self._offered, self._schema, self._schema_ids, self._static_obs, self._system = static
        self._phase = "classification" if self.classification_phase else (
            "interactive" if self.max_clarifications > 0 else "final")
        self._clar_used = 0
        self._invalid_streak = 0
        self._turn = 0
        self._predicted: str | None = None
        self._drift_done = False
        self._gold = s.gold_sql
        self._gold_key = s.id
        self._pre_sql: str | None = None
        self._cset_memo: dict[tuple[str, bool], frozenset | None] = {}  # commitment sets of this episode
        self._l1_resolved = False
        self._decision: str | None = None  # the episode's first sql / clarify / feedback (rewards/decision.py)
        self._done = False
        # the sample's earlier turns (MMSQL / CoSQL follow-ups) come first, then the question
        self._history: list[tuple[str, str]] = render.initial_history(s)
        if self.protocol == "p" and s.chain is not None:
            self._history += [("assistant", f"<clarify>{s.chain.l1.question}</clarify>"), ("user", s.chain.l1.answer)]
            self._l1_resolved = True
        self._last_message = (render.CLASSIFY_INSTRUCTIONS + ", ".join(SUBCATEGORIES)) if self._phase == "classification" else ""
        self._traj = Trajectory(
            sample_id=s.id, db_id=s.db_id, group=s.group, subcategory=s.subcategory, difficulty=s.difficulty,
            premise_flaw=s.premise_flaw, has_chain=s.chain is not None, has_drift=s.drift is not None,
            drift_subtype=s.drift.subtype if s.drift else None,
            protocol=self.protocol if s.chain is not None else "f",  # p only changes chain samples
            category_mode=self.category_mode, seed=seed,
            gold_status="withheld" if s.gold_withheld else "none" if s.gold_sql is None else "ok",
            flags=list(s.flags), question=s.question)
        self._scores: dict[str, Any] = {"ex": None, "ex_strict": None, "ex_post": None, "fb": None, "abstained": None,
                                        "drift_recognised": None if s.drift is None else False,
                                        "drift_revised": None if s.drift is None else False,
                                        "decision": None}
        if self.ex_mode == "suite":
            self._scores.update(dict.fromkeys(SUITE_KEYS))
        return self._obs(), self._info({}, None, None)

    def _prepare_judge(self, s: Sample, static: tuple) -> None:
        """Let the FB judge compute what judging a feedback on ``s`` needs beyond the feedback (its
        ``prepare(sample, schema_identifiers)``, where it has one: the hidden knowledge's claims and
        embedding), once per sample (``static``: from :meth:`_build_static`), so that the
        judgement embeds only the feedback."""
        prepare = getattr(self.feedback_judge, "prepare", None)
        if callable(prepare) and s.group == "unanswerable" and not s.gold_withheld and s.hidden_knowledge.strip():
            ids = static[3]  # the schema identifiers, as _feedback passes them
            try:
                prepare(s, ids)
            except Exception:  # noqa: BLE001 - a head start only: the judgement itself computes (and raises) it
                pass

    def _build_static(self, s: Sample) -> tuple:
        """Per-sample content that does not change during an episode, computed once per env."""
        if self._own_pool and self.worker_pool.closed:  # a reset after close(): new workers, as sandboxes reopen
            self.worker_pool = WorkerPool(size=1, spares=1)
        if self._private is not None:
            sandbox = self._private_sandbox(s.db_path)
        elif self.worker_pool is None:
            sandbox = get_sandbox(s.db_path, timeout_s=self.timeout_s, row_cap=self.row_cap)
        else:
            sandbox = self.worker_pool.sandbox(s.db_path, timeout_s=self.timeout_s, row_cap=self.row_cap)
        if self.schema_tables is not None:
            offered = sorted({t.lower() for t in self.schema_tables(s, list(render.table_names(s.db_path)))})
            schema = render.schema_text(s.db_path, offered)
        else:
            offered, schema = None, render.schema_text(s.db_path)
        ids = frozenset([t.lower() for t in sandbox.schema] + [c.lower() for cols in sandbox.schema.values() for c in cols])
        ctx = render.context_text("taxonomy_only" if self.category_mode == "predicted" else self.category_mode, s)
        obs = {"question": clip_text(s.question, "question"), "evidence": clip_text(render.evidence_text(s), "evidence"),
               "schema": clip_text(schema, "schema"), "context": clip_text(ctx, "context")}
        system = render.system_message(schema, ctx, self.classification_phase)
        if len(self._static) > 4096:
            self._static.clear()
        return sandbox, offered, schema, ids, obs, system

    def _private_sandbox(self, db_path: str):
        """This env's own sandbox for ``db_path`` (``sql_connection="private"``); what the env kept of the
        sandboxes closed to make room (their per-sample entries and test-suite variants) is dropped, never
        the running episode's."""
        sandbox, closed = self._private.get(db_path, keep=self.__dict__.get("_sandbox"), timeout_s=self.timeout_s,
                                            row_cap=self.row_cap)
        if closed:
            self._static = {k: v for k, v in self._static.items() if not any(v[0] is c for c in closed)}
            for db in [db for db, suite in self._suites.items() if any(suite.original is c for c in closed)]:
                self._suites.pop(db).close()
        return sandbox

    def interrupt_sql(self) -> bool:
        """Abort the SQL statements this env runs now, from another thread (``sqlite3_interrupt``): they end with
        error kind ``runtime`` ("interrupted"; an interrupted gold is not cached). Only the env's own connections
        are touched, so only with ``sql_connection="private"`` (a shared connection may be running another env's
        statement); a no-op when idle. Returns whether the env has connections of its own to interrupt.
        Source: SQLite docs, ``sqlite3_interrupt``."""
        if self._private is None:
            return False
        self._private.interrupt()
        for suite in list(self._suites.values()):  # the private variants of test-suite EX
            for variant in suite.variants:
                variant.interrupt()
        return True

    def step(self, action: Any):
        """Apply one action string. Returns ``(obs, reward, terminated, truncated, info)``.

        A clarification is answered by ``self.simulator.respond([request])`` (a batch of one); the
        vector env (:mod:`.vector`) instead answers the clarifications of all its sub-envs in one
        batch through :meth:`begin_step` / :meth:`complete_step`.

        Raises:
            RuntimeError: ``step`` called before ``reset``, after the episode ended, or while a
                clarification from :meth:`begin_step` still waits for :meth:`complete_step`.
        """
        out = self.begin_step(action)
        if isinstance(out, UserRequest):
            out = answer_clarifications(self.simulator, [(self, out)])[0]
        return (*out[:4], typed_info(out[4])) if self._typed_info else out

    def begin_step(self, action: Any):
        """First half of :meth:`step`: apply ``action`` up to the point where the simulated user must answer.

        Returns:
            ``(obs, reward, terminated, truncated, info)`` when the step needs no user reply (SQL,
            feedback, classification, a malformed or refused action); otherwise the
            :class:`~textsql_clarify.simulators.base.UserRequest` of the clarification, which must be
            answered with :meth:`complete_step` before anything else is done with this env.
        Raises:
            RuntimeError: as :meth:`step`.
        """
        if self._pending is not None:
            raise RuntimeError("a clarification is waiting for the user's reply: call complete_step(reply) first")
        if self._done or self._sample is None:
            raise RuntimeError("call reset() before step(): the episode has ended or not started")
        snap = self.snapshot(rng=False)
        try:
            self._turn += 1
            act, error = self._parse(action)
            if error is not None:
                return self._malformed(action, act, error)
            self._invalid_streak = 0
            self._history.append(("assistant", act.render()))
            if act.type == "classify":
                return self._classify(act)
            if act.type == "clarify":
                # cancel_clarification restores ``snap`` if the user never answers
                self._pending = (act, self._clarify_request(act), snap)
                return self._pending[1]
            if act.type == "feedback":
                return self._feedback(act)
            return self._sql(act)
        except BaseException:
            self.restore(snap)  # a failing FB judge or scorer leaves the episode as it was
            raise

    def _parse(self, action: Any) -> tuple[Action | None, str | None]:
        """``(action, refusal reason or None)``; no episode state changes. The last string parsed is
        remembered with the phase it was judged in, so :meth:`needs_reply` then :meth:`begin_step` parse once."""
        key = (action, self._phase) if isinstance(action, str) else None
        if key is not None and self._last_parse is not None and self._last_parse[0] == key:
            return self._last_parse[1]
        try:
            act = parse_action(action, max_chars=self.max_action_chars)
            result = act, self._refusal(act)
        except ActionError as e:
            result = None, e.reason
        if key is not None:
            self._last_parse = (key, result)
        return result

    def needs_reply(self, action: Any) -> bool:
        """True when ``begin_step(action)`` would return a clarification for the user (a well-formed
        ``clarify`` action in a phase that allows it); changes nothing. The vector env asks this first, so
        a failed ``respond`` leaves every other sub-env untouched."""
        if self._pending is not None or self._done or self._sample is None:
            return False
        act, error = self._parse(action)
        return error is None and act.type == "clarify"

    def cancel_clarification(self) -> None:
        """Undo the ``begin_step`` of the clarification waiting for its reply, as if it had never been sent,
        so the env takes actions again; used when the simulated user fails. Nothing happens when no
        clarification is waiting."""
        if self._pending is not None:
            self.restore(self._pending[2])

    def snapshot(self, rng: bool = True) -> tuple:
        """The episode state (turn, phase, dialogue, trajectory, scores, pending reply, RNG state), for
        :meth:`restore`. Cheap (a few microseconds): references to the episode's objects, which ``reset``
        replaces, plus the lengths and fields a step changes in place.

        The vector env takes one per sub-env before a step, so a step that fails anywhere changes no
        sub-env. ``rng=False`` leaves out the RNG state (a step without a reset does not draw from it).
        Returns an opaque tuple."""
        if self._sample is None:
            return (None,)
        refs = _GET_STATE(self)
        t = self._traj
        gen = self.__dict__.get("_np_random") if rng else None
        return (refs, len(self._history), dict(self._scores), len(t.turns), t.outcome, t.predicted_category,
                t.gold_status, t.scores, gen.bit_generator.state if gen is not None else None)  # a fresh dict

    def restore(self, state: tuple) -> None:
        """Put back the episode state of :meth:`snapshot` (the RNG included when it was saved)."""
        if state[0] is None:
            self._sample, self._pending, self._done = None, None, True
            return
        refs, n_history, scores, n_turns, outcome, predicted, gold_status, traj_scores, rng_state = state
        for key, value in zip(_EPISODE_STATE, refs):
            setattr(self, key, value)
        del self._history[n_history:]
        self._scores.clear()
        self._scores.update(scores)
        t = self._traj
        del t.turns[n_turns:]
        t.outcome, t.predicted_category, t.gold_status, t.scores = outcome, predicted, gold_status, traj_scores
        if rng_state is not None and self.__dict__.get("_np_random") is not None:
            self._np_random.bit_generator.state = rng_state

    def render(self) -> str | None:
        """ANSI render: the dialogue so far as text (``render_mode="ansi"``)."""
        if self.render_mode != "ansi":
            return None
        return render.history_text(self._history)

    def close(self) -> None:
        """Release what the env opened: its hold on the shared sandboxes (each one's connection closes
        when its last holder lets it go, ``sql.sandbox.release_sandbox``), its own connections with
        ``sql_connection="private"``, and its per-sample cache; with ``isolation="process"`` the env's own
        worker pool is shut down (its processes exit). Safe to call twice; a later ``reset`` opens what it
        needs again."""
        held = [static[0] for static in self.__dict__.get("_static", {}).values()]
        held.append(self.__dict__.get("_sandbox"))
        for sandbox in held:
            if sandbox is not None:
                release_sandbox(sandbox)
        self._static = {}  # a new dict: never clear one another env may share
        self._sandbox = None
        for suite in self.__dict__.get("_suites", {}).values():
            suite.close()  # its private variant connections; a later step opens them again
        if "_suites" in self.__dict__:
            self._suites = {}
        if getattr(self, "_own_pool", False):
            self.worker_pool.close()
            self._static = {}  # its sandboxes belonged to the closed pool
        if self.__dict__.get("_private") is not None:
            self._private.close()  # the env's own connections; a later reset opens them again

    # ------------------------------------------------------------------ turn handlers
    def _refusal(self, act: Action) -> str | None:
        if self._phase == "classification" and act.type != "classify":
            return "this is the classification phase: reply <category>SUBCATEGORY</category>"
        if self._phase != "classification" and act.type == "classify":
            return "classification is only allowed in the classification phase"
        if act.type == "clarify" and self._phase == "final":
            return "no clarifications left: this is the final turn, answer with <sql> or <feedback>"
        return None

    def _malformed(self, raw: Any, act: Action | None, error: str):
        self._invalid_streak += 1
        comps = {"format": -1.0}
        turn = Turn(index=self._turn - 1, phase=self._phase, action_type="invalid", content=record_text(raw),
                    error=error, reward_components=comps)
        reward = scalar_reward(comps, self.weights)
        turn.reward = reward
        self._traj.turns.append(turn)
        final_refused = act is not None and act.type == "clarify" and self._phase == "final"
        if self._invalid_streak >= 2 or final_refused or self._turn >= self.max_turns:
            self._traj.outcome = "truncated" if final_refused else "abstain"
            self._last_message = (f"{error}. The episode ends without an answer." if final_refused else
                                  f"{error}. Second malformed action in a row: the episode ends as an abstention.")
            return self._finish(reward, comps, terminated=not final_refused, truncated=final_refused, error=error)
        self._last_message = f"Invalid action: {error}. Try again (one retry)."
        return self._obs(), reward, False, False, self._info(comps, "invalid", error)

    def _classify(self, act: Action):
        label = act.content.strip().lower().replace(" ", "_")
        self._predicted = label
        self._traj.predicted_category = label
        # undefined (not 0) when the source does not say which subcategory the sample is
        truth = self._sample.subcategory
        comps = {"classification": None if truth is None else (1.0 if label == truth else 0.0)}
        reward = scalar_reward(comps, self.weights)
        self._traj.turns.append(Turn(self._turn - 1, "classification", "classify", act.content, reward=reward,
                                     reward_components=comps))
        self._phase = "interactive" if self.max_clarifications > 0 else "final"
        # the system prompt loses the classification instructions and, in predicted mode, shows the label
        ctx = self._context() if self.category_mode == "predicted" else self._static_obs["context"]
        self._system = render.system_message(self._schema, ctx, False)
        self._last_message = "Category recorded. Now answer the question."
        return self._obs(), reward, False, False, self._info(comps, "classify", None)

    def complete_step(self, reply: UserReply):
        """Second half of :meth:`step` for a clarification: record the user's ``reply`` and return
        ``(obs, reward, terminated, truncated, info)``.

        Args:
            reply: the simulator's :class:`~textsql_clarify.simulators.base.UserReply` to the request
                that :meth:`begin_step` returned.
        Raises:
            RuntimeError: no clarification is waiting (``begin_step`` returned a step result, or
                ``complete_step`` was already called).
            TypeError: ``reply`` is not a reply (see :func:`reply_problem`); the env is unchanged then.
        """
        if self._pending is None:
            raise RuntimeError("complete_step called but no clarification is waiting for a reply")
        problem = reply_problem(reply)
        if problem:
            raise TypeError(f"complete_step needs a UserReply: {problem}")
        act, _req, snap = self._pending
        self._pending = None
        try:
            return self._clarify(act, reply)
        except BaseException:
            self.restore(snap)  # as if the clarification had never been sent
            raise

    def _clarify_request(self, act: Action) -> UserRequest:
        return UserRequest(sample=self._sample, clarification=act.content, history=tuple(self._history[:-1]),
                           schema_identifiers=self._schema_ids, l1_resolved=self._l1_resolved, gold_sql=self._gold)

    def _clarify(self, act: Action, reply: UserReply):
        s = self._sample
        if s.chain is not None and reply.label == "relevant" and reply.layer == "L1":
            self._l1_resolved = True
        self._clar_used += 1
        comps = self._decide("clarify", {"turn_penalty": -1.0})
        reward = scalar_reward(comps, self.weights)
        phase = self._phase
        self._traj.turns.append(Turn(self._turn - 1, phase, "clarify", act.content, user_reply=reply.to_dict(),
                                     reward=reward, reward_components=comps))
        self._history.append(("user", reply.text))
        self._last_message = reply.text
        if self._clar_used >= self.max_clarifications:
            self._phase = "final"
        if self._turn >= self.max_turns:
            self._traj.outcome = "truncated"
            return self._finish(reward, comps, terminated=False, truncated=True, error=None)
        return self._obs(), reward, False, False, self._info(comps, "clarify", None)

    def _feedback(self, act: Action):
        s = self._sample
        fb = abstained = None
        if s.gold_withheld:
            pass  # FB undefined: the gold never ran here, so whether the question is answerable is unchecked
        elif s.group != "unanswerable":
            fb = 0.0  # feedback on a solvable question is wrong (ABISS §5.3)
        elif has_rationale(s):
            fb = 1.0 if self.feedback_judge.judge(s, act.content, self._schema_ids) else 0.0
        else:
            # no stated rationale: nothing to compare, FB is undefined; the judge's no-rationale rule says
            # whether this is an accepted abstention (not SQL, blames no existing table or column)
            abstained = 1.0 if self.feedback_judge.judge(s, act.content, self._schema_ids) else 0.0
        comps = self._decide("feedback", {"feedback": fb, "abstained": abstained})
        self._scores["fb"] = fb
        self._scores["abstained"] = abstained
        reward = scalar_reward(comps, self.weights)
        self._traj.turns.append(Turn(self._turn - 1, self._phase, "feedback", act.content, reward=reward,
                                     reward_components=comps))
        self._traj.outcome = "feedback"
        self._last_message = ""
        return self._finish(reward, comps, terminated=True, truncated=False, error=None)

    def _sql(self, act: Action):
        # one analysis scope per step: the scorers and the drift commitments share the prediction's parse, and a
        # prediction seen again on this database reuses its kept analysis (sql.schema.shared_analysis)
        if not (self.detailed_scores or self._drift_done):
            return self._sql_scored(act)
        box = self._sandbox
        with shared_analysis(act.content, box.db_path, box.schema):
            return self._sql_scored(act)

    def _sql_scored(self, act: Action):
        s = self._sample
        post = self._drift_done
        # the other readings of an ambiguous question, before any drift: an answer that matches two different
        # readings at once is a hedge, not a choice (scoring.score_sql_turn, ``other_readings``)
        others = () if post else tuple((f"{s.id}#reading{k}", it.gold_sql) for k, it in enumerate(s.interpretations))
        # after a drift, an answer that still carries what the user retracted is not the post-drift answer
        retracted = (s.id, s.gold_sql) if post and s.gold_sql else None
        res = score_sql_turn(act.content, self._gold, self._sandbox, gold_key=self._gold_key,
                             detailed=self.detailed_scores, offered_tables=self._offered, ex_options=self.ex_options,
                             gold_withheld=s.gold_withheld, other_readings=others, retracted_gold=retracted)
        comps = self._decide("sql", dict(res.components))
        turn = Turn(self._turn - 1, self._phase, "sql", act.content, execution=res.execution)
        if self.ex_mode == "suite":
            extra, detail = suite_components(act.content, self._gold, res, self._suite(), gold_key=self._gold_key,
                                             ex_options=self.ex_options, timeout_s=self.timeout_s)
            comps.update(extra)
            if detail is not None:
                turn.execution = {**res.execution, "suite": detail}
        if post:
            recognised = self._recognised(self._pre_sql, act.content)
            turn.commitment_drift = recognised
            # ``drift`` pays for the revision, and only when the revised SQL is also correct (docs/metrics.md)
            revision = self._revision(s, self._pre_sql, act.content)
            revised = None if revision is None else revision.revised
            comps["drift_revised"] = None if revised is None else float(revised)
            if (revision is not None and comps.get("sql_partial") is not None and comps.get("ex_strict") != 1
                    and (revision.surviving or revision.collateral)):
                # dense credit after a drift only for SQL that let go of what the user retracted and of nothing
                # else: the pre-drift SQL resubmitted or re-spelled, or a blanket edit such as dropping the
                # whole WHERE, is no near-miss of the new request (docs/rewards.md, "The dense preset")
                comps["sql_partial"] = 0.0
            comps["drift"] = (None if revised is None or comps["ex"] is None
                              else float(revised and comps["ex"] == 1))
            self._scores["drift_recognised"] = recognised
            self._scores["drift_revised"] = revised
            self._scores["ex_post"] = comps["ex"]
        else:
            self._traj.gold_status = res.gold_status
            self._scores["ex"] = comps["ex"]
            self._scores["ex_strict"] = comps["ex_strict"]
            if self.ex_mode == "suite":
                for k in SUITE_KEYS:
                    self._scores[k] = comps[k]
            for k, v in res.flags.items():
                self._scores[k] = v
            if self.detailed_scores:
                # episode-level article scores describe the same SQL as ``ex`` (the first one); the
                # post-drift turn keeps its own in ``turn.reward_components``
                for k in DETAIL_KEYS:
                    self._scores[k] = comps.get(k)
        turn.reward_components = comps
        turn.reward = scalar_reward(comps, self.weights)
        self._traj.turns.append(turn)
        if s.drift is not None and not self._drift_done:
            # TIDE §4.1: the drift turn is injected verbatim after the agent's first SQL
            self._drift_done = True
            self._pre_sql = act.content
            self._gold = s.drift.post_gold_sql
            self._gold_key = s.id + "#post"
            turn.drift_utterance = s.drift.utterance
            self._history.append(("user", s.drift.utterance))
            self._last_message = s.drift.utterance
            if self._phase != "final":
                self._phase = "post_drift"
            return self._obs(), turn.reward, False, False, self._info(comps, "sql", None)
        self._traj.outcome = "sql"
        self._last_message = ""
        return self._finish(turn.reward, comps, terminated=True, truncated=False, error=None)

    def _suite(self) -> VariantSuite:
        """The :class:`~textsql_clarify.rewards.ex_suite.VariantSuite` of the episode's database: its variants as
        private budgeted sandboxes (opened on the first SQL turn over that database, again after ``close``)."""
        db = self._sample.db_path
        suite = self._suites.get(db)
        if suite is None or suite.closed:
            suite = self._suites[db] = VariantSuite(self._sandbox, self.variants[db], timeout_s=self.timeout_s,
                                                    row_cap=self.row_cap, private=True)
        return suite

    def _commitments(self, sql: str, with_schema: bool, *, gold: bool = False) -> frozenset | None:
        """``commitment_set(sql)`` (with the database schema or without), ``None`` when it cannot be analysed;
        remembered for the episode (the agent's queries) or for the env's life (``gold``: the gold pair, keyed
        by database too), so that a post-drift step analyses each query once per form (a query at the analysis
        caps costs about 0.4 s per analysis)."""
        memo = self._gold_csets if gold else self._cset_memo
        key = (self._sandbox.db_path, sql, with_schema) if gold else (sql, with_schema)
        if key not in memo:
            if gold and len(memo) >= 4096:
                memo.clear()
            try:
                memo[key] = commitment_set(sql, self._sandbox.schema if with_schema else None)
            except Exception:  # noqa: BLE001 - an unanalysable query commits to nothing recognisable
                memo[key] = None
        return memo[key]

    def _recognised(self, pre_sql: str | None, post_sql: str) -> bool:
        """TIDE's Rec(τ) (the DRR metric): S(y_pre) ⊄ S(y_post); ``False`` when either cannot be analysed."""
        if pre_sql is None:
            return False
        pre, post = self._commitments(pre_sql, False), self._commitments(post_sql, False)
        return pre is not None and post is not None and is_drift(pre, post)

    def _revision(self, s: Sample, pre_sql: str | None, post_sql: str):
        """How the agent's post-drift SQL revised what the drift retracted (a ``DriftRevision``, read with the
        database schema); ``None`` when the gold pair is not an analysable drift."""
        g_pre = self._commitments(s.gold_sql, True, gold=True)
        g_post = self._commitments(s.drift.post_gold_sql, True, gold=True)
        if g_pre is None or g_post is None:
            return None
        y_pre = None if pre_sql is None else (self._commitments(pre_sql, True) or frozenset())
        y_post = self._commitments(post_sql, True) or frozenset()
        try:
            return drift_revision(g_pre, g_post, y_pre, y_post, subtype=s.drift.subtype)
        except Exception:  # noqa: BLE001 - a gold pair that is not a TIDE drift leaves the revision undefined
            return None

    def _nondeterminism(self, gold_sql: str) -> str | None:
        """What the gold reads of the clock or randomness, when EX leaves such golds out
        (``exclude_nondeterministic_gold``); else ``None``."""
        return gold_nondeterminism(gold_sql) if self.ex_options.exclude_nondeterministic_gold else None

    # ------------------------------------------------------------------ episode end, obs, info
    def _finish(self, reward: float, comps: dict, *, terminated: bool, truncated: bool, error: str | None):
        s = self._sample
        self._done = True
        sc = self._scores
        solvable = s.gold_sql is not None
        # outcome-level conventions (ABISS §5.3): a solvable sample without a correct final SQL scores EX 0,
        # unless its gold is invalid/empty (None, counted apart); FB 0 for an unanswerable sample without feedback.
        if solvable and sc["ex"] is None and not any(t.action_type == "sql" for t in self._traj.turns):
            # no SQL at all: EX 0, unless the gold itself cannot be scored (invalid / ceiling: None)
            gold = self._sandbox.execute_gold(s.id, s.gold_sql)
            self._traj.gold_status = gold_scorability(gold, self._nondeterminism(s.gold_sql))
            if self._traj.gold_status == "ok":
                sc["ex"] = sc["ex_strict"] = 0.0
                if self.ex_mode == "suite":
                    sc.update(dict.fromkeys(SUITE_KEYS, 0.0))
        if s.drift is not None and sc["ex_post"] is None and self._traj.outcome != "sql":
            # the post-drift request was never answered (no SQL after the drift, or no SQL at all): 0,
            # so DEA / DRA count the episode (TIDE Table 2) instead of silently dropping it; a post-drift
            # gold that fails or returns nothing stays None (invalid / ceiling), as for ``ex``
            post_gold = self._sandbox.execute_gold(s.id + "#post", s.drift.post_gold_sql)
            if gold_scorability(post_gold, self._nondeterminism(s.drift.post_gold_sql)) == "ok":
                sc["ex_post"] = 0.0
        if s.group == "unanswerable" and not has_rationale(s):
            # FB undefined without a rationale; an episode that ended without an accepted abstention
            # (SQL, out of turns, malformed twice) did not abstain (docs/rewards.md "abstained")
            if sc.get("abstained") is None:
                sc["abstained"] = 0.0
                comps = {**comps, "abstained": 0.0}
        elif s.group == "unanswerable" and sc["fb"] is None:
            sc["fb"] = 0.0
        if self._decision is None and self._traj.turns:
            # the episode ended without an answer, a question or a refusal (malformed actions): the wrong decision,
            # scored on its last turn (rewards/decision.py)
            d = decision_score(None, s)
            comps = {**comps, "decision": d}  # info["decision"] then says that none was made
            if d is not None:
                sc["decision"] = d
                last = self._traj.turns[-1]
                last.reward_components = {**last.reward_components, "decision": d}
                reward += self.weights.get("decision", 0.0) * d
                last.reward = reward
        self._traj.scores = dict(sc)
        info = self._info(comps, self._traj.turns[-1].action_type if self._traj.turns else None, error)
        info["trajectory"] = self._traj
        info["scores"] = dict(sc)
        return self._obs(), reward, terminated, truncated, info

    def _context(self) -> str:
        return render.context_text(self.category_mode, self._sample, self._predicted)

    def _obs(self) -> dict:
        obs = dict(self._static_obs)
        if self.category_mode == "predicted" and self._predicted is not None:
            obs["context"] = clip_text(self._context(), "context")
        obs["history"] = clip_text(render.history_text(self._history), "history")
        obs["last_message"] = clip_text(self._last_message, "last_message")
        obs["turn"] = min(self._turn, self.max_turns)
        obs["clarifications_left"] = max(0, self.max_clarifications - self._clar_used)
        obs["phase"] = PHASES.index(self._phase)
        return obs

    def _messages(self) -> list[dict[str, str]]:
        msgs = [{"role": "system", "content": self._system}]
        msgs += [{"role": r, "content": t} for r, t in self._history]
        if self._last_message and self._history[-1][1] != self._last_message:
            msgs.append({"role": "user", "content": self._last_message})
        return msgs

    def _info(self, comps: dict, action_type: str | None, error: str | None) -> dict:
        # the four base components are always present (None = not applicable to this turn)
        base = BASE_COMPONENTS if self.ex_mode == "single" else {**BASE_COMPONENTS, **dict.fromkeys(SUITE_KEYS)}
        merged = {**base, **comps} if action_type is not None else dict(comps)
        info = {"reward_components": merged, "messages": self._messages(), "action_type": action_type,
                "phase": self._phase, "sample_id": self._sample.id, "error": error,
                "clarifications_left": max(0, self.max_clarifications - self._clar_used)}
        if "decision" in comps:  # the decision turn (or the last turn of an episode that made none)
            info["decision"] = {"kind": self._decision, "expected": expected_decision(self._sample)}
        return info

    def _decide(self, kind: str, comps: dict) -> dict:
        """``comps`` with the ``decision`` component when this ``kind`` of action is the episode's first
        ``sql`` / ``clarify`` / ``feedback`` (the decision, :mod:`textsql_clarify.rewards.decision`); later turns
        leave it out (absent from their ``reward_components``: not applicable, read as ``None``). The episode
        score ``decision`` is set too."""
        if self._decision is None:
            self._decision = kind
            comps["decision"] = self._scores["decision"] = decision_score(kind, self._sample)
        return comps


#: (k, seed, cache folder, the samples' databases and golds) -> ``variants_for_samples``' answer: the sub-envs of a
#: vector env, and envs made again over the same samples, read the golds' literals once (a few ms per gold).
_VARIANTS_MEMO: dict[tuple, dict[str, list]] = {}


def _variants_for(samples: Sequence[Sample], k: int, seed: int, cache_dir: Any) -> dict[str, list]:
    """:func:`~textsql_clarify.sql.variants.variants_for_samples` of ``samples``, remembered per process."""
    from ..sql.variants import variants_for_samples

    golds = tuple((s.db_path, s.gold_sql, tuple(it.gold_sql for it in s.interpretations),
                   s.drift.post_gold_sql if s.drift is not None else None) for s in samples)
    key = (k, seed, None if cache_dir is None else str(cache_dir), golds)
    hit = _VARIANTS_MEMO.get(key)
    if hit is None or not all(p.is_file() for paths in hit.values() for p in paths):
        if len(_VARIANTS_MEMO) >= 16:
            _VARIANTS_MEMO.pop(next(iter(_VARIANTS_MEMO)))
        hit = _VARIANTS_MEMO[key] = variants_for_samples(samples, k=k, seed=seed, cache_dir=cache_dir)
    return hit


def episode_samples(dataset: str, samples: Sequence[Sample] | None, limit: int | None, *,
                    db_root: str | None = None, validate: bool = True,
                    exclude_flags: Sequence[str] = ()) -> list[Sample]:
    """The samples an env draws episodes from: ``samples`` when given, else the dataset ``dataset`` loaded
    by :func:`textsql_clarify.datasets.load_dataset` (with ``db_root`` and ``validate``); without those carrying
    any of ``exclude_flags`` (:data:`~textsql_clarify.samples.SAMPLE_FLAGS`, e.g. ``("indistinguishable",)``
    for RL training: on such a sample asking cannot pay); then the first ``limit`` of them.

    Raises:
        DatasetError: the dataset cannot be loaded. ValueError: an unknown flag in ``exclude_flags``, or every
            sample excluded.
    """
    from ..samples import flag_set

    drop = flag_set(exclude_flags)
    if samples is None:
        from ..datasets import load_dataset
        samples = load_dataset(dataset, limit=None if drop else limit, db_root=db_root, validate=validate)
    kept = [s for s in samples if not drop & set(s.flags)] if drop else list(samples)
    if drop and samples and not kept:
        raise ValueError(f"exclude_flags={sorted(drop)} leaves no sample of the {len(samples)} loaded")
    return kept[:limit] if limit is not None else kept


def reply_problem(reply: Any) -> str | None:
    """Why ``reply`` cannot be recorded as the user's reply, or ``None`` when it can: it must be a
    :class:`~textsql_clarify.simulators.base.UserReply` (or have its fields) with a string ``text``, a
    string ``label``, a ``layer`` and a ``to_dict`` method."""
    if not callable(getattr(reply, "to_dict", None)):
        return f"got {type(reply).__name__}"
    if not isinstance(getattr(reply, "text", None), str):
        return f"its text must be a string, got {type(getattr(reply, 'text', None)).__name__}"
    if not isinstance(getattr(reply, "label", None), str):
        return f"its label must be a string, got {type(getattr(reply, 'label', None)).__name__}"
    if not hasattr(reply, "layer"):
        return "it has no layer attribute (None, 'L1' or 'L2')"
    return None


def answer_clarifications(simulator: Any, pending: Sequence[tuple[TextSQLClarifyEnv, UserRequest]]) -> list[tuple]:
    """Answer waiting clarifications in one ``simulator.respond(batch)`` and complete each env's step.

    Args:
        simulator: the object with ``respond(batch)`` that every env in ``pending`` shares.
        pending: ``(env, request)`` pairs, ``request`` as returned by ``env.begin_step``.
    Returns:
        One ``(obs, reward, terminated, truncated, info)`` per pair, in order.
    Raises:
        RuntimeError: ``respond`` returned a different number of replies (the message names the
            simulator). TypeError: a reply is not a reply (:func:`reply_problem`; the message gives its
            position). Any error of ``respond`` itself. After an error every env's clarification is
            undone (:meth:`TextSQLClarifyEnv.cancel_clarification`): no env is left waiting and none has
            used a turn, so the same actions can be sent again.
    """
    if not pending:
        return []
    try:
        replies = fetch_replies(simulator, [req for _, req in pending])
    except BaseException:
        cancel_clarifications([env for env, _ in pending])
        raise
    return [env.complete_step(reply) for (env, _), reply in zip(pending, replies)]


def fetch_replies(simulator: Any, requests: Sequence[UserRequest]) -> list:
    """``simulator.respond(requests)``, checked: one reply per request, each a reply (:func:`reply_problem`).

    Raises:
        RuntimeError: a different number of replies (the message names the simulator).
        TypeError: a reply that is not a reply (the message gives its position).
        Any error of ``respond`` itself.
    """
    name = type(simulator).__name__
    replies = list(simulator.respond(list(requests)))
    if len(replies) != len(requests):
        raise RuntimeError(f"simulator {name}.respond returned {len(replies)} replies for {len(requests)} requests")
    for k, reply in enumerate(replies):
        problem = reply_problem(reply)
        if problem:
            raise TypeError(f"simulator {name}.respond: reply {k} is not a UserReply: {problem}")
    return replies


def cancel_clarifications(envs: Sequence[TextSQLClarifyEnv]) -> None:
    """Undo the waiting clarification of each env (:meth:`TextSQLClarifyEnv.cancel_clarification`)."""
    for env in envs:
        env.cancel_clarification()
