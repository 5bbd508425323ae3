"""Run generated kernels on Warp's CPU backend: seeded inputs, outputs, input gradients.

All kernels of a batch are built as one Warp CPU module (one LLVM build instead of one
per kernel).  Every kernel is launched on inputs drawn from its spec's domains with an
rng derived from the spec alone, so a kernel's test vectors never depend on which batch
it ran in.  A kernel is accepted when all its outputs are finite and vary, and the
gradients of its float inputs (wp.Tape, seeded output gradients) are finite.
"""

from __future__ import annotations

import ast
import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import xxhash

from .. import warp_env
from ..spec import DTYPES, ArgSpec, KernelSpec, is_float_dtype

CPU_OPT_LEVEL = 0  # ~2x faster LLVM builds than Warp's default; results are checked, not timed

Value = Any  # np.ndarray for arrays, a Python number or np.ndarray (components) for scalars


@dataclass
class ExecutionResult:
    ok: bool
    reason: str | None = None  # reject reason when not ok
    detail: str = ""
    inputs: dict[str, Value] = field(default_factory=dict)
    outputs: dict[str, np.ndarray] = field(default_factory=dict)
    output_grads: dict[str, np.ndarray] = field(default_factory=dict)
    input_grads: dict[str, np.ndarray] = field(default_factory=dict)


def input_rng(spec: KernelSpec) -> np.random.Generator:
    """The rng for a spec's inputs: a stream of its own, apart from the generator's."""
    return np.random.default_rng([spec.seed & 0xFFFFFFFFFFFFFFFF, xxhash.xxh32_intdigest(spec.category.encode()), spec.index, 7])


def draw_value(arg: ArgSpec, rng: np.random.Generator) -> Value:
    """A seeded value for one argument, as NumPy components (shape + component shape)."""
    np_dtype, comp = DTYPES[arg.dtype]
    shape = tuple(arg.shape) + comp
    if arg.kind == "array" and arg.role == "out":
        return np.zeros(shape, dtype=np_dtype)
    lo, hi = arg.domain
    if np_dtype == "bool":
        data = rng.integers(0, 2, size=shape).astype(bool)
    elif np_dtype.startswith(("int", "uint")):
        data = rng.integers(int(np.ceil(lo)), int(np.floor(hi)) + 1, size=shape).astype(np_dtype)
    else:
        data = rng.uniform(lo, hi, size=shape).astype(np_dtype)
    if arg.kind == "scalar" and not comp:
        return data.item()
    return data


def draw_inputs(spec: KernelSpec) -> dict[str, Value]:
    rng = input_rng(spec)
    return {arg.name: draw_value(arg, rng) for arg in spec.args}


def to_warp(arg: ArgSpec, value: Value, device: str, requires_grad: bool):
    wp = warp_env.warp()
    wp_type = getattr(wp, arg.dtype)
    if arg.kind == "array":
        return wp.array(np.ascontiguousarray(value), dtype=wp_type, shape=tuple(arg.shape), device=device, requires_grad=requires_grad)
    if isinstance(value, np.ndarray):  # vector / matrix / quaternion by value
        return wp_type(*value.reshape(-1).tolist())
    return value


def check_outputs(spec: KernelSpec, inputs: dict[str, Value], outputs: dict[str, np.ndarray]) -> tuple[str, str] | None:
    """(reason, detail) if an output is non-finite or does not vary, else None."""
    for arg in spec.args:
        if arg.name not in outputs:
            continue
        out = outputs[arg.name]
        if out.dtype.kind == "f" and not np.all(np.isfinite(out)):
            return "nan_output", f"output {arg.name!r} has non-finite values"
        if out.size > len(DTYPES[arg.dtype][1]) and np.prod(arg.shape) > 1:
            flat = out.reshape(int(np.prod(arg.shape)), -1)
            if np.all(flat == flat[0]):
                what = "all zero" if not np.any(flat) else "constant"
                return "constant_output", f"output {arg.name!r} is {what}"
        elif np.array_equal(out, inputs[arg.name]):
            return "constant_output", f"output {arg.name!r} is unchanged by the kernel"
    return None


