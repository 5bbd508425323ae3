"""Shared memory poisoned before every checked launch of the run stage.

Neither a GPU nor Warp's CPU backend clears tile (shared) memory between launches: on a
GPU a block's shared memory holds what the last block on that multiprocessor left; on
the CPU a block's tile arena is stack memory at the same addresses launch after launch
(block_dim 1).  A candidate that skips loading a tile element and then reads it gets
that leftover, and where the launch before was a right kernel on the same inputs, the
right value: it passes without doing the work.  So the judge (run.run_guarded) runs
this scrub right before each checked forward and backward launch: a tile kernel whose
blocks fill as much shared memory as one block may hold with one 32-bit word, two
blocks per multiprocessor (each takes a multiprocessor to itself, so all of them are
filled).  Skipped work then reads poison.  :func:`leftovers` shows it on the device at
hand: what a kernel that reads shared memory it never wrote finds after a launch that
left a marker there, without and with the scrub in between (tests: a leftover seen
without it on the CPU; poison with it on the CPU and on a GPU).

The word follows the run's guard fill, and reads as a NaN, a huge negative or a huge
positive value alike in float16, float32 and float64 (a minimum or maximum that a NaN
does not disturb picks up a huge value), and as a large integer.
"""

from __future__ import annotations

import contextlib

import numpy as np

from .. import warp_boundary

SCRUB_WORDS = {"nan": 0x7FF87FF8, "low": 0xFBFFFBFF, "high": 0x7BFF7BFF}
CPU_ARENA_BYTES = 256 * 1024  # Warp's CPU tile arena (WP_MAX_CPU_SHARED in warp/native/tile.h)
MARGIN_BYTES = 2 * 1024  # left to the scrub's static shared memory and Warp's allocator
# One warp a block.  A Warp tile kernel's static shared memory (one allocator slot per
# lane, ahead of the tiles) then ends before any kernel's of 32 lanes or more, so the
# scrub's tiles cover every byte where such a kernel keeps its tiles.
GPU_BLOCK_DIM = 32
# No backward: the scrub is never differentiated, and Warp would build one that asks for twice
# the shared memory (a warning per worker on the GPU: "Failed to configure dynamic shared memory
# for kernel 'cudagen_shared_scrub' (backward)").
_SOURCE = """import warp as wp

wp.set_module_options({{"enable_backward": False}})

WORDS = wp.constant({words})


@wp.kernel
def cudagen_shared_scrub(word: wp.array(dtype=wp.uint32), probe: wp.array(dtype=wp.int32),
                         sink: wp.array(dtype=wp.uint32)):
    b = wp.tid()
    t = wp.tile_full(shape=WORDS, value=word[0], dtype=wp.uint32, storage="shared")
    # one element read back at an index known only at run time: no compiler drops the stores
    v = t[probe[0]]
    if v != word[0]:
        sink[0] = v
"""


def scrub_source(words: int) -> str:
    return _SOURCE.format(words=words)


class SharedScrub:
    """``scrub(fill)``: poison the shared memory of every multiprocessor of ``device``
    (on the CPU: the tile arena) with the word of guard fill ``fill``."""

    def __init__(self, device: str):
        wp = warp_boundary.warp()
        dev = wp.get_device(device)
        self.device = device
        if dev.is_cpu:
            arena, self.blocks, self.block_dim = CPU_ARENA_BYTES, 1, 1
        else:
            arena, self.blocks, self.block_dim = dev.max_shared_memory_per_block, 2 * dev.sm_count, GPU_BLOCK_DIM
        self.words = (arena - MARGIN_BYTES) // 4
        self._stack = contextlib.ExitStack()
        try:
            loaded = self._stack.enter_context(warp_boundary.loaded_source(scrub_source(self.words)))
            self.kernel = loaded.module.cudagen_shared_scrub
            self.kernel.module.options["block_dim"] = self.block_dim
            problem = warp_boundary.build_module(self.kernel.module, device)
            if problem is not None:
                raise RuntimeError(f"the shared-memory scrub does not build on {device}: {problem}")
            self._words = {
                fill: wp.array(np.array([w], dtype=np.uint32), dtype=wp.uint32, device=device)
                for fill, w in SCRUB_WORDS.items()
            }
            self._probe = wp.array(np.array([self.words - 1], dtype=np.int32), dtype=wp.int32, device=device)
            self._sink = wp.zeros(1, dtype=wp.uint32, device=device)
        except BaseException:
            self._stack.close()
            raise

    def __call__(self, fill: str) -> None:
        wp = warp_boundary.warp()
        wp.launch_tiled(self.kernel, dim=self.blocks, inputs=[self._words[fill], self._probe, self._sink],
                        block_dim=self.block_dim, device=self.device)  # fmt: skip

    def close(self) -> None:
        self._stack.close()


_scrubs: dict[str, SharedScrub] = {}


def shared_scrub(device: str) -> SharedScrub:
    """The process's scrub for ``device``, built on first use and kept."""
    if device not in _scrubs:
        _scrubs[device] = SharedScrub(device)
    return _scrubs[device]


_CANARY = """import warp as wp

WORDS = wp.constant({words})


@wp.kernel
def cudagen_scrub_canary(marker: wp.array(dtype=wp.uint32), write: int, out: wp.array2d(dtype=wp.uint32)):
    b = wp.tid()
    t = wp.tile_empty(shape=(1, WORDS), dtype=wp.uint32, storage="shared")  # never initialized
    if write == 1:
        wp.tile_assign(t, wp.tile_full(shape=(1, WORDS), value=marker[0], dtype=wp.uint32, storage="shared"))
    wp.tile_store(out, t, offset=(b, 0))
"""
CANARY_WORDS, CANARY_BLOCK_DIM = 256, 64
CANARY_MARKER = 0x5EED5EED


def leftovers(device: str, blocks: int = 4, scrub: SharedScrub | None = None, fill: str = "nan") -> np.ndarray:
    """What each of ``blocks`` blocks of a kernel that reads shared memory it never wrote
    finds, right after a launch of it that wrote :data:`CANARY_MARKER` there (and ``scrub``
    run in between, with ``fill``'s word, if given): ``blocks x CANARY_WORDS`` words."""
    wp = warp_boundary.warp()
    with warp_boundary.loaded_source(_CANARY.format(words=CANARY_WORDS)) as loaded:
        kernel = loaded.module.cudagen_scrub_canary
        kernel.module.options["block_dim"] = CANARY_BLOCK_DIM
        problem = warp_boundary.build_module(kernel.module, device)
        if problem is not None:
            raise RuntimeError(f"the scrub's canary does not build on {device}: {problem}")
        marker = wp.array(np.array([CANARY_MARKER], dtype=np.uint32), dtype=wp.uint32, device=device)
        out = wp.zeros((blocks, CANARY_WORDS), dtype=wp.uint32, device=device)
        for write in (1, 0):
            if write == 0 and scrub is not None:
                scrub(fill)
            wp.launch_tiled(kernel, dim=blocks, inputs=[marker, write, out], block_dim=CANARY_BLOCK_DIM, device=device)
        wp.synchronize_device(device)
        return out.numpy().copy()
