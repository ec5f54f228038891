"""The model's own chat template: a local tokenizer loaded, and conversations rendered and
tokenised in batches as ``apply_chat_template`` does (:mod:`ngramspec.streams.importers` uses it)."""

from __future__ import annotations

import collections
import json
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from .files import StreamError

__all__ = ["load_chat_tokenizer", "import_transformers", "ImportRecordError", "chat_renderer"]

# transformers logs these "advisory" lines through ``logger.warning_advice`` (e.g. "PyTorch
# was not found. Models won't be available ..." when it is imported without torch); it skips
# them while this variable is set.
_NO_ADVICE = "TRANSFORMERS_NO_ADVISORY_WARNINGS"


class ImportRecordError(StreamError):
    """One input record that cannot be imported; ``reason`` is its category."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def import_transformers(what: str = "importing chat logs") -> ModuleType:
    """``transformers``, imported without the advisory banner it prints on import.

    Imported without torch, transformers logs "PyTorch was not found. Models won't be
    available ..." on stderr; a tokenizer needs no torch, so ngramspec's commands silence it:
    ``TRANSFORMERS_NO_ADVISORY_WARNINGS`` is set during the import only and then restored,
    so the caller's later transformers warnings are as the caller configured them.

    Parameters
    ----------
    what : str
        What needs transformers, for the error.

    Returns
    -------
    module
        ``transformers``.

    Raises
    ------
    ValueError
        transformers is not installed (naming the extra that installs it).
    """
    before = os.environ.get(_NO_ADVICE)
    os.environ[_NO_ADVICE] = "1"
    try:
        import transformers
    except ImportError:
        raise ValueError(f"{what} needs transformers: pip install 'ngramspec[import]'") from None
    finally:
        if before is None:
            os.environ.pop(_NO_ADVICE, None)
        else:
            os.environ[_NO_ADVICE] = before
    return transformers


def _auto_map_class(path: Path) -> str | None:
    """The tokenizer class that ``tokenizer_config.json``'s ``auto_map`` names, if any."""
    try:
        config = json.loads((path / "tokenizer_config.json").read_text(encoding="utf-8"))
        ref = config["auto_map"]
        ref = ref if isinstance(ref, list) else ref["AutoTokenizer"]
        return next(str(r) for r in reversed(ref) if r)
    except (OSError, ValueError, KeyError, TypeError, StopIteration):
        return None


def load_chat_tokenizer(directory: str | os.PathLike[str], *,
                        chat_template: str | None = None,
                        trust_remote_code: bool = False) -> Any:
    """A local Hugging Face tokenizer with a chat template (never downloads anything, never
    asks a question on stdin).

    Parameters
    ----------
    directory : path
        A local tokenizer directory (``tokenizer_config.json``, ``tokenizer.json``, ...).
    chat_template : str, optional
        Jinja template text to use instead of the tokenizer's.
    trust_remote_code : bool
        Run the Python code the directory ships when its ``tokenizer_config.json`` names a
        tokenizer class of its own (``auto_map``), as the tokenizers of some large models
        do.  That code runs with your permissions: only for a directory you trust.  Off by
        default: such a tokenizer is then refused with an error saying so.

    Returns
    -------
    tokenizer
        ``AutoTokenizer.from_pretrained(directory, local_files_only=True)``.

    Raises
    ------
    ValueError
        Naming the directory: transformers missing, no tokenizer there, code of its own
        without ``trust_remote_code``, no chat template (give one with ``chat_template=``).
    """
    path = Path(directory)
    if not path.is_dir():
        raise ValueError(f"--tokenizer {directory}: not a directory (a local Hugging Face "
                         "tokenizer directory is needed; nothing is downloaded)")
    AutoTokenizer = import_transformers().AutoTokenizer
    try:
        # trust_remote_code given as False, not left None: transformers would otherwise ask
        # "Do you wish to run the custom code? [y/N]" on stdin.
        tok = AutoTokenizer.from_pretrained(str(path), local_files_only=True,
                                            trust_remote_code=bool(trust_remote_code))
    except Exception as e:  # transformers raises OSError, ValueError, KeyError, ...
        if not trust_remote_code and "trust_remote_code" in str(e):
            ref = _auto_map_class(path)
            raise ValueError(f"--tokenizer {directory}: the tokenizer needs its own code from "
                             f"that directory{f' ({ref})' if ref else ''}; pass "
                             "--trust-remote-code (trust_remote_code=True from Python) to run "
                             "it, only for a directory you trust: it executes its Python "
                             "files") from None
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ValueError(f"--tokenizer {directory}: no tokenizer could be loaded from there "
                         f"({first})") from None
    if chat_template is not None:
        tok.chat_template = chat_template
    if not getattr(tok, "chat_template", None):
        raise ValueError(f"--tokenizer {directory}: the tokenizer has no chat template "
                         "(tokenizer_config.json 'chat_template' or chat_template.jinja); "
                         "prompts must be built with the model's own template (or give one "
                         "with --chat-template FILE)")
    return tok


