"""The ``textsql-clarify`` command.

``textsql-clarify eval`` with no options runs the oracle agent on the embedded dataset with the
rule-based user and prints EX and FB per group and per subcategory, each with its n. ``--agent`` takes
any agent spec of :func:`textsql_clarify.baselines.agents.make_agent` (``hf:smollm2``,
``openai:<base_url>/<model>``, ``<module>:<Class>``). ``textsql-clarify models prepare smollm2`` builds the
trainable SmolLM2 checkpoint once; ``models path smollm2`` prints its folder. ``data validate SPEC`` prints
every load-time validation problem with its sample id (exit 0: none flagged, 1: some flagged, 2: the dataset
cannot be loaded); ``data stats SPEC`` counts samples per group, subcategory, difficulty and gold status.
``generate --anchors SPEC | --db FILE --queries FILE.jsonl --out DIR`` grows validated samples from gold queries
with the recipes of :mod:`textsql_clarify.generation` and prints the per-stage rejection table (ABISS App. B,
``docs/generation.md``). ``report RUN_DIR [RUN_DIR ...]`` writes one self-contained HTML report of eval run
folders (leaderboard with paired differences, outcomes, charts with intervals, dialogue browser), or with
``--format md|csv|json`` their tables alone (:mod:`textsql_clarify.reports`, ``docs/metrics.md``).
``score --dataset SPEC --predictions FILE`` replays a file of predicted SQL (JSONL ``{"id", "sql"}`` or one query
per line in gold order) through the env as one-turn SQL episodes, writes eval's three files and tables, and adds
Spider's exact-set-match (:mod:`textsql_clarify.baselines.predictions`, ``docs/metrics.md``).
"""
from __future__ import annotations

import argparse
from typing import Any
import json
import sys
from pathlib import Path

from .errors import TextSQLClarifyError


