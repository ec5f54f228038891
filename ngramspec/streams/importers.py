"""Traffic logs into recorded streams: chat logs through the model's own chat template, or
logs that already carry token ids.

Formats (``format=``):

- ``"openai-chat"``: JSON Lines, one conversation per line, ``{"messages": [{"role": ...,
  "content": ...}, ...], "tools": [...]}`` (``tools`` optional).
- ``"sharegpt"``: ``{"conversations": [{"from": "human" | "gpt" | "system" | "tool", "value":
  ...}, ...]}`` per line, or one JSON array of such objects.
- ``"hf-dataset"``: a Hugging Face dataset saved to disk (a directory of ``.arrow`` files) or
  given as ``.parquet``, ``.arrow``, ``.jsonl`` or ``.json`` files; each row has ``messages``
  (as openai-chat) or ``conversations`` (as sharegpt).  Arrow and Parquet need ``pyarrow``.
- ``"token-ids"``: records with token ids already (vLLM-style ``prompt_token_ids`` and
  ``token_ids``, or ``outputs[0].token_ids``; ``fields=`` maps other layouts).

How a conversation becomes streams: one stream per assistant message, in order.  For the
assistant message at position ``k``, ``prompt_ids`` is the chat template applied to
``messages[:k]`` with the generation prompt (system, tool and earlier assistant messages
kept, the conversation's ``tools`` passed to the template), tokenised as the tokenizer's own
``apply_chat_template(messages[:k], add_generation_prompt=True)`` does; ``output_ids`` is
what the template renders for that assistant message after the generation prompt, tokenised
on its own (as the model generated it, from an empty continuation) and cut after its last
end-of-turn token (the tokenizer's ``eos_token`` and the ``eos_token_id`` of
``generation_config.json``), so that whitespace the template puts after it is dropped.

Re-tokenised text can differ from the ids the model generated (a model may emit a
non-canonical split of the same text): logs with token ids (``"token-ids"``) are exact,
text logs are an approximation.
"""

from __future__ import annotations

import collections
import gzip
import io
import json
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

from .chat_template import ImportRecordError, chat_renderer, load_chat_tokenizer
from .files import StreamError, validate_record

__all__ = ["FORMATS", "ImportReport", "import_streams", "load_chat_tokenizer",
           "conversation_turns", "SHAREGPT_ROLES"]

FORMATS = ("openai-chat", "sharegpt", "hf-dataset", "token-ids")

#: ShareGPT speakers (``from``) and the chat roles they become.
SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant",
                  "assistant": "assistant", "chatgpt": "assistant", "model": "assistant",
                  "system": "system", "tool": "tool", "function": "tool",
                  "observation": "tool"}

_ROLES = ("system", "developer", "user", "assistant", "tool", "function", "ipython")

# Where token-ids records keep their fields, tried in order (``fields=`` overrides).
_TOKEN_FIELDS = {"prompt_ids": ("prompt_ids", "prompt_token_ids"),
                 "output_ids": ("output_ids", "token_ids", "output_token_ids",
                                "outputs.0.token_ids"),
                 "id": ("id", "request_id")}

_CHUNK = 2048  # conversations rendered and tokenised together


@dataclass
class ImportReport:
    """What :func:`import_streams` did."""

    out: str
    records: int = 0
    streams: int = 0
    #: Skipped records (or assistant turns) per reason.
    skipped: dict[str, int] = field(default_factory=dict)
    #: The first messages (file, line, field, what), one per skipped item.
    errors: list[str] = field(default_factory=list)
    #: Turns kept whole because no end-of-turn token was found in them.
    no_end_token: int = 0

    def summary(self) -> str:
        """One line: written, and skipped by reason."""
        line = (f"{self.streams:,} streams from {self.records:,} records written to "
                f"{self.out}")
        n = sum(self.skipped.values())
        if n:
            line += f"; skipped {n:,}: " + ", ".join(
                f"{c:,} {r}" for r, c in sorted(self.skipped.items(), key=lambda kv: -kv[1]))
        if self.no_end_token:
            line += (f"; {self.no_end_token:,} assistant turns had no end-of-turn token and "
                     "were kept whole")
        return line


# --- reading records ------------------------------------------------------------------------


