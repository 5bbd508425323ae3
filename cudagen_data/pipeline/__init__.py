"""Running a production: config, scheduler, worker pool, the producer.

``from cudagen_data.pipeline import ProduceConfig, produce`` (loaded on first use, so
importing a submodule stays cheap in worker processes).
"""

from __future__ import annotations


def __getattr__(name: str):
    if name in ("ProduceConfig", "ProduceError"):
        from . import config

        return getattr(config, name)
    if name in ("produce", "ProduceResult"):
        from . import producer

        return getattr(producer, name)
    raise AttributeError(name)


__all__ = ["ProduceConfig", "ProduceError", "ProduceResult", "produce"]
