"""The simulated user over an OpenAI-compatible chat completions server (vLLM, SGLang, TGI, llama.cpp's server).

:class:`OpenAIUserSimulator` is the transformers user (:class:`~.transformers_user.TransformersUserSimulator`)
with each council model replaced by an :class:`OpenAIChatBackend`: a model served behind
``POST {base_url}/chat/completions`` (OpenAI chat completions API). Everything except the model calls is
the transformers user's own code, inherited, not copied: the refusals of unanswerable samples, identifier
probes, content-free clarifications and echoes, the canned refusal of every ``irrelevant`` reply
(:func:`~.prompts.refusal_reply`), grounding, the leakage guard with its regenerations and templated
fallback (:func:`~.leakage.leakage_reasons`, :func:`~.prompts.fallback_reply`), the majority vote, the
TIDE router and the tournament.

What is sent: the chat form of the transformers user's prompts (:func:`~.prompts.render` of
:func:`~.prompts.label_task`, :func:`~.prompts.answer_task`, :func:`~.prompts.judge_task`): the
instruction as the system message, each worked shot as a user / assistant pair, the request's block as
the last user message. The backend's "chat template" is the message list itself (:meth:`OpenAIChatBackend.render_chat`
writes it as JSON, which the backend reads back), so the server applies the model's own template.

Stage 1, the label, uses constrained output: the request carries ``response_format`` with a JSON schema
``{"label": enum[allowed labels]}`` (OpenAI structured outputs, which vLLM, SGLang and llama.cpp's server
accept), and only the labels the sample's group allows are in the enum (ABISS §5.2). A server that
refuses the field (HTTP 400 or 422) is asked again without it, and from then on never with it; the
reply text is then parsed strictly (:func:`parse_choice`: a JSON object with that key, or the bare word),
with one retry that repeats the allowed words. A label that still does not parse is voted ``irrelevant``
(the conservative vote of a tie, ABISS §5.2) and counted in ``stats["unparsed_labels"]``. The judge of the
tournament chooses ``A`` / ``B`` the same way (key ``better``).

Every request carries ``temperature`` and ``seed``: 0.0 for labels and greedy replies, the configured
temperature for sampled replies, and the transformers user's per-stage seeds (:meth:`~.transformers_user.
TransformersUserSimulator._seed`), so a server that honours ``seed`` repeats itself.

The requests of one stage (one per clarification of the batch) are sent concurrently, at most
``max_concurrency`` at once. A connection error, a timeout, or HTTP 408 / 409 / 429 / 5xx is retried
``max_retries`` times with exponential backoff; then, and at once for any other HTTP error or a body
that is not a chat completion, :class:`UserServerError` names the server URL and the model.

Only the standard library is used (``urllib.request``, ``json``). Nothing but the configured server is
contacted. Source: OpenAI API reference, "Create chat completion" (``response_format``, ``seed``,
``temperature``); ABISS §5.2 (two-stage user, run on vLLM there).
"""
from __future__ import annotations

import http.client
import json
import math
import os
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Sequence

from ..errors import TextSQLClarifyError
from .transformers_user import TransformersUserSimulator

__all__ = ["OpenAIUserSimulator", "OpenAIChatBackend", "UserServerError", "parse_openai_spec", "parse_choice"]

#: HTTP statuses worth another try (as the openai client retries them), besides every 5xx.
RETRY_STATUS = frozenset({408, 409, 429})
#: HTTP statuses by which a server refuses ``response_format``: 400 (bad request) or 422 (validation error).
SCHEMA_REFUSED_STATUS = frozenset({400, 422})
_MAX_BACKOFF_S = 8.0
_EXCERPT = 300


class UserServerError(TextSQLClarifyError, RuntimeError):
    """The simulated user's chat completions server failed: unreachable after the retries, an HTTP error,
    or a body that is not a chat completion. The message names the URL, the model and the attempts."""


def _short(obj: Any, n: int = _EXCERPT) -> str:
    s = str(obj)
    return s if len(s) <= n else s[:n] + "..."