def _open_text(path: Path) -> tuple[io.TextIOBase, Any]:
    raw = open(path, "rb")
    magic = raw.read(2)
    raw.seek(0)
    if magic == b"\x1f\x8b":
        return io.TextIOWrapper(gzip.GzipFile(fileobj=raw), encoding="utf-8"), raw
    return io.TextIOWrapper(raw, encoding="utf-8"), raw


def _json_records(path: Path, progress: Callable[[int], None]) -> Iterator[tuple[str, Any]]:
    """(where, parsed or an ImportRecordError) per JSON Lines line, or per item of a JSON
    array file."""
    name = str(path)
    text, raw = _open_text(path)
    try:
        with text:
            first = ""
            while not first:
                ch = text.read(1)
                if not ch or not ch.isspace():
                    first = ch or "\0"
            text.seek(0)
            if first == "[":
                try:
                    items = json.load(text)
                except json.JSONDecodeError as e:
                    yield (f"{name}:{e.lineno}", ImportRecordError(
                        f"{name}:{e.lineno}: not valid JSON ({e.msg} at column {e.colno}); "
                        "the whole JSON array is unusable", "malformed JSON"))
                    return
                progress(raw.tell())
                for i, item in enumerate(items):
                    yield f"{name}: item {i}", item
                return
            for lineno, line in enumerate(text, 1):
                if lineno % 256 == 0:
                    progress(raw.tell())
                if not line.strip():
                    continue
                where = f"{name}:{lineno}"
                try:
                    yield where, json.loads(line.rstrip("\r\n"))
                except json.JSONDecodeError as e:
                    yield where, ImportRecordError(
                        f"{where}: not valid JSON ({e.msg} at column {e.colno})",
                        "malformed JSON")
            progress(raw.tell())
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise StreamError(f"{name}: cannot be read as (gzipped) UTF-8 JSON: {e}") from None