def _end_ids(tok: Any, directory: str | os.PathLike[str] | None) -> set[int]:
    ids: set[int] = set()
    if getattr(tok, "eos_token_id", None) is not None:
        ids.add(int(tok.eos_token_id))
    if directory is not None:
        gen = Path(directory) / "generation_config.json"
        if gen.is_file():
            try:
                value = json.loads(gen.read_text(encoding="utf-8")).get("eos_token_id")
            except (ValueError, OSError, AttributeError):
                value = None
            for v in value if isinstance(value, list) else [value]:
                if isinstance(v, int) and not isinstance(v, bool):
                    ids.add(v)
    return ids


class _Renderer:
    """Renders prompts and assistant turns in batches, through the tokenizer's own
    ``apply_chat_template`` (tokenize=False) and batched tokenisation."""

    def __init__(self, tok: Any, end_ids: set[int]) -> None:
        self.tok, self.end_ids = tok, end_ids
        # Fast paths, each used only after it gave the tokenizer's own results on the first
        # batch: the compiled template rendered directly (plain role/content conversations
        # without tools), and the Rust tokenizer's batch encoding.
        self.template: Any = None
        self.backend: Any = None
        try:
            from transformers.utils.chat_template_utils import _compile_jinja_template
            self.template = _compile_jinja_template(tok.chat_template)
            # The template's globals merged with the variables once, not at every render.
            self.base = {**self.template.globals, **tok.special_tokens_map, "tools": None,
                         "documents": None}
        except Exception:  # another transformers version: the public path only
            self.template = None
        backend = getattr(tok, "backend_tokenizer", None) if getattr(tok, "is_fast", False) \
            else None
        self.backend = backend
        self.render_checked: set[bool] = set()  # add_generation_prompt values compared
        self.encode_checked = False

    def _own_render(self, convs: list[list[dict]], tools: Any, gen: bool) -> list[str]:
        return list(self.tok.apply_chat_template(convs, tools=tools, tokenize=False,
                                                 add_generation_prompt=gen))

    def _render(self, convs: list[list[dict]], tools: Any, gen: bool) -> list[str]:
        if self.template is None or tools or not convs or not all(
                len(m) == 2 and isinstance(m.get("content"), str) for c in convs for m in c):
            return self._own_render(convs, tools, gen)
        t, base, concat = self.template, self.base, self.template.environment.concat
        fast = []
        for c in convs:
            v = base.copy()
            v["messages"], v["add_generation_prompt"] = c, gen
            fast.append(concat(t.root_render_func(t.new_context(v, shared=True))))
        if gen not in self.render_checked:
            n = min(len(convs), 32)
            if fast[:n] != self._own_render(convs[:n], None, gen):
                self.template = None
                return self._own_render(convs, tools, gen)
            self.render_checked.add(gen)
        return fast

    def _own_encode(self, texts: list[str]) -> list[list[int]]:
        return [list(ids) for ids in self.tok(texts, add_special_tokens=False)["input_ids"]]

    def _encode(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        if self.backend is None:
            return self._own_encode(texts)
        enc = getattr(self.backend, "encode_batch_fast", self.backend.encode_batch)
        ids = [e.ids for e in enc(texts, add_special_tokens=False)]
        if not self.encode_checked:
            n = min(len(texts), 64)
            if ids[:n] != self._own_encode(texts[:n]):
                self.backend = None
                return self._own_encode(texts)
        return ids

    def streams(self, items: list[tuple[str, list[dict], Any, int]]
                ) -> list[tuple[list[int], list[int], bool] | ImportRecordError]:
        """Per (where, messages, tools, k): (prompt_ids, output_ids, had an end token)."""
        out, keys, prompts, turns = self.render(items)
        return self.finish(items, out, keys, *self.encode(prompts, turns))

    def render(self, items: list[tuple[str, list[dict], Any, int]]
               ) -> tuple[list[Any], list[int], list[str], list[str]]:
        """The prompt and assistant-turn texts of the items the template renders."""
        out: list[Any] = [None] * len(items)
        groups: dict[str, list[int]] = collections.defaultdict(list)
        for i, (_, _, tools, _) in enumerate(items):
            groups[json.dumps(tools, sort_keys=True) if tools else ""].append(i)
        prompts: dict[int, str] = {}
        turns: dict[int, str] = {}
        for idx in groups.values():
            tools = items[idx[0]][2]
            try:
                ps = self._render([items[i][1][:items[i][3]] for i in idx], tools, True)
                fs = self._render([items[i][1][:items[i][3] + 1] for i in idx], tools, False)
                pairs = list(zip(idx, ps, fs))
            except Exception:  # find the conversations the template refuses, one by one
                pairs = []
                for i in idx:
                    where, msgs, _, k = items[i]
                    try:
                        pairs.append((i, self._render([msgs[:k]], tools, True)[0],
                                      self._render([msgs[:k + 1]], tools, False)[0]))
                    except Exception as e:
                        first = str(e).splitlines()[0] if str(e) else type(e).__name__
                        out[i] = ImportRecordError(
                            f"{where}: field 'messages[{k}]': the chat template refused the "
                            f"conversation up to here ({first})", "refused by the template")
            for i, p, f in pairs:
                if not f.startswith(p):
                    where, _, _, k = items[i]
                    out[i] = ImportRecordError(
                        f"{where}: field 'messages[{k}]': the chat template renders this "
                        "assistant message without the generation prompt in front; its "
                        "output cannot be cut out", "template mismatch")
                    continue
                prompts[i], turns[i] = p, f[len(p):]
        keys = sorted(prompts)
        return out, keys, [prompts[i] for i in keys], [turns[i] for i in keys]

    def encode(self, prompts: list[str], turns: list[str]
               ) -> tuple[list[list[int]], list[list[int]]]:
        """Token ids of the texts (thread-safe: the Rust encoder releases the GIL)."""
        p_ids, o_ids = self._encode(prompts), self._encode(turns)
        self.encode_checked = self.encode_checked or bool(prompts)
        return p_ids, o_ids

    def finish(self, items: list[tuple[str, list[dict], Any, int]], out: list[Any],
               keys: list[int], p_ids: list[list[int]], o_ids: list[list[int]]
               ) -> list[tuple[list[int], list[int], bool] | ImportRecordError]:
        end_ids = self.end_ids
        for i, p, o in zip(keys, p_ids, o_ids):
            last = len(o) - 1
            while last >= 0 and o[last] not in end_ids:
                last -= 1
            if last >= 0:
                o = o[:last + 1]
            if not o:
                where, _, _, k = items[i]
                out[i] = ImportRecordError(f"{where}: field 'messages[{k}].content': the "
                                           "assistant turn renders to no tokens",
                                           "empty assistant turn")
                continue
            out[i] = (p, o, last >= 0)
        return out


def chat_renderer(tokenizer: Any, *, trust_remote_code: bool = False) -> "_Renderer":
    """What renders and tokenises conversations for :func:`~ngramspec.streams.importers.
    import_streams`: from a local tokenizer directory (loaded with its chat template) or a
    loaded tokenizer that has one."""
    directory = None
    if isinstance(tokenizer, (str, os.PathLike)):
        directory = tokenizer
        tokenizer = load_chat_tokenizer(tokenizer, trust_remote_code=trust_remote_code)
    elif not getattr(tokenizer, "chat_template", None):
        raise ValueError("tokenizer: it has no chat template")
    else:
        directory = getattr(tokenizer, "name_or_path", None) or None
    return _Renderer(tokenizer, _end_ids(tokenizer, directory))
