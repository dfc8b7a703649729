#!/usr/bin/env bash
# Proves the published tarball works without a compiler:
#   1. build the prebuild (prebuilds/linux-x64/hora.node) and pack,
#   2. check the tarball ships what a user and a source build need, and
#      none of tests, benchmarks or node_modules,
#   3. install it into an empty project with a PATH that has node and npm but
#      no g++, make or python3, and load it through require and import.
# npm 11 does not run a dependency's install script unless approved, so the
# addon must load from the shipped prebuild at require time.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

work="$(mktemp -d "${TMPDIR:-/tmp}/hora-pack-test.XXXXXX")"
cleanup() { rm -rf "$work"; }
trap cleanup EXIT

step() { printf '\n== pack-test: %s\n' "$*"; }
die() { printf 'pack-test: FAIL: %s\n' "$*" >&2; exit 1; }

# Work on a copy of the tree so the checkout's build/, dist/ and prebuilds/
# stay as they were (tests running beside this one load from there).
step "copy the tree to $work/src"
mkdir "$work/src"
tar -C "$root" --exclude=./node_modules --exclude=./build --exclude=./build-cuda --exclude=./dist \
  --exclude=./prebuilds --exclude=./.git --exclude='*.tgz' -cf - . | tar -C "$work/src" -xf -
ln -s "$root/node_modules" "$work/src/node_modules"
cd "$work/src"

step "prebuild"
npm run --silent prebuild
ls prebuilds/*/*.node >/dev/null 2>&1 || die "npm run prebuild made no prebuilds/*/*.node"

step "npm pack (runs prepare: tsc + ESM wrapper)"
npm pack --pack-destination "$work"
tarballs=("$work"/*.tgz)
[ "${#tarballs[@]}" -eq 1 ] && [ -f "${tarballs[0]}" ] || die "npm pack wrote no tarball"
tarball="${tarballs[0]}"

step "tarball contents"
tar -tzf "$tarball" | sed 's|^package/||' | sort >"$work/contents.txt"
must_have=(
  package.json
  binding.gyp
  CMakeLists.txt
  scripts/list-sources.js
  scripts/build-cuda.sh
  dist/ts/index.js
  dist/ts/index.mjs
  dist/ts/index.d.ts
  dist/ts/loader.js
  prebuilds/linux-x64/hora.node
)
for f in "${must_have[@]}"; do
  grep -qxF "$f" "$work/contents.txt" || die "tarball lacks $f"
done
grep -q '^proto/.*\.proto$' "$work/contents.txt" || die "tarball lacks proto/*.proto"
grep -q '^native/binding/.*\.cc$' "$work/contents.txt" || die "tarball lacks native/binding sources"
grep -q '^native/src/.*\.\(cc\|h\)$' "$work/contents.txt" || die "tarball lacks native/src sources"
if grep -E '^(test|bench|examples|node_modules|build|native/test|\.ci)/' "$work/contents.txt"; then
  die "tarball ships files it must not (above)"
fi
if [ -f README.md ]; then
  grep -qxF README.md "$work/contents.txt" || die "tarball lacks README.md"
fi
echo "ok: $(wc -l <"$work/contents.txt") files"

step "install into an empty project with no compiler on PATH"
mkdir "$work/app" "$work/bin"
ln -s "$(command -v node)" "$work/bin/node"
ln -s "$(command -v npm)" "$work/bin/npm"
# npm runs lifecycle scripts with sh: give it sh and nothing else.
ln -s "$(command -v sh)" "$work/bin/sh"
printf '{ "name": "hora-pack-test-app", "version": "1.0.0", "private": true }\n' >"$work/app/package.json"
cd "$work/app"
for tool in g++ gcc c++ cc make python3 python; do
  if env PATH="$work/bin" sh -c "command -v $tool" >/dev/null 2>&1; then
    die "$tool is still reachable on the restricted PATH"
  fi
done
env PATH="$work/bin" CXX=/bin/false CC=/bin/false \
  npm install --no-audit --no-fund --prefer-offline "$tarball"
[ ! -e node_modules/hora/build ] || die "installing compiled the addon (node_modules/hora/build exists)"
# Where the user approves hora's install script, node-gyp-build must settle
# for the prebuild too instead of calling the (absent) compiler.
# (npm puts node_modules/.bin on PATH for scripts; node-gyp-build needs it.)
(cd node_modules/hora && env PATH="$work/app/node_modules/.bin:$work/bin" node ../node-gyp-build/bin.js) ||
  die "the install script (node-gyp-build) failed without a compiler"
[ ! -e node_modules/hora/build ] || die "the install script compiled the addon despite the prebuild"

step "load through require and import"
env PATH="$work/bin" node -e '
const path = require("path");
const cjs = require("hora");
const root = path.dirname(require.resolve("hora/package.json"));
const { loadNative } = require(path.join(root, "dist/ts/loader.js"));
const addon = loadNative();
if (addon === null || typeof addon !== "object") throw new Error("loadNative returned " + typeof addon);
const loaded = Object.keys(require.cache).filter((f) => f.endsWith(".node"));
if (!loaded.some((f) => f.includes(path.join("prebuilds", "linux-x64")))) {
  throw new Error("addon not loaded from the prebuild: " + JSON.stringify(loaded));
}
import("hora").then((esm) => {
  const want = Object.keys(cjs).filter((k) => k !== "__esModule").sort().join(",");
  const got = Object.keys(esm).filter((k) => k !== "default").sort().join(",");
  if (want !== got) throw new Error("ESM exports [" + got + "] differ from CJS exports [" + want + "]");
  if (esm.default !== cjs) throw new Error("ESM default export is not the CJS module");
  console.log("pack-test: require/import ok: typeof exports " + typeof cjs + ", " + Object.keys(cjs).length +
    " exports, addon from " + path.relative(root, loaded[0]));
});
'
step "ok"
