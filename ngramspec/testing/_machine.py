"""``check_drafter``: a Hypothesis state machine that drives any cache beside the reference."""

from __future__ import annotations

import dataclasses
import inspect
import time
from typing import Any, Callable

from hypothesis import HealthCheck, Verbosity, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule, \
    run_state_machine_as_test

try:  # the shrink deadline is not public API: used where it exists
    from hypothesis.internal.conjecture import engine as _engine
except ImportError:  # pragma: no cover
    _engine = None

from ..cache import NgramCache
from ..config import NgramConfig
from . import strategies as nst
from ._compare import describe_difference

__all__ = ["DrafterMismatch", "check_drafter", "as_factory", "calls_made", "make_checked",
           "replay_script"]

REQUIRED = ("insert", "match", "erase", "reset")
_BY_KEYWORD = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
# How the checks call each method: (positional arguments as NgramCache names them, keywords).
_CALLS = {"insert": (("sequences",), ()), "match": (("contexts",), ()),
          "stateful match": (("contexts",), ("request_ids", "total_lens")),
          "erase": (("request_ids",), ()), "reset": ((), ())}


class DrafterMismatch(AssertionError):
    """The drafter under test differs from the reference; the message is a replay script.

    ``config``, ``ops`` (:class:`~ngramspec.testing.strategies.Op`) and ``failure`` hold the
    counterexample itself."""

    def __init__(self, config: NgramConfig, ops: list[nst.Op], failure: str) -> None:
        self.config, self.ops, self.failure = config, ops, failure
        super().__init__(f"the drafter differs from the reference after {len(ops)} "
                         f"operations; replay:\n\n{replay_script(config, ops, failure)}")

    def __reduce__(self):  # picklable, for test runners that ship exceptions around
        return (type(self), (self.config, self.ops, self.failure))


def as_factory(make_cache: Any) -> Callable[[NgramConfig], Any]:
    """``make_cache`` as a function of the config: a class or function with a parameter named
    ``config`` is called as ``make_cache(config=config)`` (so ``NgramCache`` itself, whose
    options are keyword-only, is a factory); anything else with the config as its one
    positional argument.  A signature that allows neither is refused here, before any cache
    is made."""
    if not callable(make_cache):
        raise TypeError(f"make_cache must be a callable taking an NgramConfig and returning a "
                        f"cache (a class or a function), got {type(make_cache).__name__}")
    try:
        sig = inspect.signature(make_cache)
    except (TypeError, ValueError):  # no signature to read: called as documented
        return make_cache
    config = sig.parameters.get("config")
    if config is not None and config.kind in _BY_KEYWORD and _binds(sig, (), ("config",)):
        return lambda c: make_cache(config=c)
    if _binds(sig, ("config",), ()):
        return make_cache
    name = getattr(make_cache, "__name__", type(make_cache).__name__)
    raise TypeError(f"make_cache must take the NgramConfig as its one argument (make_cache("
                    f"config)) or as config=; {name}{sig} can be called neither way")


def _binds(sig: inspect.Signature, args: tuple[str, ...], keywords: tuple[str, ...]) -> bool:
    try:
        sig.bind(*args, **dict.fromkeys(keywords))
    except TypeError:
        return False
    return True


def calls_made(*, stateless: bool, stateful: bool, erase: bool) -> list[str]:
    """The calls (keys of ``_CALLS``) a check makes: matches without and with request ids."""
    return (["insert"] + ["match"] * stateless + ["stateful match"] * stateful
            + ["erase"] * erase + ["reset"])


