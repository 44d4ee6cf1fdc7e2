"""The relevance head's training stage: fitting calibrated grade probabilities on the mix's
validation scores (``fit``, ``stage``) and the head fitted beside a given mix (``beside``)."""
