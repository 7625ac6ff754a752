"""Flax T5.1.1 scoring models: pure JAX, no TensorFlow."""