@contextlib.contextmanager
def batch_module(specs: Sequence[KernelSpec]):
    """Load every spec's source and gather its kernel into one Warp module.

    Yields a list with the kernel object per spec (None where the source has no kernel
    of that name or failed to load, with the reason in the second list).
    """
    wp = warp_env.warp()
    from warp._src.context import Module

    batch_module.counter += 1
    module = Module(f"cudagen_batch_{batch_module.counter}", None)
    module.options["optimization_level"] = CPU_OPT_LEVEL
    kernels: list[Any] = []
    errors: list[str] = []
    with contextlib.ExitStack() as stack:
        for spec in specs:
            try:
                # Shared module: @wp.func names must stay unique across the batch.
                loaded = stack.enter_context(warp_env.loaded_source(spec.python_source, fresh_function_names=False))
            except SyntaxError as exc:
                kernels.append(None)
                errors.append(f"SyntaxError: {exc.msg} (line {exc.lineno})")
                continue
            kernel = getattr(loaded.module, spec.kernel_name, None)
            if not isinstance(kernel, wp.Kernel):
                kernels.append(None)
                errors.append(loaded.errors[0].message if loaded.errors else f"no kernel named {spec.kernel_name!r}")
                continue
            kernel.module = module
            module.register_kernel(kernel)
            kernels.append(kernel)
            errors.append("")
        try:
            yield module, kernels, errors
        finally:
            warp_env.release_module(module)
            warp_env.clear_private_cache()


batch_module.counter = 0


ReferenceCheck = Callable[[KernelSpec, dict, dict], "str | None"]


def execute_specs(
    specs: Sequence[KernelSpec],
    *,
    device: str = "cpu",
    reference_checks: dict[str, ReferenceCheck] | None = None,
    given: Sequence[tuple[dict, dict] | None] | None = None,
) -> list[ExecutionResult]:
    """Run each spec once (forward + backward) and judge the results; one result per spec.

    Kernels are built together; if the shared build fails (one kernel breaks the C++
    build for all), the batch is split in halves until the culprits stand alone.
    ``reference_checks`` maps a category to a NumPy check (None means: the registry's).
    ``given`` supplies, per spec, recorded (inputs, output gradients) to run with instead
    of drawing them (re-checking a row's test vectors, here or on a GPU).
    """
    if reference_checks is None:
        from ..generators import ml

        reference_checks = ml.REFERENCE_CHECKS
    results: list[ExecutionResult | None] = [None] * len(specs)

    def solve(idx: list[int]) -> None:
        sub = [specs[i] for i in idx]
        with batch_module(sub) as (module, kernels, errors):
            build_error = _build(module, device) if any(k is not None for k in kernels) else None
            if build_error is None or len(idx) == 1:
                for i, spec, kernel, error in zip(idx, sub, kernels, errors):
                    if kernel is None:
                        results[i] = ExecutionResult(False, "load_error", error)
                    elif build_error is not None:
                        results[i] = ExecutionResult(False, "build_error", build_error)
                    else:
                        inputs, grads = given[i] if given is not None and given[i] is not None else (None, None)
                        results[i] = run_kernel(spec, kernel, device, reference_checks.get(spec.category), inputs, grads)
                return
        # The shared build failed: split, so only the kernels that break it are rejected.
        half = len(idx) // 2
        solve(idx[:half])
        solve(idx[half:])

    if specs:
        solve(list(range(len(specs))))
    return results  # type: ignore[return-value]


def _build(module, device: str) -> str | None:
    """Build the module for ``device``; the first line of the error, or None."""
    with warp_env.captured_stderr() as log:
        try:
            module.load(device, block_dim=1 if device == "cpu" else None)
            return None
        except Exception as exc:  # noqa: BLE001
            message = str(exc).strip().splitlines()
    return (message[0] if message else "build failed") + (f" | {log[0].strip().splitlines()[0]}" if log and log[0].strip() else "")


