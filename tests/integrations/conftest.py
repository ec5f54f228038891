"""Fixtures of the integration tests."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="module")
def wheel():
    """vLLM 0.33's wheel files, loaded (``benchmarks.peers.vllm``); skips where pip cannot
    download the wheel or torch is missing."""
    from benchmarks.peers import vllm as vllm_peer

    try:
        vllm_peer.wheel_modules()
    except vllm_peer.PeerUnavailable as e:
        pytest.skip(f"vLLM's wheel unavailable: {e}")
    return vllm_peer
