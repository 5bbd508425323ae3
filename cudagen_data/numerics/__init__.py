"""Numerics shared by the gradient check, the GPU suite and eval (below all three).

- :mod:`.twin`: a kernel's float64 twin (the same source, widened), the reference the
  gradient check, the GPU suite and eval compare a float32 kernel against
- :mod:`.tolerance`: how far a float32 array may be from its float64 reference
"""
