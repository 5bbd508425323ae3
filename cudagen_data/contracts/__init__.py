"""The records that cross module boundaries, each defined once.

- :mod:`.row`: ``Row`` (a dataset row) with ``ROW_SCHEMA`` and column docs derived from
  it, ``SCHEMA_VERSION``; ``RealRow`` (a mined row: ``Row`` + ``Provenance``) with
  ``REAL_ROW_SCHEMA`` and ``is_real_row`` (how readers tell it from a synthetic row);
  ``row_from_dict`` / ``as_row`` (a row dict read as the contract, once, where it comes in);
  ``ExtractRecord`` (what `cudagen extract` writes)
- :mod:`.read`: a row's ``KernelSpec`` and decoded recorded run
- :mod:`.reject`: ``Reject`` and ``RejectReason`` (every reason, with its owning stage)
- :mod:`.test_vectors`: ``TestVectors``, the recorded run of a kernel
- :mod:`.manifest`: ``Manifest`` / ``FileEntry`` (manifest.json and its one parser), ``SPLITS``
- :mod:`.stats`: ``RunStats`` / ``StageCounter`` (a run's counts; stats.json)
"""

from .manifest import SPLITS, FileEntry, Manifest, ManifestError
from .reject import Reject, RejectReason
from .row import (
    REAL_ROW_SCHEMA,
    ROW_SCHEMA,
    SCHEMA_VERSION,
    CompileInfo,
    ExtractRecord,
    GradientCheckInfo,
    Metadata,
    Provenance,
    RealRow,
    Row,
    as_row,
    is_real_row,
    row_from_dict,
    strip_timing,
)
from .stats import TIMING_STATS, RunStats, StageCounter
from .test_vectors import TestVectors

__all__ = [
    "REAL_ROW_SCHEMA",
    "ROW_SCHEMA",
    "SCHEMA_VERSION",
    "SPLITS",
    "TIMING_STATS",
    "CompileInfo",
    "ExtractRecord",
    "FileEntry",
    "GradientCheckInfo",
    "Manifest",
    "ManifestError",
    "Metadata",
    "Provenance",
    "RealRow",
    "Reject",
    "RejectReason",
    "Row",
    "RunStats",
    "StageCounter",
    "TestVectors",
    "as_row",
    "is_real_row",
    "row_from_dict",
    "strip_timing",
]
