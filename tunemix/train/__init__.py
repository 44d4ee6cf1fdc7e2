"""The offline trainer: learners, member types, the training stages, the relevance head's fit, the
report and the default configuration (``default.toml``). ``train.train`` runs a configuration."""
