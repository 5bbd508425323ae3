"""Publishing a produced dataset folder: leak-free splits, the dataset card, training
exports and the Hugging Face Hub upload.

Submodules (import them directly; ``card`` and ``hub`` pull in ``datasets`` /
``huggingface_hub``, which are slow to import, so this package does not import them):

- :mod:`.splits`: ``assign_split(shape_hash, ratios)`` (``SPLITS``: contracts.manifest)
- :mod:`.card`: ``render_card(manifest, stats, schema, split_files)`` -> README.md text
- :mod:`.export`: ``export(folder, fmt, out)`` -> instruction-tuning JSONL
- :mod:`.hub`: ``plan_upload(folder)``, ``publish(folder, repo_id, ...)``
"""

from __future__ import annotations


class PublishError(Exception):
    """An expected failure while publishing or exporting (bad folder, bad manifest,
    bad repo id, ...).  The message is one line and names the file at fault."""


from cudagen_data.contracts.manifest import SPLITS  # noqa: E402
from cudagen_data.publish.splits import assign_split  # noqa: E402  (cheap, no heavy deps)

__all__ = ["PublishError", "SPLITS", "assign_split"]
