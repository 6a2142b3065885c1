"""Progress lines on stderr for the steps that take long: database variants, an LLM agent's lockstep rounds, model
preparation and training steps. Each is checked on a tiny real path (the embedded database with k=1, a batch agent
that counts its tokens, a two-layer Llama built here with random weights, the training callback) and the lines
must name the work and its counts; switched off (``progress=False``, or not a terminal) they are silent."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from textsql_clarify.rollout.evaluation import evaluate
from textsql_clarify.datasets import embedded_db_path, load_dataset
from textsql_clarify.progress import progress_enabled, rate
from textsql_clarify.sql.variants import build_variants

REPO = Path(__file__).resolve().parents[1]


def test_progress_switch_follows_the_option_then_the_terminal(capsys):
    assert progress_enabled(True) is True and progress_enabled(False) is False
    assert progress_enabled(None) is False  # pytest's captured stderr is no terminal
    assert rate(412, 5.0, "tokens") == "82.4 tokens/s" and rate(3, 0.0, "tokens") == "- tokens/s"


def test_building_variants_names_the_database_and_counts_each_variant(tmp_path, capsys):
    paths = build_variants(embedded_db_path(), k=1, cache_dir=tmp_path / "a", progress=True)
    err = capsys.readouterr().err.splitlines()
    assert len(paths) == 1 and len(err) == 1
    assert re.fullmatch(r"database variants of university\.sqlite: 1/1 built \(k=1\), \d+\.\d s", err[0]), err
    build_variants(embedded_db_path(), k=1, cache_dir=tmp_path / "a", progress=True)  # cached: nothing built
    build_variants(embedded_db_path(), k=2, cache_dir=tmp_path / "b", progress=False)
    build_variants(embedded_db_path(), k=1, cache_dir=tmp_path / "c")  # None: stderr is no terminal here
    assert capsys.readouterr().err == ""


class _CountingLM:
    """A batch agent shaped like TransformersAgent: one act_batch per lockstep round, and ``stats["new_tokens"]``
    counting the whitespace tokens of what it emits (one clarification, then the gold-free ``SELECT 1``)."""

    name = "fake-lm"
    privileged = False

    def __init__(self):
        self.stats = {"actions": 0, "new_tokens": 0}
        self.calls: list[tuple[int, int]] = []  # (rows, tokens) per round

    def begin_episode(self, sample):
        pass

    def act_batch(self, observations, infos):
        out = ["<clarify>Which rows do you mean?</clarify>" if o.get("clarifications_left", 0) == 3
               else "<sql>SELECT 1</sql>" for o in observations]
        tokens = sum(len(a.split()) for a in out)
        self.stats["actions"] += len(out)
        self.stats["new_tokens"] += tokens
        self.calls.append((len(out), tokens))
        return out


def test_lockstep_rounds_of_a_token_counting_agent_report_rows_tokens_and_rate(capsys):
    samples = load_dataset("embedded", limit=5)
    agent = _CountingLM()
    trajs, _ = evaluate(samples, agent, num_envs=2, progress=True)
    err = capsys.readouterr().err
    lines = re.findall(r"fake-lm round (\d+): (\d+) rows, (\d+) tokens generated in \d+\.\d s "
                       r"\((?:\d+\.\d|-) tokens/s\); (\d+)/5 episodes done", err)
    assert len(lines) == len(agent.calls) > 2
    assert [int(n) for n, *_ in lines] == list(range(1, len(agent.calls) + 1))
    assert [(int(r), int(t)) for _, r, t, _ in lines] == agent.calls
    done = [int(d) for *_, d in lines]
    assert done[0] == 0 and done == sorted(done) and done[-1] < 5
    assert sum(r for r, _ in agent.calls) == sum(len(t.turns) for t in trajs)

    evaluate(samples, _CountingLM(), num_envs=2, progress=False)
    assert "round" not in capsys.readouterr().err


def _tiny_llama(folder: Path) -> Path:
    """A two-layer Llama with random weights and a word-level tokenizer, saved as a plain checkpoint."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers

    words = ["<unk>", "</s>", "select", "from", "where", "name", "singer", "age", ">", "30"]
    tk = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, unk_token="<unk>", eos_token="</s>")
    cfg = transformers.LlamaConfig(vocab_size=len(words), hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                   num_attention_heads=2, num_key_value_heads=2, max_position_embeddings=64,
                                   eos_token_id=1, pad_token_id=1)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)
    return folder


def test_preparing_a_model_reports_each_stage_with_the_parameter_count(tmp_path, capsys):
    src = _tiny_llama(tmp_path / "tiny")
    from textsql_clarify.models import prepare_model

    import transformers

    n_params = sum(p.numel() for p in transformers.AutoModelForCausalLM.from_pretrained(src).parameters())
    capsys.readouterr()
    dest = prepare_model(str(src), cache_dir=tmp_path / "cache", progress=True)
    err = capsys.readouterr().err.splitlines()
    assert [re.sub(r" \(\d+\.\d s\)$", "", x) for x in err] == [
        f"preparing {src}: loading {src} (checkpoint) as float32 ...",
        f"preparing {src}: loaded {n_params / 1e6:.1f}M parameters; copying them into a plain float32 model ...",
        f"preparing {src}: writing the safetensors checkpoint and tokenizer to {dest} ...",
        f"preparing {src}: done: {dest}"]
    assert prepare_model(str(src), cache_dir=tmp_path / "cache", progress=True) == dest  # cached: silent
    prepare_model(str(src), cache_dir=tmp_path / "cache2", progress=False)
    assert capsys.readouterr().err == ""


def test_training_step_timer_reports_each_step_and_its_loss(capsys):
    pytest.importorskip("transformers")
    spec = importlib.util.spec_from_file_location("train_grpo_for_progress", REPO / "examples" / "train_grpo.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    times: list[float] = []
    timer = mod.step_timer(times, "GRPO")
    for step in (1, 2):
        timer.on_step_begin(None, SimpleNamespace(global_step=step - 1, max_steps=3), None)
        state = SimpleNamespace(global_step=step, max_steps=3)
        timer.on_step_end(None, state, None)
        timer.on_log(None, state, None, logs={"loss": 0.5 / step, "reward": 0.25})
    err = capsys.readouterr().err.splitlines()
    assert len(times) == 2 and len(err) == 4
    assert re.fullmatch(r"GRPO step 1/3: \d+\.\d s \(mean \d+\.\d s, about \d+ s left\)", err[0]), err
    assert err[1] == "GRPO step 1/3: loss 0.5000" and err[3] == "GRPO step 2/3: loss 0.2500"
    assert err[2].startswith("GRPO step 2/3: ")
    silent = mod.step_timer([], None)
    silent.on_step_begin(None, SimpleNamespace(global_step=0, max_steps=1), None)
    silent.on_step_end(None, SimpleNamespace(global_step=1, max_steps=1), None)
    assert capsys.readouterr().err == ""
