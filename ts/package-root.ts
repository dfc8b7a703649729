// A package's own folder: the nearest package.json at or above a folder that names the package. The
// loader looks for hora's (build/ and prebuilds/ sit there), `hora --version` reads hora's version there,
// and the adapters name the folder of a framework copy in their errors.

import * as fs from 'node:fs';
import * as path from 'node:path';

/** The nearest folder at or above `start` whose package.json names `name`; null when there is none. */
export function findPackageRoot(start: string, name: string): string | null {
  for (let dir = path.resolve(start); ; dir = path.dirname(dir)) {
    try {
      if ((JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: unknown }).name === name) return dir;
    } catch {
      // none here, or unreadable: keep walking
    }
    if (path.dirname(dir) === dir) return null;
  }
}