def _check_interface(cache: Any, calls: list[str]) -> None:
    """Each call as the checks make it must bind to the cache's method: a TypeError naming
    the method, its signature and the missing keyword or argument, before any example."""
    for call in calls:
        args, keywords = _CALLS[call]
        method = call.split()[-1]
        try:
            sig = inspect.signature(getattr(cache, method))
        except (TypeError, ValueError):  # a builtin without a signature: not checked
            continue
        where = f"{type(cache).__name__}.{method}{sig}"
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD
                        for p in sig.parameters.values())
        for kw in keywords:
            p = sig.parameters.get(kw)
            if not takes_any and (p is None or p.kind not in _BY_KEYWORD):
                raise TypeError(f"{where} takes no keyword {kw!r}; the checks call "
                                f"{method}(contexts, request_ids=[...], total_lens=[...]) with "
                                "NgramCache.match's keywords: rename the adapter's parameters")
        if not _binds(sig, args, keywords):
            shown = ", ".join(args + tuple(f"{k}=..." for k in keywords))
            raise TypeError(f"{where} cannot be called as {method}({shown}), as the checks "
                            f"call NgramCache.{method}")


def make_checked(factory: Callable[[NgramConfig], Any], config: NgramConfig,
                 calls: list[str] | None = None) -> Any:
    """``factory(config)`` (see :func:`as_factory`), checked to have ``NgramCache``'s methods
    and, given ``calls`` (:func:`calls_made`), to take those calls."""
    try:
        cache = factory(config)
    except Exception as e:
        raise TypeError(f"make_cache({config!r}) raised {type(e).__name__}: {e}") from e
    missing = [m for m in REQUIRED if not callable(getattr(cache, m, None))]
    if missing:
        raise TypeError(
            f"make_cache(config) must return an object with NgramCache's methods "
            f"{', '.join(REQUIRED)}; it returned a {type(cache).__name__}, which lacks "
            f"{', '.join(missing)} (wrap your drafter in a thin adapter class)")
    if calls:
        _check_interface(cache, calls)
    return cache


def config_source(config: NgramConfig) -> str:
    """``NgramConfig(...)`` as Python source, naming only what differs from the defaults."""
    default = NgramConfig(profile=config.profile)
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}
    shown = {k: v for k, v in fields.items()
             if v != getattr(default, k) or k in ("match_type", "capacity")}
    if config.profile != "sglang-0.5.23":
        shown["profile"] = config.profile
    return "NgramConfig(" + ", ".join(f"{k}={v!r}" for k, v in shown.items()) + ")"


def replay_script(config: NgramConfig, ops: list[nst.Op], failure: str) -> str:
    """A short Python script that replays ``ops`` on your cache and on the reference."""
    lines = ["import ngramspec as ns",
             "from ngramspec.testing import assert_drafts_equal",
             "",
             f"config = ns.{config_source(config)}",
             "cache = make_cache(config)  # the drafter under test",
             'ref = ns.NgramCache(config=config, backend="reference")']
    for op in ops:
        call = op.call()
        if op.kind == "match":
            lines.append(f"assert_drafts_equal(cache.{call},\n"
                         f"                    ref.{call})")
        else:
            lines.append(f"cache.{call}; ref.{call}")
    if failure.startswith("len(cache)"):
        lines.append("assert len(cache) == len(ref)")
    return "\n".join(lines) + "\n# fails with:\n" + "\n".join("# " + s for s in
                                                          failure.splitlines())


def _machine(make_cache: Callable[[NgramConfig], Any], profile: str, stateful: bool,
             tight: bool | None, compare: Callable[[Any, NgramCache], None] | None
             ) -> type[RuleBasedStateMachine]:

    class DrafterVsReference(RuleBasedStateMachine):
        """Insert / stateful and stateless match / erase / reset, compared after every step."""

        @initialize(config=nst.configs(profile=profile, tight=bool(tight)),
                    vocab=nst.vocabularies())
        def setup(self, config: NgramConfig, vocab: tuple[int, int]) -> None:
            self.config, self.vocab = config, vocab
            self.ops: list[nst.Op] = []
            self.ref = NgramCache(config=config, backend="reference")
            self.cache = make_checked(make_cache, config)
            # Built once: drawing from the same strategy objects keeps each step cheap.
            self.next_op = nst.next_operation(config, vocab, nst.History(), stateful=stateful)

        def _fail(self, failure: str) -> None:
            raise DrafterMismatch(self.config, list(self.ops), failure)

        @rule(data=st.data())
        def step(self, data: st.DataObject) -> None:
            op = data.draw(self.next_op, label="op")
            self.ops.append(op)
            failure = _check_step(self.cache, self.ref, op, compare)
            if failure is not None:
                self._fail(failure)

    return DrafterVsReference


