"""The OpenEnv server's ASGI app as a module attribute, for ``openenv.yaml``'s ``app`` field.

OpenEnv's tooling starts an environment's server as ``python -m uvicorn <app> --host 0.0.0.0 --port
<port>`` with ``<app>`` read from ``openenv.yaml`` (openenv-core 0.3,
``openenv/core/containers/runtime/daytona_provider.py``), so the app must be an attribute of an
importable module. ``app`` here is :func:`~textsql_clarify.integrations.openenv_server.make_app` over the
embedded set, built on first access (PEP 562 module ``__getattr__``), so importing this module loads
nothing. For another dataset or simulator run ``python -m textsql_clarify.integrations.openenv_server
--dataset SPEC ...`` (README, "Serving: OpenEnv and verifiers").
"""
from __future__ import annotations

from typing import Any

__all__ = ["app"]

_APP: Any = None


def __getattr__(name: str) -> Any:
    """``app``: the FastAPI app of ``make_app("embedded")``, built once.

    Raises:
        AttributeError: any other name.
        ImportError: openenv-core is not installed (extra ``openenv``).
    """
    global _APP
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _APP is None:
        from .openenv_server import make_app

        _APP = make_app("embedded")
    return _APP
