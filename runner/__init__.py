"""t5x-style runner on JAX SPMD: partitioning, training, evaluation, inference."""