def _arrow_records(path: Path, progress: Callable[[int], None]) -> Iterator[tuple[str, Any]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise StreamError(f"{path}: reading Arrow or Parquet needs pyarrow: pip install "
                          "'ngramspec[parquet]'") from None
    try:
        if path.suffix == ".parquet":
            table = pq.read_table(path)
        else:
            try:
                with pa.memory_map(str(path)) as src:
                    table = pa.ipc.open_stream(src).read_all()
            except pa.ArrowInvalid:
                with pa.memory_map(str(path)) as src:
                    table = pa.ipc.open_file(src).read_all()
    except Exception as e:  # pyarrow raises several types for unreadable files
        raise StreamError(f"{path}: cannot be read as Arrow/Parquet: {e}") from None
    for i, row in enumerate(table.to_pylist()):
        yield f"{path}: row {i}", row
    progress(path.stat().st_size)


def _dataset_files(path: Path) -> list[Path]:
    """The data files of a dataset saved to disk (a directory), in their saved order."""
    state = path / "state.json"
    if state.is_file():
        try:
            files = [path / f["filename"] for f in
                     json.loads(state.read_text(encoding="utf-8"))["_data_files"]]
            if files:
                return files
        except (ValueError, KeyError, TypeError, OSError):
            pass
    files = sorted(p for p in path.iterdir() if p.suffix in (".arrow", ".parquet"))
    if not files:
        raise StreamError(f"{path}: a directory without .arrow or .parquet files (a dataset "
                          "saved with save_to_disk, or pass the data files)")
    return files


def _sources(paths: Sequence[str | os.PathLike[str]], fmt: str) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.exists():
            raise StreamError(f"no such file {str(p)!r}")
        if p.is_dir():
            if fmt != "hf-dataset":
                raise StreamError(f"{p}: is a directory; --format {fmt} reads files "
                                  "(a saved dataset directory needs --format hf-dataset)")
            out.extend(_dataset_files(p))
        else:
            out.append(p)
    return out


def _records(path: Path, progress: Callable[[int], None]) -> Iterator[tuple[str, Any]]:
    if path.suffix in (".arrow", ".parquet"):
        return _arrow_records(path, progress)
    return _json_records(path, progress)


# --- conversations --------------------------------------------------------------------------


def _messages(record: Any, where: str, fmt: str) -> tuple[list[dict], Any]:
    """The conversation of a record as chat messages, and its tools (or None)."""
    if not isinstance(record, Mapping):
        raise ImportRecordError(f"{where}: a record must be a JSON object, got "
                                f"{type(record).__name__}", "not an object")
    if fmt == "hf-dataset":
        fmt = "openai-chat" if "messages" in record else "sharegpt" \
            if "conversations" in record else ""
        if not fmt:
            raise ImportRecordError(f"{where}: field 'messages' (or 'conversations') is "
                                    "missing", "missing messages")
    key = "messages" if fmt == "openai-chat" else "conversations"
    if key not in record:
        raise ImportRecordError(f"{where}: field {key!r} is missing", f"missing {key}")
    conv = record[key]
    if not isinstance(conv, list):
        raise ImportRecordError(f"{where}: field {key!r} must be a list of messages, got "
                                f"{type(conv).__name__}", f"{key} not a list")
    if not conv:
        raise ImportRecordError(f"{where}: field {key!r} is empty", "empty conversation")
    messages = []
    for i, m in enumerate(conv):
        at = f"{where}: field '{key}[{i}]"
        if not isinstance(m, dict) and not isinstance(m, Mapping):  # dict: the fast check
            raise ImportRecordError(f"{at}' must be an object, got {type(m).__name__}",
                                    "message not an object")
        if fmt == "openai-chat":
            role = m.get("role")
            if role is None:
                raise ImportRecordError(f"{at}.role' is missing", "missing role")
            if role not in _ROLES:
                raise ImportRecordError(f"{at}.role' = {role!r} is not a chat role (one of "
                                        f"{', '.join(_ROLES)})", "unknown role")
            if m.get("content") is None and not m.get("tool_calls"):
                raise ImportRecordError(f"{at}.content' is missing", "missing content")
            messages.append({k: v for k, v in m.items() if v is not None})
        else:
            who = m.get("from")
            if who is None:
                raise ImportRecordError(f"{at}.from' is missing", "missing role")
            role = SHAREGPT_ROLES.get(str(who).lower())
            if role is None:
                raise ImportRecordError(
                    f"{at}.from' = {who!r} is not a known speaker (one of "
                    f"{', '.join(SHAREGPT_ROLES)})", "unknown role")
            value = m.get("value")
            if not isinstance(value, str):
                raise ImportRecordError(f"{at}.value' must be a string, got "
                                        f"{type(value).__name__}", "missing content")
            messages.append({"role": role, "content": value})
    tools = record.get("tools") or None
    if tools is not None and not isinstance(tools, list):
        raise ImportRecordError(f"{where}: field 'tools' must be a list, got "
                                f"{type(tools).__name__}", "tools not a list")
    return messages, tools


def conversation_turns(messages: Sequence[Mapping[str, Any]]) -> list[int]:
    """Positions of the assistant messages that become streams: every assistant message
    with at least one message before it, in order.

    Examples
    --------
    >>> conversation_turns([{"role": "system"}, {"role": "user"}, {"role": "assistant"},
    ...                     {"role": "user"}, {"role": "assistant"}])
    [2, 4]
    """
    return [k for k, m in enumerate(messages) if m.get("role") == "assistant" and k > 0]


_META_SKIP = {"messages", "conversations", "tools", "id", "prompt_ids", "output_ids"}


def _metadata(record: Mapping, skip: Iterable[str] = ()) -> dict[str, Any]:
    drop = _META_SKIP | set(skip)
    return {k: v for k, v in record.items() if k not in drop and isinstance(k, str)
            and (v is None or isinstance(v, (str, int, float, bool)))}


def _conv_id(record: Mapping, where: str) -> str | int:
    rid = record.get("id")
    if isinstance(rid, (str, int)) and not isinstance(rid, bool):
        return rid
    return where


def _lookup(record: Mapping, dotted: str) -> Any:
    value: Any = record
    for part in dotted.split("."):
        if isinstance(value, Mapping) and part in value:
            value = value[part]
        elif isinstance(value, list) and part.isdigit() and int(part) < len(value):
            value = value[int(part)]
        else:
            raise KeyError(dotted)
    return value


def _token_record(record: Any, where: str, fields: Mapping[str, str] | None) -> dict:
    if not isinstance(record, Mapping):
        raise ImportRecordError(f"{where}: a record must be a JSON object, got "
                                f"{type(record).__name__}", "not an object")
    out: dict[str, Any] = {}
    used = []
    for name, candidates in _TOKEN_FIELDS.items():
        tried = (fields[name],) if fields and name in fields else candidates
        for path in tried:
            try:
                out[name] = _lookup(record, path)
                used.append(path.split(".")[0])
                break
            except KeyError:
                continue
        else:
            if name == "id":
                out["id"] = where
                continue
            raise ImportRecordError(f"{where}: field {' or '.join(map(repr, tried))} is "
                                    f"missing (the {name}; map another field with --field "
                                    f"{name}=NAME)", f"missing {name}")
    out.update({k: v for k, v in _metadata(record, used).items() if k not in out})
    try:
        return validate_record(out, where)
    except StreamError as e:
        raise ImportRecordError(str(e), "bad token ids") from None


# --- the import -----------------------------------------------------------------------------


def import_streams(paths: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str], *,
                   format: str, tokenizer: Any = None, fields: Mapping[str, str] | None = None,
                   strict: bool = False, max_errors: int = 1000,
                   progress: Callable[[int, int], None] | None = None,
                   trust_remote_code: bool = False) -> ImportReport:
    """Convert traffic logs into a stream file (JSON Lines, gzipped when ``out`` ends in
    ``.gz``), atomically: written to a temporary file beside ``out``, renamed when complete.

    Parameters
    ----------
    paths : list of paths
        Input files (JSON Lines, gzip detected from the content; a JSON array; for
        ``hf-dataset`` also ``.arrow``/``.parquet`` files or a saved dataset directory).
    out : path
        Where to write the streams; left untouched unless the import succeeds.
    format : {"openai-chat", "sharegpt", "hf-dataset", "token-ids"}
    tokenizer : tokenizer or path, optional
        A Hugging Face tokenizer with a chat template, or its local directory (text formats).
    fields : mapping, optional
        ``token-ids`` only: where ``prompt_ids``, ``output_ids`` and ``id`` are, as dotted
        paths (``{"output_ids": "outputs.0.token_ids"}``).
    strict : bool
        Raise on the first record that cannot be imported instead of skipping it.
    progress : callable(done, total), optional
        Called with bytes read so far and the total input size.
    trust_remote_code : bool
        With ``tokenizer`` a directory: run the Python code it ships for a tokenizer class
        of its own (``auto_map`` in ``tokenizer_config.json``); it runs with your
        permissions, so only for a directory you trust (see
        :func:`~ngramspec.streams.chat_template.load_chat_tokenizer`).

    Returns
    -------
    ImportReport
        Counts, skipped records per reason and their first ``max_errors`` messages.

    Raises
    ------
    StreamError
        Unreadable input, a record that cannot be imported with ``strict=True`` (naming
        the file, line and field), or nothing to write; ``out`` is then untouched.
    ValueError
        Bad arguments (format, tokenizer, fields).
    """
    renderer = _check_import(format, fields, tokenizer, trust_remote_code)
    if not paths:
        raise ValueError("no input files given")
    files = _sources(paths, format)
    total = sum(p.stat().st_size for p in files) or 1
    base = 0
    out_path = Path(out)
    if out_path.is_dir():
        raise ValueError(f"--out {out}: is a directory; give a file name (.jsonl or .jsonl.gz)")
    run = _Import(ImportReport(out=str(out)), renderer, strict, max_errors)
    fd, tmp = tempfile.mkstemp(prefix=f".{out_path.name}.", suffix=".tmp",
                               dir=str(out_path.parent) or ".")
    os.close(fd)
    try:
        # Level 3: most of level 9's size on token ids at a fraction of its time.
        sink_ctx = (gzip.open(tmp, "wt", encoding="utf-8", compresslevel=3)
                    if out_path.name.endswith(".gz") else open(tmp, "w", encoding="utf-8"))
        with sink_ctx as run.sink:
            for path in files:
                def tick(pos: int) -> None:
                    if progress is not None:
                        progress(min(base + pos, total), total)

                for where, record in _records(path, tick):
                    run.add(where, record, format, fields)
                base += path.stat().st_size
            if run.pending:
                run.flush()
            run.drain()
        report, skipped = run.report, run.skipped
        report.skipped = dict(skipped)
        if report.streams == 0:
            why = f" (skipped: {', '.join(f'{c} {r}' for r, c in skipped.items())})" \
                if skipped else ""
            first = f"; first: {report.errors[0]}" if report.errors else ""
            raise StreamError(f"nothing to write: no record could be imported{why}{first}")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # as a plain open() would have made it (not 0600)
        os.replace(tmp, out_path)
        tmp = ""
    finally:
        if run.pool is not None:
            run.pool.shutdown(wait=True)
        if tmp:
            try:
                os.unlink(tmp)
            except OSError:
                pass
    return report


