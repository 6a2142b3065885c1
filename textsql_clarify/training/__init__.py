"""Training loops that the trainer libraries do not provide (see each module's doc)."""
