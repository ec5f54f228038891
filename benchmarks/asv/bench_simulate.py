"""asv benchmarks of the offline simulator (the engine's compiled serving-loop replay): the
shipped corpus through the serving loop, per configuration and concurrency.

The simulator's speed goals, one line each, medians of several runs:
``python -m benchmarks.studies.simulate_speed``.
"""

import ngramspec as ns
from ngramspec.streams import embedded_streams_path

from benchmarks.common import SPEED_CONFIGS as CONFIGS, load_rows


class Simulate:
    """All 133 recorded streams through the serving loop."""

    params = (list(CONFIGS), [1, 8])
    param_names = ["config", "concurrency"]
    timeout = 120

    def setup(self, config, concurrency):
        self.rows = load_rows()
        self.config = CONFIGS[config]()
        ns.simulate(self.rows[:2], config=self.config)  # compile or load the kernel outside the timing

    def time_simulate(self, config, concurrency):
        ns.simulate(self.rows, config=self.config, concurrency=concurrency)

    def track_output_tokens_per_second(self, config, concurrency):
        return ns.simulate(self.rows, config=self.config,
                           concurrency=concurrency).output_tokens_per_second

    track_output_tokens_per_second.unit = "tokens/s"


class ReadStreams:
    """Reading and checking the shipped corpus (gzipped JSON Lines, 133 requests)."""

    def time_read_streams(self):
        ns.read_streams(embedded_streams_path())