def parse_openai_spec(spec: str) -> tuple[str, str]:
    """Split an ``openai:`` simulator spec into ``(base_url, model)``.

    Forms, checked in this order:

    * ``openai:<base_url>#<model>``: everything before the first ``#`` is the base URL, the rest the
      model (a URL fragment is never sent to a server, so the split is unambiguous for any model name);
    * ``openai:<base_url>/<model>`` where the base URL's path holds an API version segment
      (``/v1``): the base URL ends at the first such segment, so a served name with ``/`` stays whole
      (``openai:http://127.0.0.1:8000/v1/Qwen/Qwen2.5-7B-Instruct`` -> model ``Qwen/Qwen2.5-7B-Instruct``);
    * otherwise the last path segment is the model (``openai:http://host/api/my-model``).

    This is the rule of the agent spec (:func:`textsql_clarify.baselines.agents.make_agent`) plus the
    ``#`` form. The base URL is normalised by :func:`~textsql_clarify.baselines.openai_agent.normalize_base_url`
    (``/v1`` added to a URL without a path).

    Args:
        spec: ``"openai:..."`` (the prefix may be left out).
    Returns:
        ``(base_url, model)``, both stripped and non-empty.
    Raises:
        ValueError: no model after the base URL (a bare ``http://host:8000`` or ``.../v1``), or not an
            http(s) URL; the message names the spec and an example.
    """
    from ..baselines.openai_agent import normalize_base_url, split_base_url_and_model

    if not isinstance(spec, str):
        raise ValueError(f"simulator spec must be a string, got {type(spec).__name__}")
    rest = spec.strip()
    if rest.startswith("openai:"):
        rest = rest[len("openai:"):].strip()
    example = "openai:http://127.0.0.1:8000/v1/Qwen2.5-7B-Instruct or openai:http://127.0.0.1:8000/v1#Qwen2.5-7B-Instruct"
    if "#" in rest:
        base, _, model = rest.partition("#")
    else:
        try:
            base, model = split_base_url_and_model(rest)
        except ValueError as e:
            raise ValueError(f"simulator spec {spec!r}: {e}; expected {example}") from None
    if not base.strip() or not model.strip():
        raise ValueError(f"simulator spec {spec!r} needs a base URL and a model; expected {example}")
    try:
        url = normalize_base_url(base)
    except ValueError as e:
        raise ValueError(f"simulator spec {spec!r}: {e}") from None
    return url, model.strip()


def parse_choice(text: str | None, options: Sequence[str], key: str) -> str | None:
    """The option a completion chose, read strictly; ``None`` when it names none.

    Accepted: a JSON object whose ``key`` holds an option (what the constrained request returns), or the
    whole text being one option, compared case-insensitively after stripping white space, surrounding
    quotes and a final ``.`` / ``!``; a leading cue such as ``Label:`` is allowed. Anything else (two
    words, another label, prose) is ``None``: the caller asks once more.

    Args:
        text: the completion's content (``None`` counts as empty).
        options: the allowed options, e.g. ``("technical", "irrelevant")``.
        key: the JSON key of the constrained form (``"label"``).
    Returns:
        The option as given in ``options``, or ``None``.
    """
    by_fold = {o.casefold(): o for o in options}
    t = (text or "").strip()
    if t.startswith("{"):
        try:
            obj = json.loads(t)
        except ValueError:
            return None
        v = obj.get(key) if isinstance(obj, dict) else None
        return by_fold.get(v.strip().casefold()) if isinstance(v, str) else None
    t = re.sub(r"^[A-Za-z ]{1,12}:\s*", "", t) if ":" in t[:14] else t
    t = t.strip().strip("\"'`").strip().rstrip(".!").strip()
    return by_fold.get(t.casefold())


class _Refused(Exception):
    """A non-retryable HTTP status (internal: the caller decides whether it is final)."""

    def __init__(self, status: int, body: str):
        super().__init__(f"HTTP {status}: {_short(body)}")
        self.status = status
        self.body = body