def _parser() -> argparse.ArgumentParser:
    from .baselines.agents import AGENT_SPEC_FORMS
    from .datasets import list_dataset_kinds
    from .rewards.presets import PRESETS, SUITE_PRESETS
    from .sql.variants import DEFAULT_K

    p = argparse.ArgumentParser(prog="textsql-clarify", description="Text-to-SQL clarification environment tools.")
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("eval", help="evaluate a baseline agent through the environment and print metrics")
    e.add_argument("--dataset", default="embedded",
                   help="dataset spec (default: embedded): " + " | ".join(k.split("  ", 1)[0] for k in list_dataset_kinds())
                        + " (docs/datasets.md)")
    e.add_argument("--agent", default="oracle",
                   help="agent spec (default: oracle): " + " | ".join(AGENT_SPEC_FORMS) +
                        "; hf:smollm2 is the prepared SmolLM2-135M-Instruct")
    e.add_argument("--max-new-tokens", type=int, default=None,
                   help="hf:/openai: agents: most tokens generated per action (default: the agent's, 128 for hf:)")
    e.add_argument("--device", default=None, help="hf: agents: 'auto' (default), 'cpu' or 'cuda'")
    e.add_argument("--limit", type=int, default=None, help="evaluate only the first N samples")
    e.add_argument("--out", default=None,
                   help="folder for trajectories.jsonl, metrics.json and run.json (default: "
                        "runs/<corpus>[-n<limit>]-<agent>-<simulator> and a part per non-default option that changes "
                        "the result, e.g. -seed1 -suite8; a finished run of another configuration there is refused "
                        "unless --fresh; README, Baselines)")
    e.add_argument("--seed", type=int, default=0, help="seed of the first episode (default 0)")
    e.add_argument("--isolation", default="in_process", choices=["in_process", "process"],
                   help="where the SQL runs: 'in_process' (default) or 'process' (worker processes killed at the time "
                        "limit, with a memory cap: for untrusted policies; docs/platform.md, Process isolation)")
    e.add_argument("--simulator", default="rule", help="'rule' (default), 'transformers' (SmolLM2), 'transformers:<model>[,<model>...]' (local paths or cached hub ids; several make a council) or 'openai:<base_url>/<model>' (an OpenAI-compatible server, e.g. openai:http://127.0.0.1:8000/v1/Qwen2.5-7B-Instruct; docs/simulator.md)")
    e.add_argument("--preset", default="binary", choices=sorted(PRESETS) + sorted(SUITE_PRESETS),
                   help="reward preset (default: binary; 'suite' pays ex_suite and needs --ex-mode suite)")
    e.add_argument("--ex-mode", default="single", choices=["single", "suite"],
                   help="'single' (default): EX on each sample's database; 'suite': also test-suite EX (EX_suite, "
                        "EX_strict_suite) over --suite-k database variants of it (Zhong et al. 2020; docs/metrics.md, "
                        "Test-suite EX), built once and cached")
    e.add_argument("--suite-k", type=int, default=None, metavar="K",
                   help=f"with --ex-mode suite: database variants per database (default {DEFAULT_K})")
    e.add_argument("--suite-cache-dir", default=None, metavar="DIR",
                   help="with --ex-mode suite: folder of the cached variants (default: the model cache's variants/)")
    e.add_argument("--max-clarifications", type=int, default=3, help="clarification budget (default 3, ABISS §6.1)")
    e.add_argument("--category-mode", default="taxonomy_free",
                   choices=["ground_truth", "predicted", "taxonomy_only", "taxonomy_free"])
    e.add_argument("--protocol", default="f", choices=["f", "p"], help="chain protocol (TIDE §4.1)")
    e.add_argument("--num-envs", type=int, default=1,
                   help="episodes played at once; their clarifications reach the simulated user in one batch (default 1)")
    e.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="play the episodes on a pool of Ray actors (the 'ray' extra): 'local' (a new instance on this "
                        "machine), 'auto' (the cluster a 'ray start' here joined), 'host:port' or 'ray://host:10001'; "
                        "--ray alone: $RAY_ADDRESS, else local (docs/platform.md, section Ray); --num-envs then counts "
                        "envs per actor")
    e.add_argument("--ray-actors", type=int, default=None, metavar="N",
                   help="with --ray: actors in the pool (default: one per cluster CPU)")
    again = e.add_mutually_exclusive_group()
    again.add_argument("--resume", action="store_true",
                       help="continue the unfinished run journaled in --out (journal.jsonl) and fail if there is none; "
                            "without --resume or --fresh a journal of the same configuration is continued, one of "
                            "another is refused (docs/platform.md, Run folders)")
    again.add_argument("--fresh", "--no-resume", dest="fresh", action="store_true",
                       help="discard any journal in --out, or replace a finished run of another configuration "
                            "there, and play every episode again")
    e.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    e.add_argument("--json", action="store_true", help="print metrics.json to stdout instead of the table")
    e.add_argument("--by", default="group,subcategory", metavar="B1,B2",
                   help="breakdown tables to print, comma-separated: group, subcategory, difficulty, drift_subtype, "
                        "sample_type, or 'none' (default: group,subcategory); metrics.json holds them all")
    e.add_argument("--metrics", default=None, metavar="M1,M2",
                   help="metrics of the headline and breakdown tables, comma-separated (e.g. EX,FB,AIR; names as in "
                        "metrics.json); default: the headline metrics this run defines")
    e.add_argument("--include-indistinguishable", action="store_true",
                   help="keep samples flagged 'indistinguishable' (readings that return the same rows) in the means; "
                        "by default they are left out of every mean and counted")
    _dataset_options(e)
    _score_parser(sub)

    m = sub.add_parser("models", help="trainable offline models: prepare a plain checkpoint, or print its folder")
    msub = m.add_subparsers(dest="models_command", required=True)
    mp = msub.add_parser("prepare", help="convert a packaged model (smollm2) to a plain safetensors checkpoint, once")
    mpath = msub.add_parser("path", help="print the folder a prepared model lives (or would live) in")
    for q in (mp, mpath):
        q.add_argument("name", help="'smollm2' or another model spec (a .gguf file or folder, an installed package)")
        q.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="weights dtype (default float32)")
    mp.add_argument("--force", action="store_true", help="rebuild even if a complete checkpoint exists")

    x = sub.add_parser("export-sft", help="play an agent (the oracle) and write its solved episodes as chat SFT records")
    x.add_argument("--agent", default="oracle", help="agent spec (default: oracle); unsolved episodes are dropped")
    x.add_argument("--dataset", default="embedded", help="dataset spec, as for eval (default: embedded)")
    x.add_argument("--limit", type=int, default=None, help="only the first N samples")
    x.add_argument("--style", default="tagged", choices=["tagged", "tools"],
                   help="assistant turns as tagged actions (default) or as tool calls (integrations.trl_env tools)")
    x.add_argument("--out", required=True, help="the .jsonl file to write")
    x.add_argument("--seed", type=int, default=0, help="seed of the first episode (default 0)")
    x.add_argument("--simulator", default="rule", help="'rule' (default), 'transformers' (SmolLM2), 'transformers:<model>[,<model>...]' (local paths or cached hub ids; several make a council) or 'openai:<base_url>/<model>' (an OpenAI-compatible server, e.g. openai:http://127.0.0.1:8000/v1/Qwen2.5-7B-Instruct; docs/simulator.md)")
    x.add_argument("--max-clarifications", type=int, default=3, help="clarification budget (default 3)")
    x.add_argument("--category-mode", default="taxonomy_free",
                   choices=["ground_truth", "predicted", "taxonomy_only", "taxonomy_free"])
    x.add_argument("--protocol", default="f", choices=["f", "p"], help="chain protocol (TIDE §4.1)")
    x.add_argument("--no-example", action="store_true", help="leave the worked example out of the system message")
    _dataset_options(x)

    d = sub.add_parser("data", help="check a dataset: validate its golds (every problem with its sample id), or count it")
    dsub = d.add_subparsers(dest="data_command", required=True)
    dv = dsub.add_parser("validate", help="run the load-time validation and print every problem; exit 0 when nothing "
                                          "is flagged, 1 when something is, 2 when the dataset cannot be loaded")
    ds = dsub.add_parser("stats", help="print counts per group, subcategory, difficulty and gold status")
    for q in (dv, ds):
        q.add_argument("spec", help="dataset spec, as for eval --dataset")
        q.add_argument("--db-root", default=None, help="folder of <db_id>/<db_id>.sqlite for records that name no database")
        q.add_argument("--json", action="store_true", help="print JSON instead of text")

    r = sub.add_parser("report", help="one self-contained HTML report of eval run folders (leaderboard, paired "
                                      "differences, outcomes, charts, dialogue browser), or their tables alone")
    r.add_argument("runs", nargs="+", metavar="RUN_DIR",
                   help="folders that eval --out wrote; the first is the reference of the paired differences")
    r.add_argument("-o", "--output", default=None,
                   help="file to write (default: report.html for --format html; stdout for md, csv, json)")
    r.add_argument("--format", default="html", choices=["html", "md", "csv", "json"],
                   help="html (default): the page; md | csv | json: the tables alone")
    r.add_argument("--by", default="group,subcategory",
                   help="breakdowns charted and tabled, comma-separated: group, subcategory, difficulty, drift_subtype, "
                        "sample_type (default: group,subcategory)")

    g = sub.add_parser("generate", help="grow validated samples (drift, missing schema, ...) from gold queries "
                                        "(docs/generation.md)")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--anchors", default=None, metavar="SPEC",
                     help="dataset spec whose gold SQL are the anchors (as for eval --dataset, e.g. spider:<root>)")
    src.add_argument("--db", default=None, metavar="FILE", help="a SQLite database (with --queries)")
    g.add_argument("--queries", default=None, metavar="FILE.jsonl",
                   help="with --db: one {\"id\"?, \"question\", \"sql\", \"difficulty\"?} object per line")
    g.add_argument("--recipes", default="drift,missing_schema,lexical_overlap",
                   help="comma-separated recipes (default: the model-free drift,missing_schema,lexical_overlap); "
                        "all: drift, missing_schema, lexical_overlap, abiss, tide_chain, tide_drift, tide_triplets, premise")
    g.add_argument("--out", required=True, metavar="DIR", help="output folder (samples.jsonl, rejections.json, ...)")
    g.add_argument("--seed", type=int, default=0, help="run seed (default 0)")
    g.add_argument("--limit", type=int, default=None, help="only the first N anchors")
    g.add_argument("--model", action="append", default=[], metavar="SPEC",
                   help="a council model (repeatable; needed by the model recipes): a local path, an installed "
                        "package (smollm2), a cached hub id, or 'fake' (the deterministic fake model)")
    g.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="a recipe option (repeatable); each recipe's options are listed in docs/generation.md, and "
                        "an unknown name or a bad value stops the run before it starts")
    g.add_argument("--timeout", type=float, default=5.0, help="seconds per SQL execution in the recipes (default 5)")
    g.add_argument("--device", default="auto", help="council models: 'auto' (default), 'cpu' or 'cuda'")
    g.add_argument("--keep-flag", action="append", default=[], metavar="FLAG",
                   help="a load-time validation flag that does not move a sample out (repeatable; e.g. duplicate_gold "
                        "keeps samples grown from paraphrased anchors; they are written with the flag)")
    g.add_argument("--distinct-golds", action="store_true",
                   help="one anchor per gold SQL (the first; the others are skipped): the strict corpus, without the "
                        "samples grown from a second phrasing of the same query (Spider's paraphrase pairs)")
    g.add_argument("--no-resume", action="store_true", help="start over instead of continuing the run in --out")
    g.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    g.add_argument("--db-root", default=None, help="with --anchors: folder of <db_id>/<db_id>.sqlite files")
    return p