def _check_import(format: str, fields: Mapping[str, str] | None, tokenizer: Any,
                  trust_remote_code: bool) -> Any:
    """:func:`import_streams`'s options checked; the chat renderer (None for token ids)."""
    if format not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {format!r}")
    if fields and format != "token-ids":
        raise ValueError("--field maps token-ids records only (use --format token-ids)")
    for key in fields or {}:
        if key not in _TOKEN_FIELDS:
            raise ValueError(f"--field {key}=...: unknown field; mappable: "
                             f"{', '.join(_TOKEN_FIELDS)}")
    if format == "token-ids":
        return None
    if tokenizer is None:
        raise ValueError(f"--format {format} needs --tokenizer DIR (a local Hugging Face "
                         "tokenizer with a chat template)")
    return chat_renderer(tokenizer, trust_remote_code=trust_remote_code)


class _Import:
    """One :func:`import_streams` run: records in, streams out to ``sink`` in input order;
    chat records rendered in chunks, each chunk's encoding in a thread while the next one is
    rendered."""

    def __init__(self, report: ImportReport, renderer: Any, strict: bool,
                 max_errors: int) -> None:
        self.report, self.renderer = report, renderer
        self.strict, self.max_errors = strict, max_errors
        self.skipped: collections.Counter = collections.Counter()
        self.seen_ids: set = set()
        self.sink: Any = None
        self.pool = ThreadPoolExecutor(max_workers=1) if renderer is not None else None
        self.pending: list[tuple[str, list[dict], Any, int, dict]] = []
        self.inflight: list[tuple] = []

    def skip(self, err: ImportRecordError) -> None:
        if self.strict:
            raise StreamError(str(err))
        self.skipped[err.reason] += 1
        if len(self.report.errors) < self.max_errors:
            self.report.errors.append(str(err))

    def write(self, rec: dict) -> None:
        if rec["id"] in self.seen_ids:
            self.skip(ImportRecordError(f"{rec.get('_where', '')}: field 'id': duplicate id "
                                        f"{rec['id']!r}", "duplicate id"))
            return
        self.seen_ids.add(rec["id"])
        rec.pop("_where", None)
        self.sink.write(json.dumps(rec, ensure_ascii=False, separators=(",", ":")) + "\n")
        self.report.streams += 1

    def add(self, where: str, record: Any, format: str, fields: Any) -> None:
        """One input record: written (token ids), or its turns queued for rendering."""
        self.report.records += 1
        try:
            if isinstance(record, ImportRecordError):
                raise record
            if format == "token-ids":
                rec = _token_record(record, where, fields)
                rec["_where"] = where
                self.write(rec)
                return
            messages, tools = _messages(record, where, format)
            turns = conversation_turns(messages)
            if not turns:
                raise ImportRecordError(f"{where}: no assistant message after another message "
                                        "(nothing the model generated)", "no assistant turn")
        except ImportRecordError as e:
            self.skip(e)
            return
        cid = _conv_id(record, where)
        meta = _metadata(record)
        for n, k in enumerate(turns):
            rec = {"id": f"{cid}#{n}", "prompt_ids": None, "output_ids": None, **meta,
                   "conversation": cid, "turn": n, "_where": where}
            self.pending.append((where, messages, tools, k, rec))
        if len(self.pending) >= _CHUNK:
            self.flush()

    def drain(self) -> None:
        """Write the chunk whose encoding runs in the background, in input order."""
        if not self.inflight:
            return
        chunk, items, out_, keys, future = self.inflight.pop()
        results = self.renderer.finish(items, out_, keys, *future.result())
        for (where, _, _, _, rec), res in zip(chunk, results):
            if isinstance(res, ImportRecordError):
                self.skip(res)
                continue
            rec["prompt_ids"], rec["output_ids"], had_end = res
            self.report.no_end_token += not had_end
            self.write(rec)

    def flush(self) -> None:
        """Render the queued chunk here while the previous one is encoded in a thread."""
        renderer = self.renderer
        items = [(w, m, t, k) for w, m, t, k, _ in self.pending]
        out_, keys, ps, ts = renderer.render(items)
        if not renderer.encode_checked:
            self.drain()  # the first encoding checks itself alone
        future = self.pool.submit(renderer.encode, ps, ts)
        self.drain()
        self.inflight.append((list(self.pending), items, out_, keys, future))
        self.pending.clear()
