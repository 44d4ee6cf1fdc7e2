"""Compiling the numba kernels ahead of use: the serving warm-up that runs before a service says it
is ready (``serving``), and the whole plan with its background compile for the trainer (``warm``)."""