def _dataset_options(q: argparse.ArgumentParser) -> None:
    """``--db-root`` and ``--no-validate``, passed to :func:`textsql_clarify.datasets.load_dataset`."""
    q.add_argument("--db-root", default=None,
                   help="folder of <db_id>/<db_id>.sqlite files, for records that name no database file")
    q.add_argument("--no-validate", action="store_true",
                   help="skip the load-time validation (golds executed, interpretations compared; cached per file)")


def _safe_name(text: str, limit: int = 80) -> str:
    """``text`` as one folder-name part: every run of characters other than letters, digits, ``.``,
    ``_`` and ``-`` becomes ``_`` (``hf:smollm2`` -> ``hf_smollm2``); a longer name keeps its first 20
    and last characters, ``limit`` in all (a spec's kind and its model or class name)."""
    import re

    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", str(text)).strip("._") or "agent"
    return safe if len(safe) <= limit else safe[:20] + "_" + safe[-(limit - 21):]


#: the file name stem that ``textsql-clarify generate`` writes in every output folder
#: (:data:`textsql_clarify.generation.pipeline.SAMPLES`): generic, so its folder names the corpus instead.
_GENERIC_STEMS = frozenset({"samples"})


def _dataset_kind(spec: str) -> str:
    """A short folder-safe name for a dataset spec: ``embedded``, ``spider``, or the JSONL file's stem; a
    generated corpus (``<dir>/samples.jsonl``, what ``generate --out <dir>`` writes) is named by its folder,
    so that two corpora get two run folders (``gen/drift/samples.jsonl`` -> ``drift``)."""
    from .datasets import _LOADERS

    spec = str(spec)
    if spec.split(":", 1)[0] in _LOADERS:  # mini-interact:<dir>/mini_interact.jsonl is mini-interact
        return spec.split(":", 1)[0]
    if spec.startswith("jsonl:"):  # jsonl:<file>.jsonl[:<db root>]: the file's stem, as for a plain path
        spec = spec[len("jsonl:"):]
        low = spec.lower()
        if ".jsonl:" in low:
            spec = spec[: low.index(".jsonl:") + len(".jsonl")]
    elif ":" in spec and not spec.endswith(".jsonl"):
        return spec.split(":", 1)[0]
    path = Path(spec)
    if path.stem in _GENERIC_STEMS and path.parent.name:
        return _safe_name(path.parent.name)
    return path.stem or "dataset"


