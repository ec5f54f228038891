"""Recorded token streams: reading and writing them (``files.py``), importing chat or token-id
logs (``importers.py``) through a model's chat template (``chat_template.py``)."""

from .files import (REQUIRED_FIELDS, SAMPLING_FIELDS, StreamError, check_streams, decoding_of,
                    describe_decoding, embedded_streams_path, fresh_streams_path, iter_streams,
                    read_streams, stream_paths, validate_record, write_streams)

__all__ = ["StreamError", "read_streams", "iter_streams", "stream_paths", "write_streams",
           "check_streams", "embedded_streams_path", "fresh_streams_path", "validate_record",
           "REQUIRED_FIELDS", "SAMPLING_FIELDS", "decoding_of", "describe_decoding"]
