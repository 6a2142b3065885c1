"""What each episode expected, for the dialogue browser: the gold SQL, the hidden knowledge, the other readings.

Trajectories do not carry the gold side of a sample (``trajectories.jsonl`` stays one record of what the agent did
per line, and the env never puts a gold into what the agent reads). The report takes it instead from the dataset
that ``run.json`` names (its ``dataset`` spec, :func:`~textsql_clarify.datasets.load_dataset` without the load-time
validation, which the run already did), matching trajectories to samples by ``sample_id``. Where the spec is
missing or no longer loads (a moved file, another machine), the browser says why instead of showing nothing.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..samples import Sample
from .runs import Run

__all__ = ["ExpectedSource", "expected_sources"]


@dataclass
class ExpectedSource:
    """The samples of one run's dataset, by id, or the reason they are not available.

    Attributes:
        spec: the dataset spec read from ``run.json`` (``None`` when the run names none).
        samples: ``sample_id`` -> :class:`~textsql_clarify.samples.Sample` (empty when not loaded).
        reason: why the samples are not available (``None`` when they are).
    """

    spec: str | None
    samples: dict[str, Sample] = field(default_factory=dict)
    reason: str | None = None

    def sample(self, sample_id: str) -> tuple[Sample | None, str | None]:
        """The sample of ``sample_id`` and ``None``, or ``None`` and the reason it is not available."""
        if self.reason is not None:
            return None, self.reason
        s = self.samples.get(sample_id)
        if s is None:
            return None, f"sample {sample_id!r} is not in the dataset {self.spec!r} (changed since the run?)"
        return s, None


def _load(spec: Any) -> ExpectedSource:
    from ..datasets import load_dataset
    from ..errors import TextSQLClarifyError

    if not isinstance(spec, str) or not spec.strip():
        return ExpectedSource(spec=None, reason="run.json names no dataset (the run was evaluated without a "
                                                 "dataset spec), so the gold side cannot be looked up")
    try:
        samples = load_dataset(spec, validate=False)
    except (TextSQLClarifyError, OSError, ValueError, ImportError) as e:  # any loader failure is a shown reason
        return ExpectedSource(spec=spec, reason=f"the dataset {spec!r} named in run.json did not load here: "
                                                f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
    return ExpectedSource(spec=spec, samples={s.id: s for s in samples})


def expected_sources(runs: Sequence[Run]) -> list[ExpectedSource]:
    """One :class:`ExpectedSource` per run, in order; each dataset spec is loaded once for all runs naming it.

    Args:
        runs: the report's runs (:func:`~textsql_clarify.reports.runs.load_runs`); ``run.info["dataset"]`` is read.
    Returns:
        A list as long as ``runs``. Nothing is raised for a dataset that does not load: its source carries the
        reason (the rest of the report does not need the dataset).
    """
    cache: dict[Any, ExpectedSource] = {}
    out = []
    for r in runs:
        spec = r.info.get("dataset")
        key = spec if isinstance(spec, str) else None
        if key not in cache:
            cache[key] = _load(spec)
        out.append(cache[key])
    return out
