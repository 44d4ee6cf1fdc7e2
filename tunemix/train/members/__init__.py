"""Member types: one class per learner family (``types`` holds the interface and the registry),
the automatic member choice (``auto``) and member names (``names``)."""