def _check_step(cache: Any, ref: NgramCache, op: nst.Op,
                compare: Callable[[Any, NgramCache], None] | None) -> str | None:
    """Apply ``op`` to both caches; what differs afterwards, or None."""
    want = nst.apply(ref, op)
    try:
        got = nst.apply(cache, op)
    except Exception as e:  # a valid operation must not raise
        return f"cache.{op.call()} raised {type(e).__name__}: {e}"
    if op.kind == "match":
        try:
            diff = describe_difference(got, want, names=("cache", "reference"))
        except TypeError as e:
            raise TypeError(f"cache.match(...) returned {type(got).__name__}: {e}") from None
        if diff is not None:
            return diff
    # Node counts, where the drafter under test reports one (len()).
    if hasattr(type(cache), "__len__"):
        n_got, n_want = len(cache), len(ref)
        if n_got != n_want:
            return f"len(cache) == {n_got}, the reference has {n_want} trie nodes"
    if compare is not None:
        try:
            compare(cache, ref)
        except AssertionError as e:
            return f"compare(cache, ref) failed: {type(e).__name__}: {e}"
    return None


def _replay(make_cache: Callable[[NgramConfig], Any], config: NgramConfig, ops: list[nst.Op],
            compare: Callable[[Any, NgramCache], None] | None) -> tuple[int, str] | None:
    """(index of the failing op, failure) when ``ops`` on fresh caches fail, else None."""
    cache, ref = make_checked(make_cache, config), NgramCache(config=config, backend="reference")
    for k, op in enumerate(ops):
        failure = _check_step(cache, ref, op, compare)
        if failure is not None:
            return k, failure
    return None


def _simplify(make_cache: Callable[[NgramConfig], Any], found: "DrafterMismatch",
              compare: Callable[[Any, NgramCache], None] | None,
              seconds: float) -> "DrafterMismatch":
    """Greedy clean-up after Hypothesis's shrinker: drop whole operations and empty sequences
    while the replay still fails (cheap: no strategies, concrete operations)."""
    config, ops, failure = found.config, list(found.ops), found.failure
    stop = time.perf_counter() + seconds

    def fails(candidate: list[nst.Op]) -> tuple[int, str] | None:
        try:
            return _replay(make_cache, config, candidate, compare)
        except Exception:  # a candidate the cache cannot even replay is not simpler
            return None

    k = len(ops) - 1
    while k >= 0 and time.perf_counter() < stop:
        trimmed = []
        if ops[k].kind == "insert" and any(not s for s in ops[k].sequences):
            kept = tuple(s for s in ops[k].sequences if s)
            trimmed = [ops[:k] + ([dataclasses.replace(ops[k], sequences=kept)] if kept
                                  else []) + ops[k + 1:]]
        for candidate in [ops[:k] + ops[k + 1:]] + trimmed:
            result = fails(candidate)
            if result is not None:
                ops, failure = candidate[:result[0] + 1], result[1]
                break
        k = min(k, len(ops)) - 1
    return DrafterMismatch(config, ops, failure)




