/**
 * Finding a framework where the application finds it, not where hora sits.
 *
 * A linked or local-path install (`npm link`, `npm install ../hora`, workspaces, monorepos) leaves hora
 * in a folder of its own with its own node_modules, often holding another copy of the framework (hora's
 * devDependencies). A plain require() from hora's files would load that copy beside the application's: for
 * tfjs two sets of classes (a model of one copy refuses the layers, callbacks and SymbolicTensors of the
 * other) on one shared engine ("Platform node has already been set"). The copy the user's objects come
 * from is, in this order:
 *   1. one the process has already loaded: the application imported the framework before the adapter, as
 *      the docs do. Whatever the layout, that is the instance its models come from;
 *   2. the one the application resolves: from the folder of its entry script (require.main, or the
 *      script node was given: an ES module has no require.main), then from the working directory;
 *   3. the one beside hora, last: an installed tarball (node_modules/hora inside the application), where
 *      it is the same as 2.
 */
import * as fs from 'node:fs';
import * as path from 'node:path';
import { findPackageRoot } from '../ts/internal';

/** Where a framework was found, and how (for error messages). */
export interface Found {
  /** The file that was (or is to be) required. */
  file: string;
  /** How it was chosen: 'already loaded', 'resolved from DIR' or 'beside hora (DIR)'. */
  how: string;
}

/** Folders the application resolves its packages from, best first; hora's own folder is not among them. */
export function applicationFolders(): string[] {
  const folders: string[] = [];
  const main = require.main?.filename ?? process.argv[1];
  if (main) {
    try {
      folders.push(path.dirname(fs.realpathSync(main)));
    } catch {
      // `node -e`, the REPL, or a script name node completed (`node train` for train.js): the directory it names
      folders.push(path.dirname(path.resolve(main)));
    }
  }
  const cwd = process.cwd();
  if (!folders.includes(cwd)) folders.push(cwd);
  return folders;
}

/**
 * The file a chain of packages leads to from `from`: ['@tensorflow/tfjs', '@tensorflow/tfjs-core'] is
 * tfjs-core as @tensorflow/tfjs resolves it (a strict layout such as pnpm's shows the application only its
 * direct dependencies). null where a link is missing.
 */
function resolveChain(chain: readonly string[], from: string): string | null {
  let file: string | null = null;
  let dir = from;
  for (const name of chain) {
    try {
      file = require.resolve(name, { paths: [dir] });
    } catch {
      return null;
    }
    dir = path.dirname(file);
  }
  return file;
}

/**
 * A framework's file: a loaded module that `isLoaded` accepts (the first loaded), else the first chain that
 * resolves from the application's folders, else from hora's. null where none does.
 */
export function findFramework(isLoaded: (m: NodeModule) => boolean, chains: ReadonlyArray<readonly string[]>): Found | null {
  const loaded = Object.values(require.cache).filter((m): m is NodeModule => m !== undefined && isLoaded(m));
  if (loaded.length > 0) {
    // Several copies loaded already: the application's own, if it resolves one of them.
    for (const dir of applicationFolders()) {
      for (const chain of chains) {
        const file = resolveChain(chain, dir);
        const m = loaded.find((l) => l.filename === file);
        if (m) return { file: m.filename, how: 'already loaded' };
      }
    }
    return { file: loaded[0].filename, how: 'already loaded' };
  }
  for (const dir of applicationFolders()) {
    for (const chain of chains) {
      const file = resolveChain(chain, dir);
      if (file) return { file, how: `resolved from ${dir}` };
    }
  }
  for (const chain of chains) {
    const file = resolveChain(chain, __dirname);
    if (file) return { file, how: `beside hora (${__dirname})` };
  }
  return null;
}

/** The folder of the package that holds `file` (the nearest package.json above it that names `name`). */
export function packageFolder(file: string, name: string): string | null {
  return findPackageRoot(path.dirname(file), name);
}

/** The loaded module, among those `isLoaded` accepts, whose export `exportName` is a class `value` derives from. */
export function loadedModuleOf(value: object, exportName: string, isLoaded: (m: NodeModule) => boolean): string | null {
  for (const m of Object.values(require.cache)) {
    if (!m || !isLoaded(m)) continue;
    const cls = (m.exports as Record<string, unknown> | null)?.[exportName];
    if (typeof cls === 'function' && (cls as { prototype: object }).prototype.isPrototypeOf(value)) return m.filename;
  }
  return null;
}
