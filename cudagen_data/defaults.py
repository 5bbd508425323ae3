"""The defaults a user sees in ``cudagen --help``, each stated once (the split ratios: publish/splits.py).

The modules that own them take them from here (extract.codegen, extract.levels,
dataset.lengths, dataset.shards, pipeline.config), and so does the CLI,
which shows them without loading those modules (and pyarrow) at start-up.  Imports nothing.
"""

ARCH = 86  # Ampere PTX: NVRTC-valid, and loadable by the driver on every newer GPU
COMPILE_LEVEL = "frontend"  # extract/levels.py: NVRTC's front end with Warp's options
BATCH_SIZE = 100  # kernels per batch: one NVRTC unit and one CPU module each
MAX_CHARS = 120_000  # longer rows (python + forward + backward) are rejected: too_long
# 10,000 rows is ~40-150 MB of Parquet (rows with test vectors run 4-15 KB uncompressed):
# far under the Hub's 20 GB per file and 10,000 files per folder even at 100M rows.
SHARD_ROWS = 10_000
