"""Thin adapters from the env to trainers and env protocols (README "Serving: OpenEnv and verifiers", "Trainer adapters").

Nothing here is imported by ``import textsql_clarify``, and this package imports nothing heavy: each
module imports its optional library (TRL, datasets, transformers, OpenEnv, verifiers) inside its
functions. The modules:

* :mod:`.splits`: deterministic train / held-out split of sample ids, stratified by group or disjoint by
  database; the sample selection every adapter applies (ids, split side, excluded flags); loading the
  training samples that are available.
* :mod:`.corpus`: the training corpus: every present source, ``indistinguishable`` samples dropped, balanced
  by group with pairs kept together.
* :mod:`.trl_env`: ``GRPOTrainer(environment_factory=...)``: the env as a class whose public methods
  are tools (``ask_user``, ``submit_sql``, ``report_unanswerable``, ``classify``), the prompt dataset,
  and a tool-calling chat template for models whose own template has none (SmolLM2).
* :mod:`.trl_rollout`: ``GRPOTrainer(rollout_func=...)``: multi-turn rollouts with the env's own
  tagged actions, token in / token out, with an ``env_mask`` over the simulated user's tokens.
* :mod:`.openenv_server`, :mod:`.verifiers_env`: the env served over OpenEnv, and as a verifiers env.
"""
