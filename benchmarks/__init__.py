"""Measurements of ngramspec, in three rooms and one shared module.

- ``benchmarks.asv``: the asv suite (one class per operation; ``asv run`` from the
  repository's root, configured by ``asv.conf.json``);
- ``benchmarks.studies``: measurement scripts, each run from the repository's root as
  ``python -m benchmarks.studies.NAME`` (``--help`` for its options);
- ``benchmarks.peers``: the drafters ngramspec is compared with (SGLang's C++ core, Arctic's
  suffix decoding, prompt lookup) and the replay harness and evaluation protocol that drive
  them;
- ``benchmarks.common``: the recorded streams, SGLang's serving trace, the machine line and
  timing helpers, shared by all of the above and by the tests.
"""
