"""Instruction-tuning exports of a dataset folder (chat or prompt/completion JSONL).

Prompt template (also shown in the dataset card)::

    system:    SYSTEM_PROMPT
    user:      Translate this NVIDIA Warp kernel to the CUDA C++ that Warp generates for it:
               {parts}.

               ```python
               {python_source}
               ```
    assistant: ```cuda
               {device_functions}

               {cuda_forward}

               {cuda_backward}
               ```

``{parts}`` names what the answer holds: "the forward kernel and the backward (adjoint)
kernel" or, with ``include_backward=False`` or where Warp emitted no backward, "the
forward kernel"; in both cases followed by ", preceded by the device functions it
calls" when the row has any.  Empty pieces are left out of the answer; each piece has
its leading/trailing blank lines trimmed and pieces are joined by one blank line.
Device functions are given as Warp emitted them (forward and adjoint versions).

Formats, one JSON object per line (orjson, sorted keys, so two exports of one folder
are byte-identical):

- ``chat``: ``{"id", "split", "messages": [{"role": "system", ...}, {"role": "user", ...},
  {"role": "assistant", ...}]}``
- ``completion``: ``{"id", "split", "prompt", "completion"}`` where ``prompt`` is the user
  message followed by a blank line and an opening ```` ```cuda ```` fence, and
  ``completion`` is the code and the closing fence, so ``prompt + completion`` equals
  ``user + "\\n\\n" + assistant``.

Rows come from the Parquet shards named in ``manifest.json``, in split order (train,
validation, test), then shard order, then row order.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pyarrow.parquet as pq

from ..contracts.row import Row
from . import PublishError
from .folder import parquet_files

FORMATS = ("chat", "completion")

SYSTEM_PROMPT = (
    "You are an expert in GPU programming who knows exactly how NVIDIA Warp compiles Python kernels to CUDA C++."
)
USER_TEMPLATE = (
    "Translate this NVIDIA Warp kernel to the CUDA C++ that Warp generates for it: {parts}.\n"
    "\n"
    "```python\n"
    "{python_source}\n"
    "```"
)
ASSISTANT_TEMPLATE = "```cuda\n{cuda}\n```"
CHAT_EXAMPLE_NOTE = (
    '`{parts}` is "the forward kernel and the backward (adjoint) kernel", or "the forward '
    'kernel" for a forward-only export or a row without a backward kernel, followed by '
    '", preceded by the device functions it calls" when the row has any. The '
    "prompt/completion format uses the same user message followed by a blank line and "
    "```` ```cuda ```` as the prompt, and the code with the closing fence as the completion."
)


@dataclass(frozen=True)
class PairText:
    """What an export reads of a row: its id and its texts (columns of the row contract;
    the Parquet read is limited to them)."""

    id: str
    python_source: str
    cuda_forward: str
    cuda_backward: str
    device_functions: str


PAIR_COLUMNS = [f.name for f in dataclasses.fields(PairText)]


def _parts(has_funcs: bool, has_backward: bool) -> str:
    parts = "the forward kernel and the backward (adjoint) kernel" if has_backward else "the forward kernel"
    return parts + (", preceded by the device functions it calls" if has_funcs else "")


def build_pair(row: Row | PairText, include_backward: bool = True) -> tuple[str, str]:
    """(user message, CUDA code without fences) for one row."""
    funcs = (row.device_functions or "").strip("\n")
    forward = (row.cuda_forward or "").strip("\n")
    backward = (row.cuda_backward or "").strip("\n") if include_backward else ""
    if not forward:
        raise PublishError(f"row {row.id!r}: empty cuda_forward")
    parts = _parts(bool(funcs), bool(backward))
    user = USER_TEMPLATE.format(parts=parts, python_source=row.python_source.rstrip("\n"))
    code = "\n\n".join(p for p in (funcs, forward, backward) if p)
    return user, code


def format_record(row: Row | PairText, split: str, fmt: str, include_backward: bool = True) -> dict:
    """One export record for ``row`` in format ``fmt`` ("chat" or "completion")."""
    user, code = build_pair(row, include_backward)
    if fmt == "chat":
        return {
            "id": row.id,
            "split": split,
            "messages": [
                {"role": "system", "content": SYSTEM_PROMPT},
                {"role": "user", "content": user},
                {"role": "assistant", "content": ASSISTANT_TEMPLATE.format(cuda=code)},
            ],
        }
    if fmt == "completion":
        return {"id": row.id, "split": split, "prompt": user + "\n\n```cuda\n", "completion": code + "\n```"}
    raise PublishError(f"export format {fmt!r} is not one of {FORMATS}")


def iter_rows(folder, config: str = "default") -> Iterator[tuple[str, PairText]]:
    """(split, row's id and texts) for every row of a configuration's Parquet shards, in
    export order.  Only the columns the export needs are read."""
    folder = Path(folder)
    for data_file in parquet_files(folder, config=config):
        try:
            pf = pq.ParquetFile(folder / data_file.path)
            missing = [c for c in PAIR_COLUMNS if c not in pf.schema_arrow.names]
            if missing:
                raise PublishError(f"{data_file.path}: missing columns {missing}")
            seen = 0
            for batch in pf.iter_batches(batch_size=2048, columns=PAIR_COLUMNS):
                for record in batch.to_pylist():
                    seen += 1
                    yield data_file.split, PairText(**record)
        except PublishError:
            raise
        except Exception as exc:  # corrupt shard: pyarrow raises several types
            raise PublishError(f"{data_file.path}: cannot read Parquet ({type(exc).__name__}: {exc})") from None
        if seen != data_file.rows:
            raise PublishError(f"{data_file.path}: has {seen} rows, manifest.json says {data_file.rows}")


def export(folder, fmt: str, out, include_backward: bool = True, config: str = "default") -> int:
    """Write the folder's rows as instruction-tuning JSONL to ``out``; return rows written.

    ``fmt`` is "chat" or "completion" (see the module docstring for the template).  The
    file is written to a temporary name and renamed, so ``out`` is never left half
    written.  Raises PublishError for a bad folder or format.
    """
    if fmt not in FORMATS:
        raise PublishError(f"export format {fmt!r} is not one of {FORMATS}")
    if not parquet_files(Path(folder), config=config):
        made_by = "cudagen mine" if config == "real" else "cudagen produce"
        raise PublishError(f"{folder}: has no '{config}' configuration (its rows are made by {made_by})")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    count = 0
    try:
        with open(tmp, "wb") as fh:
            for split, row in iter_rows(folder, config):
                record = format_record(row, split, fmt, include_backward)
                fh.write(orjson.dumps(record, option=orjson.OPT_SORT_KEYS | orjson.OPT_APPEND_NEWLINE))
                count += 1
        os.replace(tmp, out)
    finally:
        if tmp.exists():
            tmp.unlink()
    return count
