"""The benchmark's parts (timing, records and tables, profile, Hugging Face twin, evaluation); scripts/benchmark.py runs them."""
