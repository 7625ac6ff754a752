"""The analyses `python -m scripts.analyze NAME` runs, one module each, registered by name.

A module has `analyze(args)` (args: the parsed flags) and `WRITES_REPORT`: True when `analyze`
returns (result, tables, charts) for scripts/analyze.py to print and write as analysis.json and
report.html under --out; False for a summary that prints and writes its own JSON (--output).
Adding an analysis is adding a module and its name here.
"""
from scripts.analyses import agreement, asq, heap, heap_runs, truncation, turingadvice

ANALYSES = {"turingadvice": turingadvice, "asq": asq, "agreement": agreement, "heap": heap, "heap_runs": heap_runs,
            "truncation": truncation}