def load_samples(args: argparse.Namespace) -> list:
    """Load ``--dataset`` (with ``--limit``, ``--db-root``, ``--no-validate``) for eval, score and export-sft,
    saying on stderr what loads and, once loaded, how many samples in how many seconds: a generated corpus
    validates its golds for tens of seconds before the first episode (:func:`textsql_clarify.progress.report`:
    shown on a terminal, never with ``--no-progress``).

    Returns:
        The samples (:func:`textsql_clarify.datasets.load_dataset`). Raises: what that raises.
    """
    import time

    from .datasets import load_dataset
    from .progress import report

    progress = False if getattr(args, "no_progress", False) else None
    validate = not args.no_validate
    report(f"loading dataset {args.dataset}" + (" and validating its golds (cached per file)" if validate else "")
           + " ...", progress)
    start = time.perf_counter()
    samples = load_dataset(args.dataset, limit=args.limit, db_root=args.db_root, validate=validate)
    report(f"loaded {_plural(len(samples), 'sample')} of {args.dataset} in {time.perf_counter() - start:.1f} s",
           progress)
    return samples


def _corpus_name(spec: str, db_root: str | None = None) -> str:
    """The dataset part of a default run folder: ``embedded``, else :func:`_dataset_kind` and the first 8 hex
    digits of the SHA-256 of the spec (stripped) and ``--db-root``, so two corpora of one kind (a generated
    ``gen/spider/samples.jsonl`` and ``spider:<root>``, or two Spider roots) never share a folder."""
    import hashlib

    spec = str(spec).strip()
    if spec == "embedded" and db_root is None:
        return "embedded"
    digest = hashlib.sha256(f"{spec}\0{db_root or ''}".encode("utf-8", "backslashreplace")).hexdigest()[:8]
    return f"{_dataset_kind(spec)}-{digest}"


def _suite_tag(args: argparse.Namespace) -> str:
    """``-suite<K>`` for a test-suite run (K = ``--suite-k`` or the default), else empty."""
    from .sql.variants import DEFAULT_K

    return f"-suite{args.suite_k or DEFAULT_K}" if args.ex_mode == "suite" else ""


def default_eval_folder(args: argparse.Namespace) -> Path:
    """``eval``'s run folder when ``--out`` is not given: ``runs/<corpus>[-n<limit>]-<agent>-<simulator>``, then a
    part for each option that changes the result and is not its default: ``-p`` (protocol), ``-<preset>``,
    ``-seed<N>``, ``-suite<K>``, ``-clar<N>`` (``--max-clarifications``), ``-<category mode>``, ``-tok<N>``
    (``--max-new-tokens``). The defaults give ``runs/embedded-oracle-rule``.

    Args:
        args: the parsed ``eval`` flags. Returns: the folder, relative to the working directory.
    Source: README, Baselines (the folder layout).
    """
    parts = [_corpus_name(args.dataset, args.db_root)]
    if args.limit is not None:
        parts.append(f"n{args.limit}")
    name = "-".join(parts + [_safe_name(args.agent), _safe_name(args.simulator)])
    name += "-p" if args.protocol == "p" else ""
    name += f"-{args.preset}" if args.preset != "binary" else ""
    name += f"-seed{args.seed}" if args.seed != 0 else ""
    name += _suite_tag(args)
    name += f"-clar{args.max_clarifications}" if args.max_clarifications != 3 else ""
    name += f"-{args.category_mode}" if args.category_mode != "taxonomy_free" else ""
    name += f"-tok{args.max_new_tokens}" if args.max_new_tokens is not None else ""
    return Path("runs") / name


def default_score_folder(args: argparse.Namespace) -> Path:
    """``score``'s run folder when ``--out`` is not given: ``runs/<corpus>[-n<limit>]-predictions-<file stem>``
    with ``-suite<K>`` for a test-suite run (:func:`default_eval_folder`'s parts)."""
    parts = [_corpus_name(args.dataset, args.db_root)]
    if args.limit is not None:
        parts.append(f"n{args.limit}")
    return Path("runs") / ("-".join(parts + ["predictions", _safe_name(Path(args.predictions).stem)])
                           + _suite_tag(args))


def _refuse_other_finished_run(out: str, info: dict) -> None:
    """Raise when ``out`` holds a finished run whose result fields differ from the new run's ``info``
    (:func:`~textsql_clarify.rollout.run_journal.finished_run_differences`).

    Raises:
        RunFolderError: naming the folder, the fields that differ and ``--fresh``.
    """
    from .rollout.run_journal import RunFolderError, finished_run_differences

    diff = finished_run_differences(out, info)
    if diff is not None:
        raise RunFolderError(f"{out} holds a finished run of another configuration ({diff}); pass --fresh to "
                             f"replace it, or give another --out folder")


