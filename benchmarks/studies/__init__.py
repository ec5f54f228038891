"""Measurement scripts: ``python -m benchmarks.studies.NAME --help`` from the repository's
root.  Each one is a script only; what a test or another study needs lives in
``benchmarks.common`` or ``benchmarks.peers``."""
