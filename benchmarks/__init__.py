"""Micro-benchmarks we run while developing (not part of the wheel).

Each module runs as ``.venv/bin/python -m benchmarks.NAME`` from the repository root and prints
ratios measured side by side in one run; docs/BENCHMARKS.md gives each command and its figures.
"""