def _eval(args: argparse.Namespace) -> int:
    from .baselines.agents import make_agent
    from .rollout.evaluation import evaluate
    from .rewards.metrics import METRICS, SUITE_METRICS
    from .rewards.report import parse_breakdowns, parse_metric_names, render_table

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    breakdowns = parse_breakdowns(args.by)  # bad names fail before the run, not after it
    chosen = None if args.metrics is None else parse_metric_names(args.metrics)
    unknown = [m for m in chosen or () if m not in METRICS + SUITE_METRICS and not m.startswith("components.")]
    if unknown:
        raise ValueError(f"--metrics: unknown metric(s) {unknown}; valid: {', '.join(METRICS + SUITE_METRICS)}, "
                         "components.<set>.precision|recall")
    suite_kwargs = suite_options(args)
    if args.num_envs < 1:
        raise ValueError(f"--num-envs must be >= 1, got {args.num_envs}")
    if args.ray_actors is not None and (args.ray is None or args.ray_actors < 1):
        raise ValueError(f"--ray-actors needs --ray and must be >= 1, got {args.ray_actors}")
    if args.max_new_tokens is not None and args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    samples = load_samples(args)
    if args.out is None:
        args.out = str(default_eval_folder(args))
    env_kwargs = dict(simulator=args.simulator, reward_preset=args.preset, isolation=args.isolation,
                      max_clarifications=args.max_clarifications, category_mode=args.category_mode,
                      protocol=args.protocol, **suite_kwargs)
    backend = "local" if args.ray is None else "ray"
    from .rollout.evaluation import run_info
    from .rollout.run_journal import run_folder

    with run_folder(args.out):  # the check of a finished run and the run itself, under one lock
        if not args.fresh:
            _refuse_other_finished_run(args.out, run_info({"agent": args.agent}, dataset=args.dataset, seed=args.seed,
                                                          backend=backend, num_envs=args.num_envs,
                                                          n_samples=len(samples), env_kwargs=env_kwargs,
                                                          samples=samples))
        try:
            agent = make_agent(args.agent, seed=args.seed, max_new_tokens=args.max_new_tokens, device=args.device)
        except ImportError as e:
            raise ValueError(f"agent {args.agent!r} needs an optional library: {e}") from e
        _, metrics = evaluate(samples, agent, seed=args.seed, out_dir=args.out, progress=not args.no_progress,
                              num_envs=args.num_envs, agent_spec=args.agent,
                              include_indistinguishable=args.include_indistinguishable,
                              backend=backend, ray_address=args.ray or None,
                              ray_actors=args.ray_actors, dataset=args.dataset,
                              resume=True if args.resume else (False if args.fresh else None),
                              agent_options={"max_new_tokens": args.max_new_tokens, "device": args.device},
                              **env_kwargs)
    resumed = _resumed_episodes(args.out)
    if resumed:
        print(f"resumed {_plural(resumed, 'episode')} of {len(samples)} from the journal in {args.out}", file=sys.stderr)
    if args.json:
        print(json.dumps(metrics, indent=2, default=str))
    else:
        privileged = " (privileged: the agent sees the gold)" if metrics["run"]["privileged"] else ""
        print(f"dataset={args.dataset} agent={args.agent} simulator={args.simulator} episodes={len(samples)}"
              f"{privileged}")
        print(render_table(metrics, breakdowns=breakdowns, columns=chosen))
        fv = metrics["overall"].get("format_valid_rate") or {}
        if fv.get("n"):
            print(f"format-valid actions: {fv['value']:.3f} (n={fv['n']} actions; refused ones count as invalid)")
        stats = getattr(agent, "stats", None)
        if isinstance(stats, dict) and stats.get("actions"):
            print(f"agent {getattr(agent, 'name', args.agent)}: {stats['actions']} actions, "
                  f"{stats.get('format_valid', 0)} parsed ({stats.get('format_valid', 0) / stats['actions']:.3f})"
                  + (f", {agent.generate_calls} generate calls" if hasattr(agent, "generate_calls") else ""))
        line = f"wrote {Path(args.out)}: trajectories.jsonl, metrics.json, timings.jsonl and run.json"
        print(line if len(line) <= 100 else f"wrote {Path(args.out)}:\n  trajectories.jsonl, metrics.json, timings.jsonl and run.json")
    return 0


def suite_options(args: argparse.Namespace) -> dict[str, Any]:
    """The env's test-suite EX options from ``--ex-mode``, ``--suite-k`` and ``--suite-cache-dir`` (eval, score and
    the OpenEnv server): ``{}`` for ``single``, else ``{"ex_mode": "suite", "suite_k", "suite_cache_dir"}``.

    Raises:
        ValueError: ``--suite-k`` below 1, or a suite option without ``--ex-mode suite``.
    """
    if args.ex_mode == "suite":
        if args.suite_k is not None and args.suite_k < 1:
            raise ValueError(f"--suite-k must be >= 1, got {args.suite_k}")
        return {"ex_mode": "suite", "suite_k": args.suite_k, "suite_cache_dir": args.suite_cache_dir}
    if args.suite_k is not None or args.suite_cache_dir is not None:
        raise ValueError("--suite-k and --suite-cache-dir need --ex-mode suite")
    return {}


def _resumed_episodes(out: str) -> int:
    """``episodes_resumed`` of the ``run.json`` that eval just wrote in ``out`` (0 when it says none)."""
    try:
        return int(json.loads((Path(out) / "run.json").read_text(encoding="utf-8")).get("episodes_resumed") or 0)
    except (OSError, ValueError, AttributeError):
        return 0


def _models(args: argparse.Namespace) -> int:
    """``models prepare NAME`` (build the checkpoint once, print its folder) / ``models path NAME``."""
    from .models import PREPARABLE, prepare_model, prepared_path

    if args.models_command == "prepare":
        print(prepare_model(args.name, dtype=args.dtype, force=args.force))
        return 0
    from .models import _is_complete

    name = args.name if args.name in PREPARABLE else (Path(args.name).stem or "model")
    folder = prepared_path(name, dtype=args.dtype)
    print(folder)
    if not _is_complete(folder):
        print(f"note: not prepared yet; run: textsql-clarify models prepare {args.name} --dtype {args.dtype}",
              file=sys.stderr)
        return 1
    return 0


