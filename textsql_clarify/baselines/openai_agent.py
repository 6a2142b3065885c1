"""An LLM agent behind an OpenAI-compatible chat completions server (vLLM, SGLang, TGI, llama.cpp ...).

The agent sends the shared LLM prompt (:func:`~textsql_clarify.baselines.llm_prompt.agent_messages`:
the env's ``info["messages"]`` plus one worked example, ABISS §5.1 / TIDE App. D) to
``POST {base_url}/chat/completions`` through the ``openai`` client and turns the completion into one
action with :func:`~textsql_clarify.baselines.llm_prompt.extract_action`.

Stop strings: the request carries ``stop`` = the four closing action tags
(:data:`~textsql_clarify.baselines.llm_prompt.STOP_STRINGS`, the OpenAI API's limit is four). Servers
drop the matched stop string from the completion (vLLM's and SGLang's default), so a completion
usually arrives as ``<sql>SELECT 1`` without its ``</sql>``; :func:`extract_action` puts the closing tag
of the opened action back (``dropped_stop=True``) and otherwise sends the completion as the env's parser
reads it.

Network errors (connection refused, timeouts, HTTP 408 / 409 / 429 / 5xx) are retried ``max_retries``
times with exponential backoff, then raise :class:`AgentServerError` naming the server and model;
other HTTP errors (400 bad request, 401, 404 unknown model) raise it at once.

The ``openai`` package is imported lazily (extra ``openai``: ``pip install 'textsql-clarify[openai]'``).
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence
from urllib.parse import urlsplit

from ..errors import TextSQLClarifyError
from ..samples import Sample
from .llm_prompt import STOP_STRINGS, agent_messages, extract_action

__all__ = ["OpenAIAgent", "AgentServerError", "normalize_base_url"]

#: HTTP statuses that are worth another try (the openai client's own retry rule).
_RETRY_STATUS = frozenset({408, 409, 429})


class AgentServerError(TextSQLClarifyError, RuntimeError):
    """The agent's chat completions server could not be reached or refused the request.

    The message names the server (``base_url``), the model and the number of attempts.
    """


def normalize_base_url(base_url: str) -> str:
    """``base_url`` as the ``openai`` client wants it: no trailing slash, ``/v1`` added when the URL has no path.

    vLLM and SGLang serve the OpenAI API under ``/v1``, so ``http://127.0.0.1:8000`` means
    ``http://127.0.0.1:8000/v1``; a URL with a path (``http://host/openai/v1``) is kept as given.

    Args:
        base_url: ``http(s)://host[:port][/path]``.
    Raises:
        ValueError: not an http(s) URL with a host.
    """
    url = str(base_url).strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"base_url must be an http(s) URL such as http://127.0.0.1:8000/v1, got {base_url!r}")
    return url if parts.path not in ("", "/") else url + "/v1"


def check_int_options(*options: tuple[str, Any, int]) -> None:
    """Check integer client options (the OpenAI agent's and the OpenAI-compatible user's).

    Args:
        options: ``(name, value, lowest allowed)`` triples.
    Raises:
        ValueError: a value that is not an ``int`` (a ``bool`` is refused) or is below its lowest, naming it.
    """
    for arg, value, low in options:
        if isinstance(value, bool) or not isinstance(value, int) or value < low:
            raise ValueError(f"{arg} must be an int >= {low}, got {value!r}")


def split_base_url_and_model(rest: str) -> tuple[str, str]:
    """Split ``<base_url>/<model>`` (an ``openai:`` spec without its prefix) into ``(base_url, model)``.

    The base URL ends at the first API version segment (``/v1``), so a served name holding ``/`` stays whole
    (``http://127.0.0.1:8000/v1/Qwen/Qwen2.5-7B-Instruct`` -> ``("http://127.0.0.1:8000/v1",
    "Qwen/Qwen2.5-7B-Instruct")``); without one, the last path segment is the model. One rule for the agent
    spec (:func:`~textsql_clarify.baselines.agents.make_agent`) and the user spec
    (:func:`~textsql_clarify.simulators.openai_user.parse_openai_spec`). The base URL is returned as written
    (callers normalise it with :func:`normalize_base_url`).

    Args:
        rest: the spec after ``openai:``, stripped or not.
    Returns:
        ``(base_url, model)``, both non-empty and stripped.
    Raises:
        ValueError: ``"no model name after the base URL"`` for a bare server URL (``http://host:8000``,
            ``.../v1``), or ``"needs <base_url>/<model>"`` when no ``/`` separates the two.
    """
    import re

    rest = rest.strip()
    whole = urlsplit(rest)
    if (whole.scheme in ("http", "https") and whole.netloc
            and re.fullmatch(r"(/v\d+)?/*", whole.path or "") and not whole.query):
        raise ValueError(f"{rest!r} has no model name after the base URL")
    versioned = re.match(r"^(.*?/v\d+)/(.+)$", rest)  # .../v1/<model>, the model may hold a '/'
    base_url, slash, model = (versioned.group(1), "/", versioned.group(2)) if versioned else rest.rpartition("/")
    if not slash or not base_url.strip() or not model.strip():
        raise ValueError("needs <base_url>/<model>")
    return base_url.strip(), model.strip()


class OpenAIAgent:
    """An agent whose every action is one chat completion from an OpenAI-compatible server.

    Args:
        base_url: the server, e.g. ``http://127.0.0.1:8000/v1`` (``/v1`` is added to a URL without a path,
            see :func:`normalize_base_url`).
        model: the served model name (vLLM's ``--served-model-name``, SGLang's ``--model-path``).
        api_key: sent as the bearer token; default the ``OPENAI_API_KEY`` environment variable, else
            ``"EMPTY"`` (what local vLLM / SGLang servers accept).
        max_tokens: completion length cap in tokens (one action; the closing tag is restored when the
            cap cuts an action short).
        temperature: sampling temperature (0.0: greedy, the project's determinism default).
        timeout_s: per-request timeout in seconds.
        max_concurrency: requests in flight at once in :meth:`act_batch` (threads).
        example: append the worked example to the system message (:func:`agent_messages`).
        max_retries: further attempts after a retryable failure (connection error, timeout, 408 / 409 /
            429 / 5xx) before :class:`AgentServerError`.
        retry_backoff_s: wait before the first retry in seconds, doubled for each further one (cap 8 s).

    Attributes:
        requests_sent: HTTP requests sent so far, retries included (shared by :meth:`fork` copies).
        completions: completions received so far.
        prompt_tokens / completion_tokens: token counts the server reported in ``usage`` (0 when it
            reports none).
        name: ``openai:<model>``. privileged: False (sees only what the env shows).

    Raises:
        ImportError: the ``openai`` package is not installed (names the extra).
        ValueError: a bad ``base_url``, an empty ``model``, or a bad number argument.
    Source: OpenAI chat completions API (``openai`` Python client 1.x / 2.x); vLLM and SGLang
    OpenAI-compatible servers; prompt: ABISS §5.1, TIDE App. D via :mod:`.llm_prompt`.
    """

    privileged = False

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, max_tokens: int = 256,
                 temperature: float = 0.0, timeout_s: float = 60, max_concurrency: int = 8, example: bool = True,
                 max_retries: int = 3, retry_backoff_s: float = 0.5) -> None:
        try:
            import openai
        except ImportError as e:  # pragma: no cover - the extra is installed in CI
            raise ImportError("OpenAIAgent needs the openai package: pip install 'textsql-clarify[openai]'") from e
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty served model name, got {model!r}")
        check_int_options(("max_tokens", max_tokens, 1), ("max_concurrency", max_concurrency, 1),
                          ("max_retries", max_retries, 0))
        if not timeout_s or timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.base_url = normalize_base_url(base_url)
        self.model = model.strip()
        self.max_tokens = max_tokens
        self.temperature = float(temperature)
        self.timeout_s = float(timeout_s)
        self.max_concurrency = max_concurrency
        self.example = bool(example)
        self.max_retries = max_retries
        self.retry_backoff_s = float(retry_backoff_s)
        self.name = f"openai:{self.model}"
        key = api_key if api_key is not None else (os.environ.get("OPENAI_API_KEY") or "EMPTY")
        self._openai = openai
        # the client's own retries are off: this class retries, so that it counts each request it sends
        self._client = openai.OpenAI(base_url=self.base_url, api_key=key, timeout=self.timeout_s, max_retries=0)
        self._lock = threading.Lock()
        self.requests_sent = 0
        self.completions = 0
        self.prompt_tokens = 0
        self.completion_tokens = 0

    # ------------------------------------------------------------------ agent protocol
    def begin_episode(self, sample: Sample | None) -> None:
        """Nothing to prepare: the agent is not privileged and keeps no episode state."""

    def fork(self, k: int) -> "OpenAIAgent":
        """The agent for lockstep env ``k`` (:func:`~textsql_clarify.rollout.episodes.run_lockstep`): this
        same object, since it keeps no per-episode state and its client is thread-safe."""
        return self

    def messages(self, info: dict[str, Any]) -> list[dict[str, str]]:
        """The chat sent for this turn: :func:`agent_messages` of ``info`` (raises KeyError without
        ``info["messages"]``)."""
        return agent_messages(info, example=self.example)

    def act(self, observation: dict[str, Any], info: dict[str, Any]) -> str:
        """One action: a chat completion for ``info``'s messages, cut to one tagged action.

        Args:
            observation: the env's observation (unused: ``info["messages"]`` holds the same content).
            info: the env's ``info`` of this turn.
        Returns:
            The action string (:func:`extract_action` of the completion).
        Raises:
            AgentServerError: the server failed after the retries, or refused the request.
        """
        return extract_action(self.complete(self.messages(info)), dropped_stop=True)

    def act_batch(self, observations: Sequence[dict[str, Any]], infos: Sequence[dict[str, Any]]) -> list[str]:
        """One action per ``(observation, info)`` pair, the requests sent concurrently (at most
        ``max_concurrency`` in flight); the result keeps the input order.

        Raises:
            ValueError: the two lists differ in length.
            AgentServerError: as :meth:`act` (the first failing request's error).
        """
        if len(observations) != len(infos):
            raise ValueError(f"act_batch got {len(observations)} observations and {len(infos)} infos")
        if len(infos) <= 1:
            return [self.act(o, i) for o, i in zip(observations, infos)]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(infos))) as pool:
            return list(pool.map(self.act, observations, infos))

    # ------------------------------------------------------------------ server calls
    def request_kwargs(self, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The keyword arguments of ``client.chat.completions.create`` (the request body's fields)."""
        return {"model": self.model, "messages": messages, "max_tokens": self.max_tokens,
                "temperature": self.temperature, "stop": list(STOP_STRINGS), "n": 1}

    def complete(self, messages: list[dict[str, str]]) -> str:
        """The raw completion text for ``messages`` (``""`` when the server returns no content).

        Raises:
            AgentServerError: a retryable failure repeated ``max_retries + 1`` times, a non-retryable
                HTTP error, or a reply without choices.
        """
        oa = self._openai
        attempts = self.max_retries + 1
        last: BaseException | None = None
        for attempt in range(attempts):
            if attempt:
                time.sleep(min(8.0, self.retry_backoff_s * 2 ** (attempt - 1)))
            with self._lock:
                self.requests_sent += 1
            try:
                resp = self._client.chat.completions.create(**self.request_kwargs(messages))
            except oa.APIConnectionError as e:  # refused, reset, DNS, timeout (APITimeoutError)
                last = e
                continue
            except oa.APIStatusError as e:
                if e.status_code in _RETRY_STATUS or e.status_code >= 500:
                    last = e
                    continue
                raise AgentServerError(
                    f"chat completions server {self.base_url} refused the request for model {self.model!r}: "
                    f"HTTP {e.status_code}: {_short(e)}") from e
            if not getattr(resp, "choices", None):
                raise AgentServerError(f"chat completions server {self.base_url} returned no choices for model "
                                       f"{self.model!r}: {_short(resp)}")
            usage = getattr(resp, "usage", None)
            with self._lock:
                self.completions += 1
                if usage is not None:
                    self.prompt_tokens += int(getattr(usage, "prompt_tokens", 0) or 0)
                    self.completion_tokens += int(getattr(usage, "completion_tokens", 0) or 0)
            return resp.choices[0].message.content or ""
        raise AgentServerError(
            f"chat completions server {self.base_url} (model {self.model!r}) failed {attempts} time(s); "
            f"last error: {type(last).__name__}: {_short(last).rstrip('.')}. Is the server running and serving that model?") from last

    def __repr__(self) -> str:
        return f"OpenAIAgent(base_url={self.base_url!r}, model={self.model!r}, requests_sent={self.requests_sent})"


def _short(obj: Any, n: int = 300) -> str:
    """``str(obj)`` cut to ``n`` characters for an error message."""
    s = str(obj)
    return s if len(s) <= n else s[:n] + "..."
