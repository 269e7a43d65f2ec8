"""One-off measurements, each a program run from the repository's root:
``python -m benchmarks.scripts.NAME`` (its docstring says what it measures and how)."""
