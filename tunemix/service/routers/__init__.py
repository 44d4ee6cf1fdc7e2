"""One router per resource: health, rank, evaluate, fuse, models, metrics."""
