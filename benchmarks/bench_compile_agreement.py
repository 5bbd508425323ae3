"""Agreement of the two compile levels: `frontend` and `ptx` give every kernel the same verdict.

    python benchmarks/bench_compile_agreement.py [--count 2000] [--seed 0] [--batch-size 50] [--arch 86]

Generates --count kernels of all categories (round robin, as the producer does), adds
deliberately broken copies (every kind below, into the forward, the backward and the
device functions, mixed into the same batches so that bisection has to find them),
and compiles everything batched at both levels.  Prints the verdict counts, every
kernel where the levels differ (category, index, both logs), and the time per level
with its ratio.  Exit status 1 if any kernel differs.  The CI test
(tests/test_compile_agreement.py) runs the same check on a small sample; 2,000 kernels
take ~10+ minutes of full compiles on a 2-core machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from collections import Counter

# (name, text put at the start of a function body, or a whole function for "device")
BROKEN_KINDS = {
    "syntax": "int broken = ;",  # tests/test_extract.py bisection test
    "undefined_identifier": "this_is_not_cuda;",  # tests/test_extract.py compile-failure test
    "unknown_builtin": "float z_ = wp::addd(1.0f, 2.0f);",  # the injected error
    "type_mismatch": "wp::vec3 z_ = wp::mat33();",
    "bad_template_use": "auto z_ = wp::address(1, 2, 3);",  # fails inside Warp's headers
    "static_assert": 'static_assert(sizeof(float) == 8, "float is 4 bytes");',
}


def broken_variants(kernel):
    """(kind@place, kernel) for every broken kind, injected where it is compiled."""
    out = []
    for kind, text in BROKEN_KINDS.items():
        out.append(
            (f"{kind}@forward", dataclasses.replace(kernel, forward=kernel.forward.replace("{", "{ " + text, 1)))
        )
        if kernel.backward:
            out.append(
                (f"{kind}@backward", dataclasses.replace(kernel, backward=kernel.backward.replace("{", "{ " + text, 1)))
            )
        bad_func = f"static CUDA_CALLABLE void cudagen_broken_helper() {{ {text} }}\n"
        out.append(
            (f"{kind}@device", dataclasses.replace(kernel, device_functions=kernel.device_functions + "\n" + bad_func))
        )
    return out


def generated_kernels(count: int, seed: int):
    """(label, kernel) of the first ``count`` slots that extract, all categories in turn."""
    from cudagen_data.extract import DEFAULT_BLOCK_DIM, extract_source
    from cudagen_data.generators import categories, generate

    cats = categories()
    out = []
    for slot in range(count):
        cat, index = cats[slot % len(cats)], slot // len(cats)
        try:
            spec = generate(cat, seed, index)
        except Exception:  # noqa: BLE001 - a generator error is not a compile verdict
            continue
        report = extract_source(spec.python_source, block_dim=spec.block_dim or DEFAULT_BLOCK_DIM)
        kernel = next((k for k in report.kernels if k.name == spec.kernel_name), None)
        if kernel is not None and not report.errors:
            out.append((f"{cat}#{index}", kernel))
    return out


def with_broken(good, every: int):
    """The good kernels with the broken variants of every ``every``-th one mixed in after it."""
    mixed = []
    for i, (label, kernel) in enumerate(good):
        mixed.append((label, kernel, True))
        if i % every == 0:
            mixed += [(f"{label} {kind}", bad, False) for kind, bad in broken_variants(kernel)]
    return mixed


def error_lines(log: str) -> list[str]:
    return [ln for ln in log.splitlines() if ": error" in ln or "fatal" in ln]


def agreement(mixed, *, arch: int, batch_size: int):
    """Compile at both levels; (seconds per level, verdict counts, differences)."""
    from cudagen_data.extract import compile_units

    kernels = [k for _, k, _ in mixed]
    seconds, results = {}, {}
    for level in ("frontend", "ptx"):
        t0 = time.perf_counter()
        res = []
        for i in range(0, len(kernels), batch_size):
            res += compile_units(kernels[i : i + batch_size], arch=arch, level=level)
        seconds[level] = time.perf_counter() - t0
        results[level] = res
    counts: Counter = Counter()
    differences = []
    for (label, _, expect_ok), fe, px in zip(mixed, results["frontend"], results["ptx"], strict=False):
        counts[("good" if expect_ok else "broken", "ok" if fe.ok else "fails", "ok" if px.ok else "fails")] += 1
        if fe.ok != px.ok:
            differences.append((label, "verdict", fe.log, px.log))
        elif not fe.ok and error_lines(fe.log) != error_lines(px.log):
            differences.append((label, "error lines", fe.log, px.log))
        elif not expect_ok and fe.ok:
            differences.append((label, "broken kernel compiled at both levels", "", ""))
    return seconds, counts, differences


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=2000, help="generated kernels (slots, all categories in turn)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=50)
    ap.add_argument("--arch", type=int, default=86)
    ap.add_argument("--broken-every", type=int, default=40, help="broken variants of every N-th kernel")
    args = ap.parse_args()

    from cudagen_data.extract.levels import compiler_record

    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus; frontend: NVRTC "
        f"{compiler_record(args.arch, 'frontend')['nvrtc_version']} standalone"
    )
    t0 = time.perf_counter()
    good = generated_kernels(args.count, args.seed)
    mixed = with_broken(good, args.broken_every)
    cats = Counter(label.split("#")[0] for label, _, _ in mixed)
    print(
        f"{len(good)} generated kernels ({len(cats)} categories) + {len(mixed) - len(good)} broken ones "
        f"({len(BROKEN_KINDS)} kinds x forward/backward/device), made in {time.perf_counter() - t0:.0f} s"
    )
    seconds, counts, differences = agreement(mixed, arch=args.arch, batch_size=args.batch_size)
    for (kind, fe, px), n in sorted(counts.items()):
        print(f"  {kind:6s} kernels: frontend {fe:5s} ptx {px:5s}: {n}")
    fe_s, px_s = seconds["frontend"], seconds["ptx"]
    print(
        f"time: frontend {fe_s:.1f} s ({fe_s / len(mixed) * 1000:.1f} ms/kernel), ptx {px_s:.1f} s "
        f"({px_s / len(mixed) * 1000:.1f} ms/kernel); ptx / frontend = {px_s / fe_s:.1f}x"
    )
    for label, what, fe_log, px_log in differences:
        print(f"DIFFERS {label}: {what}\n  frontend: {error_lines(fe_log)[:2]}\n  ptx:      {error_lines(px_log)[:2]}")
    print(f"{len(differences)} of {len(mixed)} kernels differ" + ("" if differences else ": the levels agree"))
    sys.exit(1 if differences else 0)


if __name__ == "__main__":
    main()