def _export_sft(args: argparse.Namespace) -> int:
    """``export-sft``: :func:`~textsql_clarify.rollout.sft_export.sft_records` then ``write_sft_jsonl``;
    prints how many episodes were kept and dropped."""
    from .baselines.agents import make_agent
    from .rollout.sft_export import sft_records, write_sft_jsonl

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    samples = load_samples(args)
    try:
        agent = make_agent(args.agent, seed=args.seed)
        records = sft_records(samples, agent, style=args.style, seed=args.seed, example=not args.no_example,
                              simulator=args.simulator, max_clarifications=args.max_clarifications,
                              category_mode=args.category_mode, protocol=args.protocol)
    except ImportError as e:
        raise ValueError(f"export-sft --style {args.style} with agent {args.agent!r} needs an optional library: {e}") from e
    if not records:  # an empty training file would only fail later, in the trainer
        raise ValueError(f"export-sft kept no records, none of the episodes was solved ({records.summary()}); "
                         f"{args.out} was not written")
    path = write_sft_jsonl(records, args.out)
    print(records.summary())
    print(f"wrote {len(records)} {args.style} records to {path}")
    return 0


def _data(args: argparse.Namespace) -> int:
    """``data validate SPEC`` (exit 0: nothing flagged, 1: something flagged) and ``data stats SPEC``
    (:mod:`textsql_clarify.datasets.validate`, :mod:`textsql_clarify.datasets.stats`). The text output shows
    control characters of ids and messages as escapes (:func:`~textsql_clarify.text.terminal_safe`); ``--json``
    keeps them exact, as JSON escapes (:func:`~textsql_clarify.text.terminal_safe_json`)."""
    from .datasets import load_dataset
    from .datasets.stats import dataset_stats, render_stats, render_validation
    from .datasets.validate import validate_samples
    from .text import terminal_safe, terminal_safe_json

    spec = args.spec.strip()
    report = validate_samples(load_dataset(spec, db_root=args.db_root, validate=False), spec=spec)
    if args.data_command == "stats":
        stats = dataset_stats(report.samples)
        print(json.dumps({"spec": spec, **stats}, indent=2) if args.json else terminal_safe(render_stats(stats, spec)))
        return 0
    if args.json:
        print(terminal_safe_json(json.dumps({"spec": spec, "n": len(report.samples), "flagged": report.n_flagged,
                                             "counts": report.counts(), "cached": report.cached,
                                             "problems": [{"sample_id": p.sample_id, "flag": p.flag,
                                                           "message": p.message} for p in report.problems]},
                                            indent=2, ensure_ascii=False)))
    else:  # ids and messages come from the dataset: a control character in them is shown, not obeyed
        print(terminal_safe(render_validation(report, spec)))
    return 1 if report.n_flagged else 0


def _generate(args: argparse.Namespace) -> int:
    """``generate``: anchors (:func:`~textsql_clarify.generation.anchors.load_anchors`) x recipes ->
    :func:`~textsql_clarify.generation.pipeline.generate`; prints the rejection table and the counts."""
    from .generation.anchors import load_anchors
    from .generation.base import check_options
    from .generation.pipeline import generate
    from .generation.recipes import make_recipes

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    if (args.db is None) != (args.queries is None):
        raise ValueError("--db and --queries go together")
    options = {}
    for kv in args.option:
        key, sep, value = kv.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--option takes KEY=VALUE, got {kv!r}")
        options[key.strip()] = value
    recipes = make_recipes(args.recipes)
    check_options(recipes, options)  # before the anchors and the models load (generate checks again)
    anchors = load_anchors(args.anchors, db=args.db, queries=args.queries, limit=args.limit, db_root=args.db_root)
    council = None
    if args.model:
        from .generation.council import load_council

        council = load_council(args.model, device=args.device)
    print(anchors.summary(), file=sys.stderr)
    report = generate(anchors, recipes, args.out, seed=args.seed, council=council, resume=not args.no_resume,
                      progress=not args.no_progress, timeout_s=args.timeout, options=options,
                      keep_flags=args.keep_flag, distinct_golds=args.distinct_golds)
    if args.distinct_golds:
        from .generation.anchors import SAME_GOLD

        dropped = report.manifest["anchors"].get("skipped", {}).get(SAME_GOLD, 0)
        print(f"--distinct-golds: {report.manifest['anchors']['n']} anchors kept, {dropped} skipped ({SAME_GOLD})",
              file=sys.stderr)
    print(report.table(width=100))
    print("\n" + "\n".join(generate_summary(report.counts, report.samples_path, report.resumed, report.units)))
    if report.load_validation:
        print(f"  moved out by the load-time validation: {len(report.load_validation)} (rejections.json)")
    return 0


def _plural(n: int, word: str) -> str:
    """``1 sample``, ``2 samples`` (``word`` is the singular)."""
    return f"{n} {word}" + ("" if n == 1 else "s")


