"""Every backend named in ``BACKEND_CLASSES`` follows the declared protocol."""

import inspect

import pytest

from ngramspec.cache.backends import BACKEND_CLASSES, BACKENDS, Backend, PooledBackend, backend_class


def _members(protocol) -> set[str]:
    own = set()
    for klass in protocol.__mro__:
        if klass in (Backend, PooledBackend):
            own |= {n for n in vars(klass) if not n.startswith("_")}
    return own - {"pooled"}


@pytest.mark.parametrize("name", BACKENDS)
def test_backend_has_every_protocol_member(name):
    cls = backend_class(name)
    assert isinstance(cls.pooled, bool)
    required = _members(PooledBackend if cls.pooled else Backend)
    missing = sorted(m for m in required if not hasattr(cls, m))
    assert missing == []
    for m in required - {"node_count"}:
        want = inspect.signature(getattr(PooledBackend, m))
        got = inspect.signature(getattr(cls, m))
        # every positional parameter of the protocol is accepted, in order
        names = [p for p in want.parameters if p not in ("self", "cls", "args")]
        assert [p for p in got.parameters if p in names] == names, (m, got)


def test_the_table_names_the_defaults_first():
    assert BACKENDS[0] == "numba" and set(BACKENDS) == set(BACKEND_CLASSES)
    assert backend_class("reference").pooled is False
    assert backend_class("numba").pooled is True
