#!/usr/bin/env node
// The `hora` command: parses the subcommand and hands off.

import * as fs from 'node:fs';
import * as path from 'node:path';
import { findPackageRoot } from '../package-root';

export const MAIN_USAGE = `Usage: hora <command> [options]

Commands:
  run     start a distributed job:  hora run -np 4 node train.js
  env     show every HORA_* variable, its value and meaning
  bench   measure collective bandwidth (run it under hora run)
  timeline FILE -np N
          merge the rank files of HORA_TIMELINE=FILE (FILE.rank0 ...) into FILE
          (hora run does it by itself; this is for jobs started by mpirun, Slurm, ...)
  rendezvous
          host the rendezvous of an elastic job whose workers others start
          (Kubernetes pods):  hora rendezvous --min-np 2 --max-np 8

Options:
  -h, --help      show this help (hora <command> --help for a command's options)
  -v, --version   print the hora version
`;

/** Version from hora's package.json, the nearest above this file. */
export function packageVersion(startDir: string = __dirname): string {
  const root = findPackageRoot(startDir, 'hora');
  if (root === null) return 'unknown';
  try {
    const { version } = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as { version?: unknown };
    return typeof version === 'string' ? version : 'unknown';
  } catch {
    return 'unknown';
  }
}

/** Runs `hora` with argv (without node and script); resolves with the exit status. */
export async function main(argv: string[] = process.argv.slice(2)): Promise<number> {
  const [command, ...rest] = argv;
  switch (command) {
    case 'run':
      return (require('./run') as typeof import('./run')).runMain(rest);
    case 'rendezvous':
      return (require('./rendezvous') as typeof import('./rendezvous')).rendezvousMain(rest);
    case 'env':
      return (require('./env') as typeof import('./env')).envMain(rest);
    case 'bench': {
      // Written separately (ts/cli/bench.ts); loaded only when asked for, since it needs the native core.
      const bench = require('./bench') as { main(argv: string[]): unknown };
      const result = await bench.main(rest);
      return typeof result === 'number' ? result : 0;
    }
    case 'timeline':
      return (require('../timeline') as typeof import('../timeline')).timelineMain(rest);
    case undefined:
    case '-h':
    case '--help':
    case 'help':
      process.stdout.write(MAIN_USAGE);
      return command === undefined ? 2 : 0;
    case '-v':
    case '--version':
      process.stdout.write(`${packageVersion()}\n`);
      return 0;
    default:
      process.stderr.write(`hora: unknown command ${JSON.stringify(command)}\n\n${MAIN_USAGE}`);
      return 2;
  }
}

if (require.main === module) {
  main().then(
    (code) => {
      process.exitCode = code;
    },
    (err: unknown) => {
      const e = err as Error & { code?: string };
      process.stderr.write(`hora: ${e && e.stack ? e.stack : String(err)}\n`);
      process.exitCode = 1;
    },
  );
}
