"""cudagen-data: Python -> CUDA training pairs from NVIDIA Warp kernels, compiled and run."""

__version__ = "0.1.0"