def check_drafter(make_cache: Callable[[NgramConfig], Any], *, profile: str = "sglang-0.5.23",
                  max_examples: int = 200, steps: int = 25, stateful: bool = True,
                  tight: bool | None = None,
                  compare: Callable[[Any, NgramCache], None] | None = None,
                  shrink_seconds: float = 20.0, derandomize: bool = True) -> None:
    """Drive ``make_cache(config)`` beside the reference backend under a Hypothesis state
    machine; raise with a shrunk counterexample, printed as a replay script, on any difference.

    Each example draws a configuration of ``profile`` (tight and roomy capacities, BFS and
    PROB), a vocabulary, and up to ``steps`` operations (inserts, fan-outs among them; matches
    with request ids whose ``total_lens`` grow, repeat and jump; stateless matches; erases;
    resets).  After every match the drafts must be identical (tokens, masks, ``num_drafts``),
    and, if the cache has ``len()``, its node count equal to the reference's.

    Parameters
    ----------
    make_cache : class or callable
        Makes a fresh cache from an :class:`~ngramspec.NgramConfig`: a class or function with
        a parameter named ``config`` is called as ``make_cache(config=config)`` (so
        ``ns.NgramCache`` itself will do), anything else as ``make_cache(config)``.  The cache
        is any object with ``insert(sequences)``, ``match(contexts, request_ids=None,
        total_lens=None)`` (returning a :class:`~ngramspec.DraftBatch` or anything with
        ``tokens``, ``mask``, ``num_drafts``), ``erase(request_ids)`` and ``reset()``, as
        :class:`~ngramspec.NgramCache` has them.  Before the first example one cache is made
        and its methods' signatures are checked against the calls the checks make.
    profile : {"sglang-0.5.23", "sglang-0.5.9"}
    max_examples, steps : int
        Examples (fresh caches) and operations per example.
    stateful : bool
        ``False`` for a drafter that matches statelessly only: no ``request_ids``, no erase.
    tight : bool, optional
        ``True``: only capacities that force eviction.  Default: half of the examples.
    compare : callable, optional
        ``compare(cache, ref)``, called after every step with your cache and the reference
        :class:`~ngramspec.NgramCache`: more checks of your own (internal state, say); an
        ``AssertionError`` from it fails the run like a difference in drafts.
    shrink_seconds : float
        How long to shrink a counterexample before printing it (best effort: Hypothesis's own
        shrink deadline, which otherwise is minutes; shrinking big fan-outs is slow).
    derandomize : bool
        Default True: the same examples on every run (reproducible in CI).

    Raises
    ------
    DrafterMismatch
        An ``AssertionError`` whose message is a Python script replaying the shrunk
        counterexample, ending with the two drafts drawn as trees.
    TypeError, ValueError
        Before any example: ``make_cache`` is not callable or cannot take a config; the cache
        lacks one of the four methods, or a method cannot take a call the checks make (a
        ``match`` without the keywords ``request_ids``/``total_lens``, say; the message
        names the method, its signature and the keyword); a profile that does not exist.

    Examples
    --------
    >>> import ngramspec as ns
    >>> from ngramspec.testing import check_drafter
    >>> check_drafter(lambda config: ns.NgramCache(config=config, backend="numba"),
    ...               max_examples=5)
    >>> check_drafter(ns.NgramCache, max_examples=5)          # a class is a factory too
    """
    factory = as_factory(make_cache)
    nst._check_profile(profile)
    for name, value in (("max_examples", max_examples), ("steps", steps)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive int, got {value!r}")
    if isinstance(shrink_seconds, bool) or not isinstance(shrink_seconds, (int, float)) \
            or not shrink_seconds > 0:
        raise ValueError(f"shrink_seconds must be a positive number, got {shrink_seconds!r}")
    # One cache, inspected before Hypothesis runs: an interface error is named as such.
    probe = NgramConfig(profile=profile, capacity=100)
    stateful_calls = stateful and probe.stateful
    make_checked(factory, probe, calls_made(stateless=True, stateful=stateful_calls,
                                            erase=stateful_calls))
    machine = _machine(factory, profile, stateful, tight, compare)
    limit = "MAX_SHRINKING_SECONDS"
    before = getattr(_engine, limit, None)
    if before is not None:
        setattr(_engine, limit, shrink_seconds)
    try:
        run_state_machine_as_test(machine, settings=settings(
            max_examples=max_examples, stateful_step_count=steps, deadline=None,
            derandomize=derandomize, database=None, verbosity=Verbosity.quiet,
            suppress_health_check=list(HealthCheck)))
    except DrafterMismatch as found:
        raise _simplify(factory, found, compare, seconds=min(5.0, shrink_seconds)) \
            from None
    finally:
        if before is not None:
            setattr(_engine, limit, before)