class OpenAIChatBackend:
    """One model on an OpenAI-compatible chat completions server, behind the transformers user's
    :class:`~.hf_models.GenerationBackend` interface (``generate``, ``score``, ``render_chat``) plus
    :meth:`choose` (constrained choice).

    Args:
        base_url: the server's API root, e.g. ``http://127.0.0.1:8000/v1`` (``/v1`` is added to a URL
            without a path); requests go to ``{base_url}/chat/completions``.
        model: the served model name (vLLM ``--served-model-name``, SGLang ``--model-path``).
        api_key: the bearer token; default the ``OPENAI_API_KEY`` environment variable, else none sent.
        timeout_s: seconds per HTTP request (connect and read).
        max_retries: further attempts after a retryable failure (connection error, timeout, 408 / 409 /
            429 / 5xx).
        retry_backoff_s: seconds before the first retry, doubled for each further one (at most 8 s).
        max_concurrency: requests in flight at once for one batch (threads).
        seed: the ``seed`` sent with greedy requests that get no seed of their own.
        choice_max_tokens: token cap of a constrained choice (``{"label": "irrelevant"}`` is about 8).

    Attributes:
        name: ``openai:<model>`` (shows in ``meta["answered_by"]``). chat: True.
        structured: whether ``response_format`` is still sent (False after the server refused it).
        stats: ``requests`` (HTTP requests, retries included), ``completions``, ``retries``,
            ``schema_refused``, ``unparsed`` (choices that did not parse, retries included),
            ``prompt_tokens``, ``completion_tokens`` (as reported in ``usage``).
    Raises:
        ValueError: a bad URL, an empty model, or a bad number argument.
    Source: OpenAI API reference, "Create chat completion".
    """

    chat = True

    def __init__(self, base_url: str, model: str, *, api_key: str | None = None, timeout_s: float = 60.0,
                 max_retries: int = 3, retry_backoff_s: float = 0.5, max_concurrency: int = 8, seed: int = 0,
                 choice_max_tokens: int = 24):
        from ..baselines.openai_agent import check_int_options, normalize_base_url

        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"model must be a non-empty served model name, got {model!r}")
        check_int_options(("max_retries", max_retries, 0), ("max_concurrency", max_concurrency, 1),
                          ("choice_max_tokens", choice_max_tokens, 1))
        for arg, value in (("timeout_s", timeout_s), ("retry_backoff_s", retry_backoff_s)):
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0 or (
                    arg == "timeout_s" and value == 0):
                raise ValueError(f"{arg} must be a number of seconds {'> 0' if arg == 'timeout_s' else '>= 0'}, "
                                 f"got {value!r}")
        self.base_url = normalize_base_url(base_url)
        self.url = self.base_url + "/chat/completions"
        self.model = model.strip()
        self.name = f"openai:{self.model}"
        key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            self._headers["Authorization"] = f"Bearer {key}"
        self.timeout_s = float(timeout_s)
        self.max_retries = max_retries
        self.retry_backoff_s = float(retry_backoff_s)
        self.max_concurrency = max_concurrency
        self.seed = int(seed)
        self.choice_max_tokens = choice_max_tokens
        self.structured = True
        self.stats = {k: 0 for k in ("requests", "completions", "retries", "schema_refused", "unparsed",
                                     "prompt_tokens", "completion_tokens")}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIChatBackend(base_url={self.base_url!r}, model={self.model!r})"

    # ------------------------------------------------------------------ prompts
    def render_chat(self, messages: Sequence[dict], add_generation_prompt: bool) -> str:
        """The chat as JSON text (the server applies the model's template): :meth:`generate`,
        :meth:`score` and :meth:`choose` read it back as messages. ``add_generation_prompt`` is implied
        by the API (the reply is the next assistant turn)."""
        return json.dumps([{"role": m["role"], "content": m["content"]} for m in messages], ensure_ascii=False)

    @staticmethod
    def _messages(prompt: str) -> list[dict]:
        try:
            msgs = json.loads(prompt)
        except (TypeError, ValueError):
            msgs = None
        if not isinstance(msgs, list) or not all(isinstance(m, dict) and {"role", "content"} <= set(m) for m in msgs):
            raise ValueError("OpenAIChatBackend: a prompt must be the JSON message list of render_chat "
                             f"(prompts.render with this backend), got {_short(prompt, 80)!r}")
        return msgs

    def _map(self, fn: Callable, items: list) -> list:
        """``fn`` over ``items`` in order, at most ``max_concurrency`` at once (the first error is raised)."""
        if len(items) <= 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.max_concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    # ------------------------------------------------------------------ GenerationBackend
    def generate(self, prompts: Sequence[str], max_new_tokens: int, stop: str | None = "\n", *,
                 shared_prefix: str = "", do_sample: bool = False, temperature: float = 1.0,
                 top_p: float = 1.0, seed: int | None = None) -> list[str]:
        """One completion per prompt (concurrently), the text cut before ``stop``.

        Greedy (``do_sample=False``) sends ``temperature`` 0.0; sampling sends ``temperature`` and
        ``top_p``; ``seed`` (default :attr:`seed`) is sent either way. ``stop`` is applied here, not sent:
        a chat model that opens with a newline would otherwise return nothing. ``shared_prefix`` is
        unused (the server caches prefixes itself).

        Raises:
            UserServerError: as :meth:`post`.
        """
        sampling = {"temperature": float(temperature), "top_p": float(top_p)} if do_sample else {"temperature": 0.0}
        base = {"max_tokens": int(max_new_tokens), "seed": int(self.seed if seed is None else seed), **sampling}

        def one(prompt: str) -> str:
            text = self.complete(self._messages(prompt), **base)
            if stop:
                text = text.strip()
                text = text.split(stop, 1)[0]
            return text

        return self._map(one, list(prompts))

    def score(self, prompts: Sequence[str], options: Sequence[str], *, shared_prefix: str = "") -> list[list[float]]:
        """A constrained choice among ``options`` per prompt (:meth:`choose`, key ``"better"``) as scores:
        0.0 for the chosen option and ``-inf`` for the others; all 0.0 (no preference) when the reply did not
        parse. The transformers user's tournament reads these as log-likelihoods."""
        opts = [o.strip() for o in options]
        picks = self.choose(prompts, [opts] * len(prompts), key="better")
        return [[0.0] * len(opts) if p is None else [0.0 if o == p else -math.inf for o in opts] for p in picks]

    # ------------------------------------------------------------------ constrained choice
    def choose(self, prompts: Sequence[str], options: Sequence[Sequence[str]], *, key: str = "label",
               seed: int | None = None) -> list[str | None]:
        """For each prompt, the one of its ``options`` the model picks (concurrently).

        While :attr:`structured`, the request carries ``response_format`` = JSON schema
        ``{key: enum[options]}``; an HTTP 400 / 422 to it turns :attr:`structured` off for this backend and
        the request is sent again without it. The reply is read by :func:`parse_choice`; a reply that does
        not parse is asked once more with a reminder of the allowed words. A prompt with one option gets it
        without a request. Greedy (``temperature`` 0.0), with ``seed`` (default :attr:`seed`).

        Returns:
            One option per prompt, or ``None`` where both tries failed to parse.
        Raises:
            UserServerError: as :meth:`post`.
        """
        if len(prompts) != len(options):
            raise ValueError(f"choose got {len(prompts)} prompts and {len(options)} option lists")
        s = int(self.seed if seed is None else seed)

        def one(job: tuple[str, Sequence[str]]) -> str | None:
            prompt, opts = job
            opts = list(opts)
            if len(opts) == 1:
                return opts[0]
            msgs = self._messages(prompt)
            text = self._choice_request(msgs, opts, key, s)
            pick = parse_choice(text, opts, key)
            if pick is None:
                self._count("unparsed")
                reminder = f"Answer with exactly one word: {' or '.join(opts)}."
                again = msgs + [{"role": "assistant", "content": text}, {"role": "user", "content": reminder}]
                text = self._choice_request(again, opts, key, s)
                pick = parse_choice(text, opts, key)
                if pick is None:
                    self._count("unparsed")
            return pick

        return self._map(one, list(zip(prompts, options)))

    def _choice_request(self, msgs: list[dict], opts: list[str], key: str, seed: int) -> str:
        body = {"max_tokens": self.choice_max_tokens, "temperature": 0.0, "seed": seed}
        if self.structured:
            schema = {"type": "object", "properties": {key: {"type": "string", "enum": opts}},
                      "required": [key], "additionalProperties": False}
            fmt = {"type": "json_schema", "json_schema": {"name": key, "schema": schema, "strict": True}}
            try:
                return self.complete(msgs, response_format=fmt, **body)
            except _Refused as e:
                if e.status not in SCHEMA_REFUSED_STATUS:
                    raise self._refused_error(e) from None
                with self._lock:
                    if self.structured:
                        self.structured = False
                        self.stats["schema_refused"] += 1
        try:
            return self.complete(msgs, **body)
        except _Refused as e:
            raise self._refused_error(e) from None

    # ------------------------------------------------------------------ HTTP
    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.stats[what] += n

    def _refused_error(self, e: _Refused) -> UserServerError:
        return UserServerError(f"simulated-user server {self.url} refused the request for model {self.model!r}: "
                               f"HTTP {e.status}: {_short(e.body)}")

    def complete(self, messages: list[dict], **fields: Any) -> str:
        """The content of one chat completion of ``messages`` (``""`` when the server sends none).

        ``fields`` go into the request body next to ``model``, ``messages`` and ``n`` = 1.

        Raises:
            _Refused: internally, a non-retryable HTTP status when ``response_format`` was sent (so that
                :meth:`choose` can fall back); otherwise :class:`UserServerError` for it.
            UserServerError: :meth:`post`'s errors, or a body without ``choices[0].message``.
        """
        body = {"model": self.model, "messages": messages, "n": 1, **fields}
        try:
            data = self.post(body)
        except _Refused as e:
            if "response_format" in fields:
                raise
            raise self._refused_error(e) from None
        try:
            msg = data["choices"][0]["message"]
            content = msg.get("content")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise UserServerError(f"simulated-user server {self.url} (model {self.model!r}) returned no "
                                  f"choices[0].message: {_short(json.dumps(data))}") from None
        if content is not None and not isinstance(content, str):
            raise UserServerError(f"simulated-user server {self.url} (model {self.model!r}) returned a "
                                  f"non-text message content: {_short(content)}")
        usage = data.get("usage") if isinstance(data, dict) else None
        with self._lock:
            self.stats["completions"] += 1
            if isinstance(usage, dict):
                self.stats["prompt_tokens"] += int(usage.get("prompt_tokens") or 0)
                self.stats["completion_tokens"] += int(usage.get("completion_tokens") or 0)
        return content or ""

    def post(self, body: dict) -> dict:
        """POST ``body`` as JSON to ``{base_url}/chat/completions``; the decoded JSON object.

        Retries a connection error, a timeout or HTTP 408 / 409 / 429 / 5xx up to ``max_retries`` times,
        waiting ``retry_backoff_s * 2**k`` seconds (at most 8) before retry ``k + 1``.

        Raises:
            _Refused: another HTTP status (internal).
            UserServerError: the retries ran out (names the URL, the model, the attempts and the last
                error), or the body is not a JSON object (names its first characters).
        """
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        attempts = self.max_retries + 1
        last: BaseException | None = None
        for attempt in range(attempts):
            if attempt:
                self._count("retries")
                time.sleep(min(_MAX_BACKOFF_S, self.retry_backoff_s * 2 ** (attempt - 1)))
            self._count("requests")
            req = urllib.request.Request(self.url, data=data, headers=self._headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
            except urllib.error.HTTPError as e:
                text = _read_error(e)
                if e.code in RETRY_STATUS or e.code >= 500:
                    last = RuntimeError(f"HTTP {e.code}: {_short(text)}")
                    continue
                raise _Refused(e.code, text) from None
            except (urllib.error.URLError, socket.timeout, TimeoutError, ConnectionError,
                    http.client.HTTPException) as e:
                last = e
                continue
            try:
                out = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                out = None
            if not isinstance(out, dict):
                raise UserServerError(f"simulated-user server {self.url} (model {self.model!r}) returned a body "
                                      f"that is not a JSON object: {_short(raw[:_EXCERPT])}")
            return out
        reason = getattr(last, "reason", last)
        raise UserServerError(
            f"simulated-user server {self.url} (model {self.model!r}) failed {attempts} time(s) "
            f"(timeout {self.timeout_s:g} s); last error: {type(last).__name__}: {_short(reason)}. "
            f"Is the server running and serving that model?") from last


def _read_error(e: urllib.error.HTTPError) -> str:
    try:
        return e.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException):
        return ""