def run_kernel(
    spec: KernelSpec,
    kernel,
    device: str = "cpu",
    reference_check: ReferenceCheck | None = None,
    inputs: dict[str, Value] | None = None,
    output_grads: dict[str, np.ndarray] | None = None,
) -> ExecutionResult:
    """Launch one kernel on seeded (or given) inputs, then backward; judge outputs and gradients."""
    wp = warp_env.warp()
    if inputs is None:
        inputs = draw_inputs(spec)
    result = ExecutionResult(False, inputs={k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in inputs.items()})
    grad_args = [a for a in spec.args if a.kind == "array" and is_float_dtype(a.dtype)]
    warp_args = {a.name: to_warp(a, inputs[a.name], device, a in grad_args) for a in spec.args}
    tape = wp.Tape()
    try:
        with tape:
            launch(spec, kernel, [warp_args[a.name] for a in spec.args], device)
        result.outputs = {a.name: warp_args[a.name].numpy().copy() for a in spec.args if a.kind == "array" and a.role != "in"}
    except Exception as exc:  # noqa: BLE001
        result.reason, result.detail = "launch_error", _first_line(exc)
        return result
    bad = check_outputs(spec, inputs, result.outputs)
    if bad is None and reference_check is not None:
        message = reference_check(spec, result.inputs, result.outputs)
        if message:
            bad = ("reference_mismatch", message)
    if bad is not None:
        result.reason, result.detail = bad
        return result

    if uses_while_loop(spec.python_source):
        result.ok = True  # forward checked; see uses_while_loop for why backward is not run
        return result
    seeds = output_grads if output_grads is not None else draw_output_grads(spec, grad_args)
    try:
        if seeds:
            tape.backward(grads={warp_args[n]: to_warp(_arg(spec, n), g, device, False) for n, g in seeds.items()})
        result.output_grads = seeds
        result.input_grads = {a.name: warp_args[a.name].grad.numpy().copy() for a in grad_args if a.role != "out"}
    except Exception as exc:  # noqa: BLE001
        result.reason, result.detail = "backward_error", _first_line(exc)
        return result
    finally:
        tape.reset()
    for name, grad in result.input_grads.items():
        if not np.all(np.isfinite(grad)):
            result.reason, result.detail = "nan_gradient", f"gradient of {name!r} has non-finite values"
            return result
    result.ok = True
    return result


def uses_while_loop(source: str) -> bool:
    """True if the source has a ``while`` loop.

    Warp 1.19's CPU adjoint of a while loop writes out of bounds (glibc aborts with
    "double free or corruption" a few launches later) and returns zero gradients, so
    such kernels are checked forward only and record no gradients.
    """
    return any(isinstance(node, ast.While) for node in ast.walk(ast.parse(source)))


def draw_output_grads(spec: KernelSpec, grad_args: list[ArgSpec]) -> dict[str, np.ndarray]:
    """Seed gradients for every float output, from a stream of the spec's own."""
    rng = np.random.default_rng([spec.seed & 0xFFFFFFFFFFFFFFFF, xxhash.xxh32_intdigest(spec.category.encode()), spec.index, 11])
    seeds = {}
    for a in grad_args:
        if a.role != "in":
            np_dtype, comp = DTYPES[a.dtype]
            seeds[a.name] = rng.uniform(-1.0, 1.0, size=tuple(a.shape) + comp).astype(np_dtype)
    return seeds


def launch(spec: KernelSpec, kernel, args: list, device: str) -> None:
    wp = warp_env.warp()
    dim = spec.launch_dim[0] if len(spec.launch_dim) == 1 else tuple(spec.launch_dim)
    if spec.is_tiled:
        wp.launch_tiled(kernel, dim=dim, inputs=args, block_dim=spec.block_dim, device=device)
    else:
        wp.launch(kernel, dim=dim, inputs=args, device=device)


def _arg(spec: KernelSpec, name: str) -> ArgSpec:
    return next(a for a in spec.args if a.name == name)


def _first_line(exc: BaseException) -> str:
    lines = [ln for ln in str(exc).strip().splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


# --------------------------------------------------------------------------- test vectors


def encode_value(arg: ArgSpec, value: Value) -> dict[str, Any]:
    if isinstance(value, np.ndarray):
        data = value.tolist()
    else:
        data = value
    out: dict[str, Any] = {"dtype": arg.dtype}
    if arg.kind == "array":
        out["shape"] = list(arg.shape)
    out["data"] = data
    return out


def test_vectors(spec: KernelSpec, result: ExecutionResult) -> dict[str, Any]:
    """The JSON-able test vectors of a successful run (format: dataset/schema.py)."""
    by_name = {a.name: a for a in spec.args}
    return {
        "launch_dim": list(spec.launch_dim),
        "block_dim": spec.block_dim,
        "inputs": {n: encode_value(by_name[n], v) for n, v in result.inputs.items()},
        "outputs": {n: encode_value(by_name[n], v) for n, v in result.outputs.items()},
        "output_grads": {n: encode_value(by_name[n], v) for n, v in result.output_grads.items()},
        "input_grads": {n: encode_value(by_name[n], v) for n, v in result.input_grads.items()},
    }


def decode_value(encoded: dict[str, Any]) -> Value:
    """Inverse of :func:`encode_value` (NumPy components in the dtype's precision)."""
    np_dtype, comp = DTYPES[encoded["dtype"]]
    data = encoded["data"]
    if "shape" not in encoded and not comp:
        return data
    return np.asarray(data, dtype=np_dtype).reshape(tuple(encoded.get("shape", ())) + comp)

