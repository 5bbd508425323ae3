"""What a production run is: its configuration, and how work is cut into batches.

Work is addressed by *slot*: slot ``s`` holds the kernel of category
``categories[s % C]`` at per-category index ``s // C``; batch ``b`` holds slots
``[b * batch_size, (b + 1) * batch_size)``.  Any executor can run any batch from
(config, batch index) alone, and every slot's outcome depends on that slot alone,
never on its neighbours or on timing.
"""

from __future__ import annotations

import dataclasses
import importlib.metadata
from dataclasses import dataclass

import orjson

from .. import __version__, defaults
from ..dataset.lengths import DEFAULT_MAX_CHARS
from ..dataset.shards import SHARD_ROWS
from ..extract import DEFAULT_ARCH
from ..extract.levels import DEFAULT_COMPILE_LEVEL, check_level
from ..generators import GENERATOR_VERSION
from ..publish.splits import DEFAULT_RATIOS

DEFAULT_SPLIT_RATIOS = DEFAULT_RATIOS
DEFAULT_BATCH_SIZE = defaults.BATCH_SIZE


class ProduceError(Exception):
    """An expected failure of a run (bad folder, config mismatch...): one line."""


@dataclass(frozen=True)
class ProduceConfig:
    count: int
    categories: tuple[str, ...]
    seed: int = 0
    arch: int = DEFAULT_ARCH
    fast: bool = False
    batch_size: int = DEFAULT_BATCH_SIZE
    split_ratios: tuple[float, float, float] = DEFAULT_SPLIT_RATIOS
    max_chars: int = DEFAULT_MAX_CHARS  # longer rows (python + forward + backward) are rejected: too_long
    compile_level: str = DEFAULT_COMPILE_LEVEL  # extract/levels.py; part of the fingerprint
    jsonl: bool = True  # also write jsonl/{split}.jsonl (the Parquet shards are always written)
    shard_rows: int = SHARD_ROWS  # rows per Parquet shard
    resources: bool = False  # also build each kernel to machine code and record ptxas's report (extract/resources.py)

    def __post_init__(self) -> None:
        check_level(self.compile_level)
        if self.count < 1:
            raise ValueError(f"--count must be at least 1 (got {self.count})")
        if not self.categories:
            raise ValueError("at least one category is needed")
        if len(set(self.categories)) != len(self.categories):
            raise ValueError(f"categories repeat: {', '.join(self.categories)}")
        if self.batch_size < 1:
            raise ValueError(f"--batch-size must be at least 1 (got {self.batch_size})")
        if self.max_chars < 1:
            raise ValueError(f"--max-chars must be at least 1 (got {self.max_chars})")
        if self.shard_rows < 1:
            raise ValueError(f"--shard-rows must be at least 1 (got {self.shard_rows})")
        if self.resources and self.fast:
            raise ValueError("--resources builds every kernel to machine code: it cannot be combined with --fast")

    def quota(self, category: str) -> int:
        """Rows wanted of ``category``: N / C, the first N % C categories one more."""
        i = self.categories.index(category)
        base, extra = divmod(self.count, len(self.categories))
        return base + (1 if i < extra else 0)

    def slot(self, slot: int) -> tuple[str, int]:
        """(category, per-category index) of a slot."""
        c = len(self.categories)
        return self.categories[slot % c], slot // c

    def slot_of(self, category: str, index: int) -> int:
        """The slot of ``category``'s kernel ``index`` (the inverse of :meth:`slot`)."""
        return index * len(self.categories) + self.categories.index(category)

    def batch_slots(self, batch: int) -> range:
        return range(batch * self.batch_size, (batch + 1) * self.batch_size)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["categories"] = list(self.categories)
        d["split_ratios"] = list(self.split_ratios)
        if not self.resources:
            del d["resources"]  # folders made before --resources existed keep their fingerprint
        return d

    @classmethod
    def from_dict(cls, d: dict) -> ProduceConfig:
        # folders made before compile levels existed were checked with the full compile
        return cls(
            **{
                "compile_level": "ptx",
                **d,
                "categories": tuple(d["categories"]),
                "split_ratios": tuple(d["split_ratios"]),
            }
        )


def versions() -> dict[str, str]:
    """Everything whose change changes the output."""

    return {
        "cudagen_data": __version__,
        "warp": importlib.metadata.version("warp-lang"),
        "generator": GENERATOR_VERSION,
    }


def fingerprint(config: ProduceConfig) -> bytes:
    """What a folder must match for a run to continue into it."""
    return orjson.dumps({"config": config.to_dict(), "versions": versions()}, option=orjson.OPT_SORT_KEYS)


def command_line(config: ProduceConfig) -> str:
    """The command that reproduces ``config`` (no paths: the output folder is the default)."""
    parts = [
        "cudagen produce",
        f"--count {config.count}",
        f"--seed {config.seed}",
        f"--categories {','.join(config.categories)}",
        f"--arch {config.arch}",
    ]
    if config.batch_size != DEFAULT_BATCH_SIZE:
        parts.append(f"--batch-size {config.batch_size}")
    if tuple(config.split_ratios) != DEFAULT_SPLIT_RATIOS:
        parts.append("--split-ratios " + ",".join(str(r) for r in config.split_ratios))
    if config.max_chars != DEFAULT_MAX_CHARS:
        parts.append(f"--max-chars {config.max_chars}")
    if config.fast:
        parts.append("--fast")
    elif config.compile_level != DEFAULT_COMPILE_LEVEL:
        parts.append(f"--compile {config.compile_level}")
    if config.resources:
        parts.append("--resources")
    if not config.jsonl:
        parts.append("--no-jsonl")
    if config.shard_rows != SHARD_ROWS:
        parts.append(f"--shard-rows {config.shard_rows}")
    return " ".join(parts)