class OpenAIUserSimulator(TransformersUserSimulator):
    """The transformers user's protocol (ABISS §5.2 two-stage user; TIDE §4.2 / App. E router) with its
    models on an OpenAI-compatible chat completions server.

    Accepts the keys of the env's ``simulator={"kind": "openai", ...}`` dict minus ``kind``; the string
    spec ``"openai:<base_url>/<model>"`` is :func:`parse_openai_spec`.

    Args:
        base_url: the server's API root (``http://127.0.0.1:8000/v1``).
        model: the served model name, or several names on the same server (a council).
        api_key, timeout_s, max_retries, retry_backoff_s, max_concurrency: :class:`OpenAIChatBackend`.
        max_new_tokens, protocol, grounding, max_regenerations, do_sample, temperature, top_p, seed,
            retry_temperature: as :class:`~.transformers_user.TransformersUserSimulator` (stage-2 replies are
            greedy, ``temperature`` 0.0, unless ``do_sample``).

    Attributes:
        stats: the transformers user's counters plus ``unparsed_labels`` (votes that fell back to
            ``irrelevant`` because the label reply did not parse).
    Raises:
        ValueError: a bad URL, model or argument (as the two classes above).
    Source: ABISS §5.2; OpenAI API reference, "Create chat completion".
    """

    def __init__(self, base_url: str, model: str | Sequence[str], *, api_key: str | None = None,
                 timeout_s: float = 60.0, max_retries: int = 3, retry_backoff_s: float = 0.5,
                 max_concurrency: int = 8, max_new_tokens: int = 32, protocol: str = "abiss",
                 grounding: Any = "auto", max_regenerations: int = 2, do_sample: bool = False,
                 temperature: float = 0.7, top_p: float = 0.95, seed: int = 0, retry_temperature: float = 0.8):
        names = [model] if isinstance(model, str) else list(model or [])
        if not names:
            raise ValueError("model: name at least one served model")
        backends = [OpenAIChatBackend(base_url, m, api_key=api_key, timeout_s=timeout_s, max_retries=max_retries,
                                      retry_backoff_s=retry_backoff_s, max_concurrency=max_concurrency, seed=seed)
                    for m in names]
        super().__init__(backends, max_new_tokens=max_new_tokens, protocol=protocol, grounding=grounding,
                         max_regenerations=max_regenerations, do_sample=do_sample, temperature=temperature,
                         top_p=top_p, seed=seed, retry_temperature=retry_temperature)

    def __repr__(self) -> str:
        b = self.backends[0]
        return f"OpenAIUserSimulator(base_url={b.base_url!r}, models={[x.model for x in self.backends]!r})"

    def _stage1(self, active: list) -> None:
        """Each council model labels every active clarification by a constrained choice among the labels
        its group allows (:meth:`OpenAIChatBackend.choose`, one concurrent round per model); a reply that
        does not parse votes ``irrelevant``."""
        for w in active:
            w.votes = []
        for m, b in enumerate(self.backends):
            prompts = [self._label_prompt(w, b).text for w in active]
            picks = b.choose(prompts, [self._allowed_labels(w) for w in active], key="label",
                             seed=self._seed(1, m, 0))
            for w, pick in zip(active, picks):
                if pick is None:
                    self.stats["unparsed_labels"] += 1
                    w.meta.setdefault("unparsed_label", []).append(self.model_names[m])
                    pick = "irrelevant"
                w.votes.append(pick)
