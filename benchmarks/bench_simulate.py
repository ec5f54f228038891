"""asv benchmarks of the offline simulator (the compiled serving-loop replay).

``python benchmarks/compare_simulate.py`` prints the same figure beside SGLang's C++ core.
"""

import ngramspec as ns
from ngramspec.streams import embedded_streams_path


class Simulate:
    """All 133 recorded streams through SGLang's serving loop, server defaults."""

    params = (["BFS", "PROB"], [1, 8])
    param_names = ["match_type", "concurrency"]
    timeout = 120

    def setup(self, match_type, concurrency):
        self.rows = ns.read_streams(embedded_streams_path())
        self.config = ns.NgramConfig(match_type=match_type)
        # Compile (or load) the kernel outside the timing.
        ns.simulate(self.rows[:2], config=self.config)

    def time_simulate(self, match_type, concurrency):
        ns.simulate(self.rows, config=self.config, concurrency=concurrency)

    def track_output_tokens_per_second(self, match_type, concurrency):
        return ns.simulate(self.rows, config=self.config,
                           concurrency=concurrency).output_tokens_per_second

    track_output_tokens_per_second.unit = "tokens/s"


class ReadStreams:
    """Reading and checking the shipped corpus (gzipped JSON Lines, 133 requests)."""

    def time_read_streams(self):
        ns.read_streams(embedded_streams_path())
