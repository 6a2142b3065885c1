"""A measured training run: SFT on oracle dialogues, then multi-turn GRPO in the env, evaluated on held-out samples.

    HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 .venv/bin/python examples/train_grpo.py --out runs/train_grpo
    .venv/bin/python examples/train_grpo.py --smoke --out runs/train_grpo_smoke      # CI: 2 SFT steps, 2 GRPO steps, tiny eval

The pipeline (``docs/training.md``):

1. Load every sample the project can load: the embedded set, and Spider dev (``spider:<root>``) and
   Spider-unanswerable from ``--data-root`` (default ``../shared/data`` next to the repository) where they
   are present (an absent set is skipped with a message). Split the sample ids into train and held-out
   parts, disjoint and stratified by group (:func:`textsql_clarify.integrations.splits.split_sample_ids`);
   the split is saved in the log.
2. Evaluate the untrained model on a held-out subset (table row ``base``): the env's own evaluation,
   :func:`textsql_clarify.rollout.evaluation.evaluate` with a :class:`~textsql_clarify.baselines.llm_agents.TransformersAgent`
   on the in-memory model (greedy), ``num_envs`` episodes in lockstep, the rule-based simulated user.
3. SFT on the oracle's solved dialogues of a train subset (:func:`textsql_clarify.rollout.sft_export.sft_records`,
   tagged style; TRL ``SFTTrainer`` with ``assistant_only_loss``: the loss covers the actions only), then
   evaluate (row ``SFT``).
4. GRPO in the env on a train subset (TRL ``GRPOTrainer`` with
   :func:`textsql_clarify.integrations.trl_rollout.make_rollout_func`: whole multi-turn episodes of tagged
   actions, the user's replies masked out of the loss), logging per step the mean episode reward, the
   format-valid rate, the ask rate (AR) on ambiguous and on answerable samples, EX and FB, all from the
   rollouts' reward components and scores. Then evaluate (row ``SFT+GRPO``).
5. Write ``train_log.json`` (configuration, data, split, per-step logs, the three tables with n, wall
   times) and ``learning_curve.png`` (matplotlib, Agg) to ``--out``.

Which train samples: on a CPU the prompt (instructions, schema, worked example) dominates the cost of
every step, so each training subset takes, per group and source, the samples with the shortest prompts
(``--prefer-short``, on by default; measured in tokens of the model's chat template). The held-out
subset is drawn at random per group and source (``--eval-per-group``), never by length; its episodes run
in order of prompt length, so that each lockstep batch pads to similar lengths. GRPO skips unanswerable
samples without a stated rationale (Spider-unanswerable): their feedback is undefined (FB ``None``), so no
action earns more than 0 there and a group of them has no advantage to learn from.

The GRPO reward (``--reward-preset``, default :data:`TRAIN_PRESET`) is partial SQL credit plus FB plus the
format penalty; the held-out tables always use the env's ``binary`` preset (EX or FB).

Every optional library (torch, transformers, trl, datasets, matplotlib, peft) is imported inside the
functions. Nothing is fetched from the network: the model is a local folder (``--model``, default the
packaged SmolLM2-135M-Instruct through :func:`textsql_clarify.models.resolve_trainable`).

Source: TRL 1.16 ``SFTTrainer`` / ``GRPOTrainer`` (``rollout_func``, ``env_mask``); DeepSeekMath's GRPO
(group-relative advantages); ABISS §5.3 (EX, FB) and TIDE Table 2 (AR) for the metrics.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import random
import re
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
#: Table rows, in order.
STAGES = ("base", "SFT", "SFT+GRPO")
#: The GRPO reward of the measured CPU run (``docs/training.md``): partial SQL credit (``rewards/dense.py``), FB,
#: and the format penalty; no turn penalty, so asking costs nothing by itself. The held-out tables use the
#: env's default ``binary`` preset.
TRAIN_PRESET = '{"sql_partial": 1, "feedback": 1, "format": 0.1}'


# ------------------------------------------------------------------------------------------ arguments
def build_parser() -> argparse.ArgumentParser:
    """The command line (see the module doc). ``--smoke`` overrides the sizes with tiny ones."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--out", default="runs/train_grpo", help="output folder (train_log.json, learning_curve.png)")
    p.add_argument("--data-root", default=str(REPO.parent / "shared" / "data"),
                   help="folder holding spider_dev/ and spider_unanswerable/ (absent sets are skipped)")
    p.add_argument("--no-spider", action="store_true", help="use the embedded set only")
    p.add_argument("--model", default="smollm2", help="model spec: 'smollm2' or a local model folder")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--heldout-fraction", type=float, default=1 / 3)
    p.add_argument("--eval-per-group", type=int, default=8, help="held-out samples evaluated per group")
    p.add_argument("--eval-max-new-tokens", type=int, default=64)
    p.add_argument("--num-envs", type=int, default=8, help="episodes played at once in evaluation")
    p.add_argument("--prefer-short", action=argparse.BooleanOptionalAction, default=True,
                   help="train on the samples with the shortest prompts (per group and source)")
    # SFT
    p.add_argument("--sft-per-group", type=parse_per_group, default="answerable=6,ambiguous=4,unanswerable=3",
                   help="train samples per group for SFT demonstrations: N, or answerable=N,ambiguous=N,unanswerable=N")
    p.add_argument("--sft-steps", type=int, default=13)
    p.add_argument("--sft-batch", type=int, default=1, help="per-device batch (records)")
    p.add_argument("--sft-grad-accum", type=int, default=2)
    p.add_argument("--sft-lr", type=float, default=1e-4)
    p.add_argument("--sft-scheduler", default="linear", help="SFT learning-rate schedule (transformers name)")
    # GRPO
    p.add_argument("--grpo-per-group", type=parse_per_group, default="answerable=6,ambiguous=3,unanswerable=3",
                   help="train samples per group for GRPO prompts (same forms as --sft-per-group)")
    p.add_argument("--grpo-steps", type=int, default=14)
    p.add_argument("--grpo-prompts-per-step", type=int, default=1)
    p.add_argument("--num-generations", type=int, default=4, help="GRPO group size (episodes per prompt)")
    p.add_argument("--max-new-tokens", type=int, default=64, help="most tokens per action in GRPO rollouts")
    p.add_argument("--max-completion-length", type=int, default=160,
                   help="token budget of a whole GRPO episode (actions and the user's replies)")
    p.add_argument("--grpo-lr", type=float, default=2e-5)
    p.add_argument("--temperature", type=float, default=1.0, help="sampling temperature of GRPO rollouts")
    p.add_argument("--beta", type=float, default=0.0, help="KL coefficient (0: no reference model)")
    p.add_argument("--reward-preset", default=TRAIN_PRESET, type=parse_preset,
                   help="env reward preset for GRPO: a name (docs/rewards.md) or a JSON {component: weight} "
                        "mapping, e.g. '{\"sql_partial\": 1, \"feedback\": 1, \"format\": 0.1}'")
    p.add_argument("--max-clarifications", type=int, default=3)
    # hardware
    p.add_argument("--bf16", action="store_true", help="bfloat16 weights and training (GPU)")
    p.add_argument("--lora", action="store_true", help="train LoRA adapters (peft) instead of all weights; "
                                                       "merged after each stage")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--threads", type=int, default=0, help="torch CPU threads (0: torch's default)")
    p.add_argument("--skip-sft", action="store_true", help="GRPO straight from the base model")
    p.add_argument("--smoke", action="store_true",
                   help="CI size: 1 eval sample per group, 2 SFT steps, 2 GRPO steps, short completions")
    return p


def parse_per_group(text: str) -> int | dict[str, int]:
    """``N`` (the same cap for every group) or ``answerable=N,ambiguous=N,unanswerable=N`` (groups left out: 0).

    Raises:
        argparse.ArgumentTypeError: not an int >= 0, or an unknown group.
    """
    try:
        if "=" not in str(text):
            n = int(text)
            if n < 0:
                raise ValueError
            return n
        out = {g: 0 for g in GROUPS}
        for part in str(text).split(","):
            g, _, n = part.partition("=")
            if g.strip() not in out or int(n) < 0:
                raise ValueError
            out[g.strip()] = int(n)
        return out
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or answerable=N,ambiguous=N,unanswerable=N, got {text!r}") \
            from None


def parse_preset(text: str) -> Any:
    """``--reward-preset``: a preset name, or a JSON object of component weights (checked by the env's
    :func:`~textsql_clarify.rewards.presets.resolve_preset`).

    Raises:
        argparse.ArgumentTypeError: bad JSON, or a name / mapping that ``resolve_preset`` refuses.
    """
    from textsql_clarify.rewards.presets import resolve_preset

    value: Any = text
    if text.strip().startswith("{"):
        try:
            value = json.loads(text)
        except json.JSONDecodeError as e:
            raise argparse.ArgumentTypeError(f"--reward-preset is not valid JSON: {e}") from e
    try:
        resolve_preset(value)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from e
    return value


def apply_smoke(args: argparse.Namespace) -> argparse.Namespace:
    """Shrink every size to the CI smoke run: tiny eval, 2 SFT steps, 2 GRPO steps of 2 episodes."""
    args.eval_per_group = 1
    args.eval_max_new_tokens = 16
    args.num_envs = 3
    args.sft_per_group = 1
    args.sft_steps = 2
    args.sft_batch = 1
    args.sft_grad_accum = 1
    args.grpo_per_group = 1
    args.grpo_steps = 2
    args.grpo_prompts_per_step = 1
    args.num_generations = 2
    args.max_new_tokens = 16
    args.max_completion_length = 24
    return args


def log(msg: str) -> None:
    """Print a timestamped progress line (flushed, so ``nohup`` logs follow the run)."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ------------------------------------------------------------------------------------------ data
def _portable(value):
    """A config value for the log: a path under the repository's parent is written relative to the
    repository (``../shared/data``), so a committed log names no folder of the machine it ran on."""
    if isinstance(value, str) and os.path.isabs(value):
        try:
            return os.path.relpath(value, REPO) if Path(value).resolve().is_relative_to(REPO.parent.resolve()) else value
        except ValueError:
            return value
    return value


def dataset_specs(data_root: str | os.PathLike, *, spider: bool = True) -> tuple[list[str], list[str]]:
    """The dataset specs to load and the messages about absent sets.

    Args:
        data_root: the folder with ``spider_dev/`` and ``spider_unanswerable/`` (``../shared/data``).
        spider: include the Spider sets when present.
    Returns:
        ``(specs, skipped)``: ``"embedded"`` first, then ``spider:<root>`` and
        ``spider-unanswerable:<file>:<root>`` where their files exist; one message per absent set.
    """
    specs, skipped = ["embedded"], []
    if not spider:
        return specs, ["Spider sets not used (--no-spider)"]
    root = Path(data_root)
    sp = root / "spider_dev"
    una = root / "spider_unanswerable" / "spider_no_answer.json"
    if (sp / "dev.json").is_file() and (sp / "database").is_dir():
        specs.append(f"spider:{sp}")
        if una.is_file():
            specs.append(f"spider-unanswerable:{una}:{sp}")
        else:
            skipped.append(f"Spider-unanswerable skipped: {una} not found")
    else:
        skipped.append(f"Spider dev skipped: {sp / 'dev.json'} not found")
        skipped.append("Spider-unanswerable skipped: it needs the Spider dev databases")
    return specs, skipped


def source_of(sample: Any) -> str:
    """The sample's source set (``provenance["source"]``: ``embedded``, ``spider``, ``spider_unanswerable``)."""
    return str((sample.provenance or {}).get("source") or "unknown")


def stratified_pick(samples: Sequence[Any], ids: Sequence[str], per_group: int | dict[str, int], *, seed: int,
                    key: Callable[[Any], Any] | None = None, filter_fn: Callable[[Any], bool] | None = None,
                    ) -> list[str]:
    """Up to ``per_group`` ids of each group, taken round-robin over the group's sources.

    Within a source the order is ``key`` (ascending; e.g. prompt length) or, without ``key``, a shuffle by
    ``random.Random(f"{seed}:{group}:{source}")`` of the sorted ids. The round-robin gives each source of a
    group the same share (Spider's 1,034 answerable samples do not crowd out the embedded 12); it starts at
    the source whose first sample has the smallest ``key`` (with ``key``), else at the first source by name.

    Args:
        samples: all samples; ids: the candidates (e.g. the held-out ids); per_group: the cap per group (an
            int, or ``{group: cap}`` with 0 for a missing group).
        seed: the shuffle's seed; key: sort key of a sample; filter_fn: keep only samples it accepts.
    Returns:
        The chosen ids, grouped in :data:`GROUPS` order.
    """
    by_id = {s.id: s for s in samples}
    out: list[str] = []
    for group in GROUPS:
        per_source: dict[str, list[Any]] = {}
        for sid in ids:
            s = by_id[sid]
            if s.group == group and (filter_fn is None or filter_fn(s)):
                per_source.setdefault(source_of(s), []).append(s)
        queues = []
        for src in sorted(per_source):
            lst = sorted(per_source[src], key=lambda s: s.id)
            if key is not None:
                lst.sort(key=lambda s: (key(s), s.id))
            else:
                random.Random(f"{seed}:{group}:{src}").shuffle(lst)
            queues.append(lst)
        if key is not None:
            queues.sort(key=lambda q: key(q[0]))
        cap = per_group.get(group, 0) if isinstance(per_group, dict) else per_group
        chosen: list[str] = []
        while len(chosen) < cap and any(queues):
            for q in queues:
                if q and len(chosen) < cap:
                    chosen.append(q.pop(0).id)
        out += chosen
    return out


def prompt_lengths(samples: Sequence[Any], ids: Sequence[str], tokenizer: Any, env_kwargs: dict) -> dict[str, int]:
    """Tokens of each sample's first prompt: the env's messages plus the worked example
    (:func:`~textsql_clarify.baselines.llm_prompt.agent_messages`) through the chat template, with the
    generation prompt, i.e. exactly what the policy reads at its first turn."""
    from textsql_clarify.baselines.llm_prompt import agent_messages
    from textsql_clarify.envs.env import TextSQLClarifyEnv

    env = TextSQLClarifyEnv(samples=list(samples), simulator="rule", **env_kwargs)
    out = {}
    for sid in ids:
        _obs, info = env.reset(options={"sample_id": sid})
        text = tokenizer.apply_chat_template(agent_messages(info), tokenize=False, add_generation_prompt=True)
        out[sid] = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    return out


def _stats(xs: Sequence[float]) -> dict[str, float | int | None]:
    xs = sorted(xs)
    if not xs:
        return {"n": 0, "min": None, "median": None, "max": None, "mean": None}
    return {"n": len(xs), "min": xs[0], "median": xs[len(xs) // 2], "max": xs[-1], "mean": sum(xs) / len(xs)}


# ------------------------------------------------------------------------------------------ model
def load_policy(spec: str, *, bf16: bool, device: str) -> tuple[Any, Any, str]:
    """``(model, tokenizer, folder)``: a trainable causal LM from a local spec, float32 (or bfloat16).

    Raises:
        textsql_clarify.simulators.hf_models.ModelLoadError: the spec cannot be resolved offline.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from textsql_clarify.models import resolve_trainable

    folder = resolve_trainable(spec, dtype="bfloat16" if bf16 else "float32")
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.bfloat16 if bf16 else torch.float32,
                                                 local_files_only=True).to(device)
    return model, tok, folder


def sft_tokenizer(folder: str) -> tuple[Any, bool]:
    """The SFT tokenizer and whether the loss can be limited to the assistant's tokens.

    A template that already marks the assistant turns (``{% generation %}``) is kept. Otherwise a ChatML
    model (SmolLM2, Qwen2.5) gets the shipped tool-calling chat template, which renders tagged chats exactly
    as ChatML and marks the assistant turns, so ``assistant_only_loss`` trains on the actions only
    (``integrations/trl_env.apply_tool_chat_template``). A model without ChatML tokens keeps its own
    template and trains on whole sequences (``False``).
    """
    from transformers import AutoTokenizer

    from textsql_clarify.integrations.trl_env import apply_tool_chat_template

    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if re.search(r"\{%-?\s*generation\s*-?%\}", getattr(tok, "chat_template", None) or ""):
        return tok, True
    try:
        return apply_tool_chat_template(tok, force=True), True
    except ValueError as e:  # no ChatML tokens
        log(f"SFT loss over whole sequences: {e}")
        return tok, False


def _merge_lora(model: Any) -> Any:
    """A peft model's adapters merged into its base weights (a plain model), else the model itself."""
    return model.merge_and_unload() if hasattr(model, "merge_and_unload") else model


def _lora_config(args: argparse.Namespace) -> Any:
    from peft import LoraConfig

    return LoraConfig(r=args.lora_r, lora_alpha=2 * args.lora_r, lora_dropout=0.0, target_modules="all-linear",
                      task_type="CAUSAL_LM")


# ------------------------------------------------------------------------------------------ evaluation
def _metric(block: dict, name: str) -> dict:
    m = (block or {}).get(name) or {}
    return {"value": m.get("value"), "n": int(m.get("n") or 0)}


def table_row(trajectories: Sequence[Any], metrics: dict) -> dict[str, Any]:
    """One table row from an evaluation: reward (episode return under the env's preset), format-valid rate
    (n = actions), AR on ambiguous / answerable / unanswerable samples, EX, FB, abstained, each
    ``{"value", "n"}`` (value ``None`` with n 0 where undefined: README "Design rules": undefined is not zero)."""
    rewards = [float(sum(t.reward for t in traj.turns)) for traj in trajectories]
    by_group = metrics.get("by_group") or {}
    ov = metrics.get("overall") or {}
    row: dict[str, Any] = {
        "n_episodes": len(trajectories),
        "reward": {"value": sum(rewards) / len(rewards) if rewards else None, "n": len(rewards)},
        "format_valid_rate": _metric(ov, "format_valid_rate"),
    }
    for g in GROUPS:
        row[f"AR_{g}"] = _metric((by_group.get(g) or {}).get("metrics") or {}, "AR")
    for name in ("EX", "FB", "abstained"):
        row[name] = _metric(ov, name)
    outcomes: dict[str, int] = {}
    for t in trajectories:
        outcomes[t.outcome] = outcomes.get(t.outcome, 0) + 1
    row["outcomes"] = outcomes
    return row


def evaluate_policy(model: Any, tokenizer: Any, samples: Sequence[Any], *, num_envs: int, max_new_tokens: int,
                    seed: int, judge: Any, label: str) -> dict[str, Any]:
    """Held-out evaluation of an in-memory model: :func:`textsql_clarify.rollout.evaluation.evaluate` with a
    greedy :class:`~textsql_clarify.baselines.llm_agents.TransformersAgent` on ``(model, tokenizer)``, the
    rule-based user, the ``binary`` preset; returns :func:`table_row` plus wall time and agent counters."""
    from textsql_clarify.baselines.llm_agents import TransformersAgent
    from textsql_clarify.rollout.evaluation import evaluate

    was_training = model.training
    model.eval()
    agent = TransformersAgent((model, tokenizer), max_new_tokens=max_new_tokens, name=f"policy:{label}")
    t0 = time.perf_counter()
    trajs, metrics = evaluate(list(samples), agent, num_envs=num_envs, seed=seed, progress=False,
                              feedback_judge=judge)
    row = table_row(trajs, metrics)
    row["wall_s"] = round(time.perf_counter() - t0, 1)
    row["generate_calls"] = agent.generate_calls
    row["agent_format_valid_rate"] = agent.format_valid_rate()
    row["agent_stats"] = dict(agent.stats)
    row["actions"] = {t.sample_id: [f"{x.action_type}: {x.content[:160]}" for x in t.turns] for t in trajs}
    if was_training:
        model.train()
    return row


# ------------------------------------------------------------------------------------------ SFT
def run_sft(model: Any, folder: str, samples: Sequence[Any], args: argparse.Namespace, out: Path,
            judge: Any) -> tuple[Any, dict[str, Any]]:
    """SFT on the oracle's solved, tagged dialogues of ``samples`` (TRL ``SFTTrainer``, assistant-only loss).

    Returns:
        ``(model, log)``: the trained model (LoRA merged) and ``{"n_records", "dropped", "record_tokens",
        "steps": [{"step", "loss"}], "wall_s", "config"}``.
    Raises:
        RuntimeError: the oracle solved none of the samples.
    """
    from trl import SFTConfig, SFTTrainer

    from textsql_clarify.rollout.sft_export import sft_dataset, sft_records

    t0 = time.perf_counter()
    recs = sft_records(list(samples), "oracle", style="tagged", seed=args.seed, feedback_judge=judge,
                       max_clarifications=args.max_clarifications)
    if not recs:
        raise RuntimeError(f"the oracle solved none of the {len(samples)} SFT samples: {recs.dropped[:3]}")
    tok, assistant_only = sft_tokenizer(folder)
    lengths = [len(tok.apply_chat_template(r["messages"], tokenize=True, return_dict=False)) for r in recs]
    cfg = SFTConfig(output_dir=str(out / "sft"), max_steps=args.sft_steps, per_device_train_batch_size=args.sft_batch,
                    gradient_accumulation_steps=args.sft_grad_accum, learning_rate=args.sft_lr,
                    lr_scheduler_type=args.sft_scheduler, warmup_steps=0, max_length=max(lengths) + 8,
                    assistant_only_loss=assistant_only, logging_steps=1, save_strategy="no", report_to=[],
                    use_cpu=not _cuda(), bf16=args.bf16, seed=args.seed, data_seed=args.seed, disable_tqdm=True,
                    activation_checkpointing=False, dataloader_num_workers=0)
    trainer = SFTTrainer(model=model, args=cfg, train_dataset=sft_dataset(recs), processing_class=tok,
                         peft_config=_lora_config(args) if args.lora else None, callbacks=[step_timer([], "SFT")])
    trainer.train()
    steps = [{"step": h["step"], "loss": h["loss"]} for h in trainer.state.log_history if "loss" in h]
    model = _merge_lora(trainer.model)
    return model, {
        "n_records": len(recs), "record_ids": [r["sample_id"] for r in recs],
        "dropped": list(recs.dropped), "record_tokens": _stats(lengths), "steps": steps,
        "epochs": trainer.state.epoch, "wall_s": round(time.perf_counter() - t0, 1),
        "config": {"max_steps": args.sft_steps, "batch": args.sft_batch, "grad_accum": args.sft_grad_accum,
                   "lr": args.sft_lr, "scheduler": args.sft_scheduler, "assistant_only_loss": assistant_only, "lora": args.lora},
    }


# ------------------------------------------------------------------------------------------ GRPO
def rollout_step_stats(out: dict[str, list], groups: dict[str, str]) -> dict[str, Any]:
    """Per-step metrics of one GRPO generation batch, from the rollout's fields
    (:func:`textsql_clarify.integrations.trl_rollout.make_rollout_func`).

    * ``reward``: mean episode reward (n = episodes).
    * ``format_valid_rate``: 1 - malformed actions / actions (the ``format`` component is -1 per malformed
      or refused action; n = actions).
    * ``AR_<group>``: share of the group's episodes with a clarification (``turn_penalty`` is -1 per
      clarification turn whatever the preset's weights; n = the group's episodes).
    * ``EX`` / ``FB``: the env's episode scores (``None`` where undefined or the episode did not finish).
    Each is ``{"value", "n"}``.
    """
    def mean(xs: list[float]) -> dict:
        return {"value": sum(xs) / len(xs) if xs else None, "n": len(xs)}

    ids = out["rollout_sample_id"]
    comps = out["reward_components"]
    turns = sum(int(x) for x in out["num_turns"])
    bad = sum(-(c.get("format") or 0.0) for c in comps)
    row: dict[str, Any] = {
        "reward": mean([float(r) for r in out["episode_reward"]]),
        "format_valid_rate": {"value": (1 - bad / turns) if turns else None, "n": turns},
    }
    for g in GROUPS:
        row[f"AR_{g}"] = mean([float((c.get("turn_penalty") or 0.0) < 0) for sid, c in zip(ids, comps)
                               if groups[sid] == g])
    for key, name in (("ex", "EX"), ("fb", "FB")):
        row[name] = mean([float(s[key]) for s in out["episode_scores"] if s and s.get(key) is not None])
    row["finished"] = mean([float(f) for f in out["finished"]])
    row["sample_ids"] = sorted(set(ids))
    row["outcomes"] = {o: out["outcome"].count(o) for o in sorted(set(out["outcome"]))}
    row["completion_tokens"] = _stats([len(c) for c in out["completion_ids"]])
    row["prompt_tokens"] = _stats([len(p) for p in out["prompt_ids"]])
    return row


def step_timer(step_times: list[float], label: str | None = None, progress: bool | None = True) -> Any:
    """A ``transformers.TrainerCallback`` that appends each optimiser step's wall time (seconds) to ``step_times``
    (transformers docs, "Callbacks": ``on_step_begin`` / ``on_step_end`` / ``on_log``). Used by this script and by
    ``examples/train_decision.py``.

    Args:
        step_times: the list the step times go to (in step order).
        label: with a label (``"SFT"``, ``"GRPO"``), each step also writes a stderr line,
            ``"GRPO step 3/8: 12.4 s (mean 11.9 s, about 59 s left)"``, and each logged loss
            ``"GRPO step 3/8: loss 0.0123"`` (:func:`textsql_clarify.progress.report`); ``None``: silent.
        progress: the switch of those lines (``True``: always, as this script's ``log`` lines; ``None``: only on a
            terminal; ``False``: never).
    """
    from transformers import TrainerCallback

    from textsql_clarify.progress import report

    class _Timer(TrainerCallback):
        def on_step_begin(self, a, state, control, **kw):  # noqa: D102
            step_times.append(time.perf_counter())

        def on_step_end(self, a, state, control, **kw):  # noqa: D102
            step_times[-1] = time.perf_counter() - step_times[-1]
            if label is not None:
                total = state.max_steps or len(step_times)
                mean = sum(step_times) / len(step_times)
                left = max(total - state.global_step, 0) * mean
                report(f"{label} step {state.global_step}/{total}: {step_times[-1]:.1f} s (mean {mean:.1f} s, "
                       f"about {left:.0f} s left)", progress)

        def on_log(self, a, state, control, logs=None, **kw):  # noqa: D102
            if label is not None and logs and isinstance(logs.get("loss"), (int, float)):
                report(f"{label} step {state.global_step}/{state.max_steps}: loss {logs['loss']:.4f}", progress)

    return _Timer()


def run_grpo(model: Any, tokenizer: Any, samples: Sequence[Any], train_ids: Sequence[str],
             args: argparse.Namespace, out: Path, judge: Any) -> tuple[Any, dict[str, Any]]:
    """GRPO with the env's multi-turn tagged rollouts (TRL ``GRPOTrainer(rollout_func=...)``).

    Returns:
        ``(model, log)``: the trained model (LoRA merged) and ``{"steps": [per-step metrics, TRL's loss and
        reward, wall seconds], "wall_s", "config"}``.
    """
    from trl import GRPOConfig, GRPOTrainer

    from textsql_clarify.integrations.trl_env import build_prompt_dataset
    from textsql_clarify.integrations.trl_rollout import make_rollout_func, rollout_reward

    t0 = time.perf_counter()
    env_kwargs = {"reward_preset": args.reward_preset, "max_clarifications": args.max_clarifications,
                  "feedback_judge": judge}
    chosen = [s for s in samples if s.id in set(train_ids)]
    groups = {s.id: s.group for s in chosen}
    rollout = make_rollout_func(chosen, max_new_tokens=args.max_new_tokens, env_kwargs=env_kwargs,
                                max_completion_length=args.max_completion_length)
    steps: list[dict[str, Any]] = []

    def recording_rollout(prompts: list, trainer: Any) -> dict[str, list]:
        t = time.perf_counter()
        res = rollout(prompts, trainer)
        row = rollout_step_stats(res, groups)
        row["rollout_s"] = round(time.perf_counter() - t, 1)
        steps.append(row)
        return res

    step_times: list[float] = []

    G = args.num_generations
    cfg = GRPOConfig(output_dir=str(out / "grpo"), max_steps=args.grpo_steps,
                     per_device_train_batch_size=G * args.grpo_prompts_per_step, num_generations=G,
                     max_completion_length=args.max_completion_length, learning_rate=args.grpo_lr,
                     lr_scheduler_type="constant", warmup_steps=0, beta=args.beta, temperature=args.temperature,
                     use_cpu=not _cuda(), bf16=args.bf16, report_to=[], logging_steps=1, save_strategy="no",
                     seed=args.seed, data_seed=args.seed, dataloader_num_workers=0, shuffle_dataset=True,
                     activation_checkpointing=False, disable_tqdm=True)
    ds = build_prompt_dataset(chosen, list(train_ids), style="tags",
                              env_kwargs={"max_clarifications": args.max_clarifications})
    trainer = GRPOTrainer(model=model, processing_class=tokenizer, reward_funcs=rollout_reward,
                          rollout_func=recording_rollout, train_dataset=ds, args=cfg, callbacks=[step_timer(step_times, "GRPO")],
                          peft_config=_lora_config(args) if args.lora else None)
    trainer.train()
    logs = [h for h in trainer.state.log_history if "reward" in h]
    for k, row in enumerate(steps):
        h = logs[k] if k < len(logs) else {}
        row["step"] = k + 1
        row["trl"] = {key: h.get(key) for key in ("loss", "reward", "reward_std", "frac_reward_zero_std",
                                                  "completions/mean_length", "entropy", "grad_norm") if key in h}
        row["step_s"] = round(step_times[k], 1) if k < len(step_times) else None
    model = _merge_lora(trainer.model)
    return model, {
        "steps": steps, "wall_s": round(time.perf_counter() - t0, 1), "prompt_ids": list(train_ids),
        "config": {"max_steps": args.grpo_steps, "prompts_per_step": args.grpo_prompts_per_step,
                   "num_generations": G, "max_new_tokens": args.max_new_tokens,
                   "max_completion_length": args.max_completion_length, "lr": args.grpo_lr,
                   "temperature": args.temperature, "beta": args.beta, "reward_preset": args.reward_preset,
                   "loss_type": cfg.loss_type, "scheduler": "constant", "lora": args.lora},
    }


# ------------------------------------------------------------------------------------------ outputs
def plot_curve(run: dict[str, Any], path: Path) -> Path:
    """The learning curve as a PNG (matplotlib, Agg): GRPO per-step reward / EX / FB, per-step format-valid
    rate and AR, SFT loss, and the held-out table (base, SFT, SFT+GRPO)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = run["grpo"]["steps"]
    fig, axes = plt.subplots(1, 4, figsize=(19, 4.2))

    def series(name: str) -> tuple[list[int], list[float]]:
        xs = [r["step"] for r in steps if r[name]["value"] is not None]
        return xs, [r[name]["value"] for r in steps if r[name]["value"] is not None]

    ax = axes[0]
    sft = run["sft"].get("steps") or []
    if sft:
        ax.plot([s["step"] for s in sft], [s["loss"] for s in sft], "o-", color="tab:gray")
    ax.set_title("SFT loss (assistant tokens)")
    ax.set_xlabel("SFT step")
    ax = axes[1]
    for name, style in (("reward", "o-"), ("EX", "s--"), ("FB", "^--")):
        xs, ys = series(name)
        ax.plot(xs, ys, style, label=name)
    ax.set_title("GRPO rollouts: reward, EX, FB")
    ax.set_xlabel("GRPO step")
    low = min([0.0] + [r["reward"]["value"] for r in steps if r["reward"]["value"] is not None])
    ax.set_ylim(min(-0.05, low - 0.05), 1.05)  # shaped rewards go below 0
    ax.legend(fontsize=8)
    ax = axes[2]
    for name, style in (("format_valid_rate", "o-"), ("AR_ambiguous", "s--"), ("AR_answerable", "^--")):
        xs, ys = series(name)
        ax.plot(xs, ys, style, label=name)
    ax.set_title("GRPO rollouts: format-valid, ask rate")
    ax.set_xlabel("GRPO step")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)
    ax = axes[3]
    names = ("reward", "format_valid_rate", "AR_ambiguous", "AR_answerable", "EX", "FB")
    width = 0.27
    for k, stage in enumerate(STAGES):
        row = run["tables"].get(stage)
        if not row:
            continue
        vals = [row[n]["value"] if row[n]["value"] is not None else 0.0 for n in names]
        ax.bar([i + (k - 1) * width for i in range(len(names))], vals, width, label=stage)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(["reward", "fmt-valid", "AR amb", "AR ans", "EX", "FB"], fontsize=8)
    ax.set_ylim(0, 1.05)
    n = run["tables"].get("base", {}).get("n_episodes")
    ax.set_title(f"held-out (n={n} episodes)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def format_table(tables: dict[str, dict]) -> str:
    """The before/after table as Markdown, each cell ``value (n)``."""
    cols = ("reward", "format_valid_rate", "AR_ambiguous", "AR_answerable", "AR_unanswerable", "EX", "FB",
            "abstained")
    lines = ["| stage | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
    for stage in STAGES:
        row = tables.get(stage)
        if not row:
            continue
        cells = []
        for c in cols:
            v, n = row[c]["value"], row[c]["n"]
            cells.append(f"{v:.3f} (n={n})" if v is not None else f"- (n={n})")
        lines.append(f"| {stage} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(float(x))


# ------------------------------------------------------------------------------------------ main
def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Run the pipeline; returns the log (also written to ``<out>/train_log.json``).

    Raises:
        ValueError: no samples could be loaded; RuntimeError: the oracle solved no SFT sample.
    """
    args = build_parser().parse_args(argv)
    if args.smoke:
        apply_smoke(args)
    import torch
    import transformers

    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    wall: dict[str, float] = {}
    from textsql_clarify.integrations.splits import load_training_samples, split_sample_ids
    from textsql_clarify.rewards.feedback import default_judge, has_rationale

    # 1. data and split
    specs, skipped = dataset_specs(args.data_root, spider=not args.no_spider)
    for msg in skipped:
        log(msg)
    samples = load_training_samples(specs, on_skip=lambda spec, missing: skipped.append(
        f"{spec} skipped: not found: {', '.join(missing)}"))
    train_ids, heldout_ids = split_sample_ids(samples, heldout_fraction=args.heldout_fraction, seed=args.seed)
    by_id = {s.id: s for s in samples}
    counts = {g: {"all": sum(s.group == g for s in samples),
                  "train": sum(by_id[i].group == g for i in train_ids),
                  "heldout": sum(by_id[i].group == g for i in heldout_ids)} for g in GROUPS}
    log(f"{len(samples)} samples from {specs}; train {len(train_ids)}, held-out {len(heldout_ids)}; {counts}")

    device = "cuda" if _cuda() else "cpu"
    model, tok, folder = load_policy(args.model, bf16=args.bf16, device=device)
    judge = default_judge()
    t = time.perf_counter()
    eval_ids = stratified_pick(samples, heldout_ids, args.eval_per_group, seed=args.seed)
    lengths = prompt_lengths(samples, train_ids, tok, {"max_clarifications": args.max_clarifications}) \
        if args.prefer_short else {}
    key = (lambda s: lengths[s.id]) if args.prefer_short else None
    sft_ids = stratified_pick(samples, train_ids, args.sft_per_group, seed=args.seed, key=key)
    grpo_ids = stratified_pick(samples, train_ids, args.grpo_per_group, seed=args.seed, key=key,
                               filter_fn=lambda s: s.group != "unanswerable" or has_rationale(s))
    eval_len = prompt_lengths(samples, eval_ids, tok, {"max_clarifications": args.max_clarifications})
    wall["select_s"] = round(time.perf_counter() - t, 1)
    assert not set(eval_ids) & set(train_ids) and not set(sft_ids + grpo_ids) & set(heldout_ids)
    run: dict[str, Any] = {
        "config": {k: _portable(v) for k, v in vars(args).items()},
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": transformers.__version__, "trl": _version("trl"), "device": device,
                     "torch_threads": torch.get_num_threads(), "cpu_count": os.cpu_count()},
        "model_folder_name": Path(folder).name,
        "data": {"specs": [s.split(":", 1)[0] for s in specs], "skipped": skipped, "n_samples": len(samples),
                 "by_group": counts},
        "split": {"heldout_fraction": args.heldout_fraction, "seed": args.seed, "stratified_by": "group",
                  "train_ids": train_ids, "heldout_ids": heldout_ids},
        "eval_ids": eval_ids, "sft_ids": sft_ids, "grpo_ids": grpo_ids,
        "prompt_tokens": {"train_all": _stats(list(lengths.values())),
                          "sft": _stats([lengths[i] for i in sft_ids if i in lengths]),
                          "grpo": _stats([lengths[i] for i in grpo_ids if i in lengths]),
                          "eval": _stats(list(eval_len.values()))},
        "tables": {}, "wall_s": wall,
    }
    # episodes in order of prompt length: the lockstep batches then pad to similar lengths (same samples)
    eval_samples = sorted((by_id[i] for i in eval_ids), key=lambda s: (eval_len[s.id], s.id))

    def save() -> None:
        run["wall_s"]["total_s"] = round(time.perf_counter() - t_start, 1)
        (out / "train_log.json").write_text(json.dumps(run, indent=1, default=str), encoding="utf-8")

    def do_eval(stage: str) -> None:
        log(f"evaluating {stage} on {len(eval_samples)} held-out samples")
        row = evaluate_policy(model, tok, eval_samples, num_envs=args.num_envs,
                              max_new_tokens=args.eval_max_new_tokens, seed=args.seed, judge=judge, label=stage)
        run["tables"][stage] = row
        wall[f"eval_{stage}_s"] = row["wall_s"]
        log(f"{stage}: " + ", ".join(f"{k} {row[k]['value']} (n={row[k]['n']})" for k in
                                     ("reward", "format_valid_rate", "AR_ambiguous", "AR_answerable", "EX", "FB")))
        save()

    # 2. base
    do_eval("base")
    # 3. SFT
    if args.skip_sft:
        run["sft"] = {"skipped": True, "steps": []}
    else:
        log(f"SFT on the oracle's dialogues of {len(sft_ids)} train samples, {args.sft_steps} steps")
        model, run["sft"] = run_sft(model, folder, [by_id[i] for i in sft_ids], args, out, judge)
        wall["sft_s"] = run["sft"]["wall_s"]
        log(f"SFT done in {run['sft']['wall_s']} s; losses {[round(s['loss'], 3) for s in run['sft']['steps']]}")
        save()
    do_eval("SFT")
    # 4. GRPO
    log(f"GRPO on {len(grpo_ids)} train prompts, {args.grpo_steps} steps, group {args.num_generations}")
    model, run["grpo"] = run_grpo(model, tok, samples, grpo_ids, args, out, judge)
    wall["grpo_s"] = run["grpo"]["wall_s"]
    for r in run["grpo"]["steps"]:
        log(f"GRPO step {r['step']}: reward {r['reward']['value']} (n={r['reward']['n']}), "
            f"format-valid {r['format_valid_rate']['value']}, AR amb {r['AR_ambiguous']['value']}, "
            f"AR ans {r['AR_answerable']['value']}, EX {r['EX']['value']}, FB {r['FB']['value']}, {r['step_s']} s")
    save()
    do_eval("SFT+GRPO")
    # 5. outputs
    plot_curve(run, out / "learning_curve.png")
    save()
    log(f"done in {run['wall_s']['total_s']} s; {out / 'train_log.json'}, {out / 'learning_curve.png'}")
    print(format_table(run["tables"]), flush=True)
    return run


def _version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        return version(name)
    except Exception:  # noqa: BLE001 - informational only
        return None


if __name__ == "__main__":
    main()
