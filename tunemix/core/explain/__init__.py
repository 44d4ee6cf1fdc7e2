"""Exact explanations of a model's scores: per-feature contributions whose sum is the score
(``explanation`` is the entry point; the other modules are its exact games per layer)."""
