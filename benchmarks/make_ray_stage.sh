#!/usr/bin/env bash
# Packs Ray (the version pyproject.toml's [ray] extra pins) and its Python dependencies for
# the lent GPU machine (Python 3.12, x86_64, no network, no Ray) into .gpu_ray/ray.tar.xz of
# the checkout you stand in: one carry folder, ~35 MB (under the 64 MiB one device call carries).
# Ray's Java jars and RLlib are left out (not used); filelock and typing-extensions are not
# packed (PyTorch brings them there).  Takes ~3 minutes (xz).
# Usage: benchmarks/make_ray_stage.sh        then see bench_scaling.py's GPU commands in README.md
set -euo pipefail
top=$(git rev-parse --show-toplevel)
cd "$top"
py=${PYTHON:-python3}
pkgs="ray==2.60.0 click==8.5.1 msgpack==1.2.4 packaging==26.3 protobuf==7.36.2 pyyaml==6.0.3 requests==2.34.2 charset-normalizer==3.5.2 idna==3.20 urllib3==2.8.0 certifi==2026.10.18 jsonschema==4.26.0 attrs==26.1.0 jsonschema-specifications==2025.9.1 referencing==0.37.0 rpds-py==2026.9.1"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any)
# shellcheck disable=SC2086
"$py" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" -d "$tmp/whl" $pkgs
# an install (not an unzip) keeps the executable bits of Ray's raylet and GCS binaries
"$py" -m pip install -q --no-deps --no-compile --only-binary=:all: --python-version 3.12 --implementation cp "${plat[@]}" --target "$tmp/site" "$tmp"/whl/*.whl
rm -rf "$tmp/site/ray/jars" "$tmp/site/ray/rllib" "$tmp/site/bin"
find "$tmp/site" -name __pycache__ -type d -prune -exec rm -rf {} +
rm -rf .gpu_ray && mkdir -p .gpu_ray
(cd "$tmp/site" && tar cf - . | xz -T0 -6 > "$top/.gpu_ray/ray.tar.xz")
ex=$(git rev-parse --git-path info/exclude); mkdir -p "$(dirname "$ex")"
grep -qxF /.gpu_ray/ "$ex" 2>/dev/null || echo /.gpu_ray/ >> "$ex"
echo "ray packed:"; du -sh .gpu_ray