def generate_summary(counts: dict, samples_path: Path | str, resumed: int, units: int,
                     width: int = 100) -> list[str]:
    """The lines ``generate`` prints after its rejection table, each at most ``width`` columns
    (a path longer than that is the only thing on its line).

    Args:
        counts: the manifest's ``counts`` block (``lines``, ``samples``, ``paired_originals``, ``by_recipe``).
        samples_path: the ``samples.jsonl`` written.
        resumed, units: units taken from the journal, and all units.
        width: columns (the tables' width).
    Returns:
        The lines: what was written, then one line per recipe: its samples, and their drift subtypes (only the
        samples that carry a drift have one, so they are counted apart) or else their groups.
    """
    import textwrap

    def fit(parts: list[str], sep: str = "; ") -> list[str]:
        """Join ``parts`` with ``sep``, going on to an indented line where the next part does not fit."""
        out = [parts[0]]
        for part in parts[1:]:
            if len(out[-1] + sep + part) <= width:
                out[-1] += sep + part
            else:
                out[-1] += sep.rstrip()
                out.append("    " + part)
        return [w for line in out for w in (textwrap.wrap(line, width, subsequent_indent="    ",
                                                          break_long_words=False, break_on_hyphens=False)
                                            if len(line) > width and line.strip() else [line])]

    head = f"wrote {_plural(counts['lines'], 'line')} to {samples_path}"
    rest = (f"{_plural(counts['samples'], 'sample')}, {_plural(counts['paired_originals'], 'paired original')} "
            f"({resumed} of {_plural(units, 'unit')} from the journal)")
    if len(f"{head}: {rest}") <= width:
        lines = [f"{head}: {rest}"]
    elif len(head) + 1 <= width:
        lines = [head + ":", "  " + rest]
    else:  # the path alone on its line
        lines = [f"wrote {_plural(counts['lines'], 'line')} to", f"  {samples_path}:", "  " + rest]
    for name, b in counts["by_recipe"].items():
        parts = [f"  {name}: {_plural(b['samples'], 'sample')}"]
        sub = b.get("by_drift_subtype") or {}
        if sub:
            with_drift = sum(sub.values())
            label = ("drift subtypes" if with_drift == b["samples"]
                     else f"drift subtypes of the {with_drift} with a drift")
            parts.append(f"{label}: " + ", ".join(f"{k} {v}" for k, v in sub.items()))
        elif b.get("by_group"):
            parts[0] += " (" + ", ".join(f"{k} {v}" for k, v in b["by_group"].items()) + ")"
        if b.get("paired_originals"):
            parts.append(_plural(b["paired_originals"], "paired original"))
        lines += fit(parts)
    return lines


def _report(args: argparse.Namespace) -> int:
    """``report RUN_DIR ...``: the HTML page (:func:`~textsql_clarify.reports.write_report`) or, with
    ``--format md|csv|json``, the tables (:func:`~textsql_clarify.reports.render_tables`), printed or written
    to ``-o``."""
    from .reports import BREAKDOWNS, load_runs, render_tables

    by = [b.strip() for b in args.by.split(",") if b.strip()]
    bad = [b for b in by if b not in BREAKDOWNS]
    if bad or not by:
        raise ValueError(f"--by takes breakdowns from {', '.join(BREAKDOWNS)}, got {args.by!r}")
    runs = load_runs(args.runs)
    from .reports.leaderboard import sample_overlaps

    for o in sample_overlaps(runs):  # the paired row is all "—" without shared samples: say so
        print(f"warning: run {o['run']} shares {o['shared']} of its {o['n']} sample ids with the reference run "
              f"{o['reference']} ({o['reference_n']} ids); its paired differences are over those {o['shared']}"
              + (" (all undefined)" if o["shared"] == 0 else ""), file=sys.stderr)
    if args.output is not None:  # never overwrite what the report reads
        from .reports.runs import METRICS, RUN_INFO, TRAJECTORIES

        target = Path(args.output).resolve()
        for r in runs:
            if target.parent == r.path.resolve() and target.name in (TRAJECTORIES, METRICS, RUN_INFO):
                raise ValueError(f"-o {args.output} is a file of the run {r.path}; write the report elsewhere")
    if args.format == "html":
        from .reports.html import render_html

        try:
            page = render_html(runs, by=by)
        except ImportError as e:
            raise ValueError(str(e)) from e
        from .reports.output import replace_text

        out = replace_text(args.output or "report.html", page)  # never a cut page over the earlier one
        print(f"wrote {out} ({len(runs)} run(s), {sum(len(r.trajectories) for r in runs)} episodes)")
        return 0
    text = render_tables(runs, args.format, by=by)
    if args.output is None:
        from .text import valid_unicode

        sys.stdout.write(valid_unicode(text))
    else:
        from .reports.output import replace_text

        replace_text(args.output, text)
        print(f"wrote {args.output}")
    return 0


def _score_parser(sub: argparse._SubParsersAction) -> None:
    """``score --dataset SPEC --predictions FILE``: the options of :func:`_score`."""
    from .sql.variants import DEFAULT_K

    c = sub.add_parser("score", help="score a file of predicted SQL (JSONL {id, sql} or one query per line in gold "
                                     "order) through the environment, with Spider's exact-set-match (EM)")
    c.add_argument("--dataset", required=True, help="dataset spec the predictions are for (as eval's --dataset)")
    c.add_argument("--fresh", "--no-resume", dest="fresh", action="store_true",
                   help="discard a journal left in --out by an interrupted run, or replace a finished run of other "
                        "predictions or options (default: continue one of the same predictions and options; another "
                        "one is refused)")
    c.add_argument("--predictions", required=True, metavar="FILE",
                   help="JSONL lines {\"id\": <sample id>, \"sql\": ...}, or Spider's predicted.txt: one query per "
                        "line in the dataset's gold order (told apart by content; docs/metrics.md)")
    c.add_argument("--limit", type=int, default=None,
                   help="score only the first N samples of the dataset (the file then predicts those N)")
    c.add_argument("--out", default=None, help="folder for trajectories.jsonl, metrics.json and run.json (default: "
                                               "runs/<corpus>[-n<limit>]-predictions-<file stem>[-suite<K>])")
    c.add_argument("--ex-mode", default="single", choices=["single", "suite"],
                   help="'suite': also test-suite EX over --suite-k database variants (as eval's)")
    c.add_argument("--suite-k", type=int, default=None, metavar="K",
                   help=f"with --ex-mode suite: database variants per database (default {DEFAULT_K})")
    c.add_argument("--suite-cache-dir", default=None, metavar="DIR", help="with --ex-mode suite: variants' folder")
    c.add_argument("--isolation", default="in_process", choices=["in_process", "process"],
                   help="where the SQL runs (as eval's)")
    c.add_argument("--include-indistinguishable", action="store_true", help="as eval's")
    c.add_argument("--by", default="group,subcategory", metavar="B1,B2", help="breakdown tables to print (as eval's)")
    c.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    c.add_argument("--json", action="store_true", help="print metrics.json to stdout instead of the tables")
    _dataset_options(c)


