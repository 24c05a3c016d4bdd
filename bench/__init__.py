"""oncelog's benchmark harness: `python bench/run.py --help` (see bench/README.md)."""
