#!/usr/bin/env bash
# Packs what bench/gpu/device-check.sh carries to a GPU machine that has no Node.js:
#   bash bench/gpu/pack.sh BASE_ADDON NEW_ADDON
# e.g. a CUDA addon of the build before (`bash scripts/build-cuda.sh build-base` in its checkout) and of
# this tree (`bash scripts/build-cuda.sh build-cuda`). Writes .gpu/ (add `/.gpu/` to .git/info/exclude):
# node.xz (this node binary), modules.tar.xz (tap, protobufjs and node-gyp-build with what they need, about
# 15 MB), base/hora.node and new/hora.node, handover (bench/gpu/handover.cu built with nvcc). Then, with `npm run build:ts` done, carry `.gpu` and `dist`.
set -euo pipefail
cd "$(dirname "$0")/../.."
[ $# -eq 2 ] || { echo "usage: bash bench/gpu/pack.sh BASE_ADDON NEW_ADDON" >&2; exit 2; }
mkdir -p .gpu/base .gpu/new
[ "$1" -ef .gpu/base/hora.node ] || cp "$1" .gpu/base/hora.node
[ "$2" -ef .gpu/new/hora.node ] || cp "$2" .gpu/new/hora.node
xz -T0 -6 -c "$(command -v node)" > .gpu/node.xz
nvcc="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
"$nvcc" -O2 -gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90 -o .gpu/handover bench/gpu/handover.cu
node -e '
const fs = require("fs"), path = require("path");
const seen = new Set();
function visit(name, from) {
  for (let dir = from; ; dir = path.dirname(dir)) {
    const p = path.join(dir, "node_modules", name);
    if (fs.existsSync(p)) {
      const real = fs.realpathSync(p);
      if (seen.has(real)) return;
      seen.add(real);
      const pj = JSON.parse(fs.readFileSync(path.join(real, "package.json")));
      for (const d of Object.keys({ ...pj.dependencies, ...pj.optionalDependencies })) visit(d, real);
      return;
    }
    if (path.dirname(dir) === dir) return;
  }
}
for (const n of ["tap", "protobufjs", "node-gyp-build"]) visit(n, process.cwd());
for (const s of seen) console.log(path.relative(process.cwd(), s));
' > .gpu/modules.txt
tar -cf - -T .gpu/modules.txt | xz -T0 -6 > .gpu/modules.tar.xz
du -sh .gpu