def _score(args: argparse.Namespace) -> int:
    """Read the predictions, replay them through the env, print eval's tables and the EM table."""
    from .baselines.predictions import read_predictions, render_exact_match, score_predictions
    from .rewards.report import parse_breakdowns, render_table

    breakdowns = parse_breakdowns(args.by)
    suite_kwargs = suite_options(args)
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    samples = load_samples(args)
    predictions = read_predictions(args.predictions, samples, limit=args.limit)
    stem = Path(args.predictions).stem
    if args.out is None:
        args.out = str(default_score_folder(args))
    from .baselines.predictions import predictions_digest
    from .baselines.rollout import run_info
    from .baselines.run_journal import run_folder

    # one lock over the replay and the exact-match rewrite of metrics.json: no other run writes the folder
    # between the eval's files and EM's (evaluate's own lock on the folder nests in this one)
    with run_folder(args.out):
        if not args.fresh and all(s.id in predictions for s in samples):  # else score_predictions refuses
            spec = f"predictions:{_safe_name(stem)}@{predictions_digest({s.id: predictions[s.id] for s in samples})}"
            _refuse_other_finished_run(args.out, run_info({"agent": spec}, dataset=args.dataset, seed=0,
                                                          backend="local", num_envs=1, n_samples=len(samples),
                                                          env_kwargs={"isolation": args.isolation, **suite_kwargs},
                                                          samples=samples))
        _, metrics = score_predictions(samples, predictions, out_dir=args.out, progress=not args.no_progress,
                                       dataset=args.dataset, name=_safe_name(stem), isolation=args.isolation,
                                       include_indistinguishable=args.include_indistinguishable,
                                       resume=False if args.fresh else None, **suite_kwargs)
    if args.json:
        print(json.dumps(metrics, indent=2, default=str))
        return 0
    print(f"dataset={args.dataset} predictions={args.predictions} episodes={len(samples)}")
    print(render_table(metrics, breakdowns=breakdowns, replay=True))  # no agent-behaviour metrics: one SQL turn each
    print()
    print(render_exact_match(metrics))
    print(f"wrote {Path(args.out)}: trajectories.jsonl, metrics.json, timings.jsonl and run.json")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point. Returns the exit status (0 ok, 2 bad input; ``data validate``: 1 when a sample is flagged;
    130 when interrupted with Ctrl-C, after one line on stderr that says how to resume ``eval`` / ``score``)."""
    args = _parser().parse_args(argv)
    import warnings

    # loaders' warnings (skipped turns, ...) as one "warning:" line each, without Python's file:line prefix,
    # written above a running progress bar rather than into it (progress.show_warning)
    from .progress import show_warning

    warnings.formatwarning = lambda message, category, *a, **k: f"warning: {message}\n"
    warnings.showwarning = show_warning
    try:
        if args.command == "eval":
            return _eval(args)
        if args.command == "models":
            return _models(args)
        if args.command == "export-sft":
            return _export_sft(args)
        if args.command == "data":
            return _data(args)
        if args.command == "generate":
            return _generate(args)
        if args.command == "report":
            return _report(args)
        if args.command == "score":
            return _score(args)
    except (TextSQLClarifyError, ValueError, OSError, KeyError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: one line, not a traceback; 130 = 128 + SIGINT, as a shell reports it
        print(interrupted_line(args, list(sys.argv[1:] if argv is None else argv)), file=sys.stderr)
        return 130
    return 1


def interrupted_line(args: argparse.Namespace, argv: list[str]) -> str:
    """The one stderr line of a command stopped by Ctrl-C: ``interrupted``; for ``eval`` and ``score`` also how
    many finished episodes the run folder's journal keeps (its whole lines after the header) and the command
    that resumes them: ``argv`` shell-quoted, without ``--fresh`` / ``--no-resume`` (which would discard them).

    Args:
        args: the parsed flags (``args.out`` is the run folder once the command chose it). argv: the arguments.
    Returns:
        The line, without its newline. Source: docs/platform.md, Run folders (Ctrl-C); Python ``shlex.join``.
    """
    import shlex

    if args.command not in ("eval", "score"):
        return "interrupted"
    from .rollout.run_journal import JOURNAL

    again = shlex.join(["textsql-clarify", *(a for a in argv if a not in ("--fresh", "--no-resume"))])
    out = getattr(args, "out", None)
    try:
        done = max(0, (Path(out) / JOURNAL).read_bytes().count(b"\n") - 1) if out else 0
    except OSError:
        done = 0
    where = f"the journal in {out}" if out else "the run folder's journal"
    return (f"interrupted: {where} keeps {_plural(done, 'finished episode')}; `{again}` resumes the run "
            f"(--fresh starts over)")


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
