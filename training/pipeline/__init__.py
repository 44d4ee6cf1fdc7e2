"""The training pipeline: configuration, member jobs, orchestration, report, CLI."""
