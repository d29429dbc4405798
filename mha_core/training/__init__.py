"""Training: the toy task, a tiny NumPy trainer built on the core's backward pass, shipped weights."""
