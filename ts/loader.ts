// Finds and loads the native addon (hora.node), once per process.
//
// Where it looks, in order: $HORA_ADDON alone when set (an explicit choice is
// never silently replaced by another build), else build/Release and
// build/Debug (node-gyp or cmake-js output, a source build wins over a
// prebuild), else prebuilds/<platform>-<arch>/ chosen with node-gyp-build's
// own tag rules (what `npm run prebuildify` ships in the tarball). When
// nothing loads, the error lists every path with the reason it failed and the
// ways to fix it, as npm 11 does not run a dependency's install script unless
// approved, so "not built" is a normal first-run state.

import * as fs from 'fs';
import * as path from 'path';
import { DEBUG_LEVELS, readAddonPath, readDebugLevel } from './config';
import type { NativeAddon } from './native';
import { findPackageRoot } from './package-root';

const PACKAGE_NAME = 'hora';
const ADDON_FILE = 'hora.node';

const FIX_HINT =
  'To fix: build from source: cd node_modules/hora && npx node-gyp rebuild ' +
  '(needs python3, make, g++), or allow the install script: ' +
  'npm install-scripts approve hora && npm rebuild hora. ' +
  'HORA_ADDON=/path/to/hora.node loads one specific build.';

interface Attempt {
  file: string;
  reason: string;
}

// A path to try; `reason` set means it is known to fail and only gets listed.
interface Candidate {
  file: string;
  reason?: string;
}

// The subset of node-gyp-build's exported helpers used to pick a prebuild.
interface PrebuildTags {
  file: string;
}
interface PrebuildTuple {
  name: string;
}
interface NodeGypBuild {
  parseTuple(name: string): PrebuildTuple | undefined;
  matchTuple(platform: string, arch: string): (t: PrebuildTuple | undefined) => boolean;
  compareTuples(a: PrebuildTuple, b: PrebuildTuple): number;
  parseTags(file: string): PrebuildTags | undefined;
  matchTags(runtime: string, abi: string): (t: PrebuildTags | undefined) => boolean;
  compareTags(runtime: string): (a: PrebuildTags, b: PrebuildTags) => number;
}

let cached: NativeAddon | undefined;

/** Loads the addon on first call and returns the same object after. */
export function loadNative(): NativeAddon {
  if (cached !== undefined) return cached;
  const attempts: Attempt[] = [];
  const override = readAddonPath();
  const candidates: Candidate[] = override ? [{ file: path.resolve(override) }] : defaultCandidates(horaRoot());
  for (const { file, reason } of candidates) {
    if (reason !== undefined) {
      attempts.push({ file, reason });
      continue;
    }
    if (!fs.existsSync(file)) {
      attempts.push({ file, reason: 'not found' });
      continue;
    }
    try {
      const addon = require(file) as NativeAddon;
      // The native code reads no environment: its log level comes from here, before any communicator exists.
      addon.setLogLevel(DEBUG_LEVELS.indexOf(readDebugLevel()));
      cached = addon;
      return cached;
    } catch (err) {
      attempts.push({ file, reason: (err as Error).message.split('\n')[0] });
    }
  }
  throw loadError(attempts, override !== undefined);
}

/** The folder holding hora's package.json, walking up from this file. */
function horaRoot(): string {
  const root = findPackageRoot(__dirname, PACKAGE_NAME);
  if (root === null) {
    throw internalError(
      `hora: cannot find hora's package.json above ${__dirname}, so the native addon cannot be located. ` +
        'HORA_ADDON=/path/to/hora.node loads one specific build.',
    );
  }
  return root;
}

function defaultCandidates(root: string): Candidate[] {
  return [
    { file: path.join(root, 'build', 'Release', ADDON_FILE) },
    { file: path.join(root, 'build', 'Debug', ADDON_FILE) },
    ...prebuildCandidates(root),
  ];
}

// Prebuilds that fit this process, best first. When none fits, the folder
// itself is listed as a failed candidate, so the error shows where we looked.
function prebuildCandidates(root: string): Candidate[] {
  const prebuilds = path.join(root, 'prebuilds');
  const wanted = path.join(prebuilds, `${process.platform}-${process.arch}`);
  let ngb: NodeGypBuild | undefined;
  try {
    ngb = require('node-gyp-build') as NodeGypBuild;
  } catch {
    ngb = undefined;
  }
  const dirs = ngb ? matchingTupleDirs(prebuilds, ngb) : [wanted];
  const found: Candidate[] = [];
  for (const dir of dirs) {
    const names = readdir(dir).filter((n) => n.endsWith('.node'));
    const picked = ngb ? pickPrebuilds(names, ngb) : names.sort();
    for (const name of picked) found.push({ file: path.join(dir, name) });
  }
  if (found.length === 0) {
    const reason = fs.existsSync(wanted)
      ? `not found (no prebuild there fits node ${process.version}, N-API ${process.versions.napi})`
      : 'not found';
    found.push({ file: path.join(wanted, '*.node'), reason });
  }
  return found;
}

function matchingTupleDirs(prebuilds: string, ngb: NodeGypBuild): string[] {
  return readdir(prebuilds)
    .map((n) => ngb.parseTuple(n))
    .filter(ngb.matchTuple(process.platform, process.arch))
    .map((t) => t as PrebuildTuple)
    .sort((a, b) => ngb.compareTuples(a, b))
    .map((t) => path.join(prebuilds, t.name));
}

function pickPrebuilds(names: string[], ngb: NodeGypBuild): string[] {
  const runtime = 'node';
  return names
    .map((n) => ngb.parseTags(n))
    .filter(ngb.matchTags(runtime, process.versions.modules))
    .map((t) => t as PrebuildTags)
    .sort(ngb.compareTags(runtime))
    .map((t) => t.file);
}

function readdir(dir: string): string[] {
  try {
    return fs.readdirSync(dir);
  } catch {
    return [];
  }
}

function loadError(attempts: Attempt[], fromOverride: boolean): Error {
  const lines = attempts.map((a) => `  ${a.file}: ${a.reason}`);
  const source = fromOverride ? ' (HORA_ADDON is set, so only that path was tried)' : '';
  return internalError(
    `hora: could not load the native addon ${ADDON_FILE}${source}. Tried:\n${lines.join('\n')}\n${FIX_HINT}`,
  );
}

function internalError(message: string): Error {
  return Object.assign(new Error(message), { code: 'ERR_INTERNAL' });
}
