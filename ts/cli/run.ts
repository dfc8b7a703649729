// `hora run`: start N workers as one job and supervise them.
//
// The command is in three parts, each of its own files. The arguments: run-args.ts (the flag table,
// parseRunArgs() and its errors) and run-usage.ts (the help text). The spawners: spawn.ts (the contract
// and LocalSpawner), ssh.ts (SshSpawner) and host-spawner.ts (HostSpawner, which picks one per -H entry and
// binds the rendezvous server where every worker can reach it). The supervision: supervise.ts (launch(),
// which starts the workers, shows their output and ends the job as a whole) and elastic-supervision.ts
// (what a lost worker does to an elastic job). Where each worker goes is placement.ts; where its output
// goes, worker-output.ts.

import { HoraConfigError } from '../config';
import { parseCommand } from './flags';
import { parseRunArgs } from './run-args';
import { RUN_USAGE } from './run-usage';
import { LaunchError } from './spawn';
import { launch } from './supervise';

/** `hora run ...`: parses argv (after "run") and runs the job; resolves with the exit status. */
export async function runMain(argv: string[]): Promise<number> {
  const opts = parseCommand('run', RUN_USAGE, () => parseRunArgs(argv));
  if (typeof opts === 'number') return opts;
  try {
    return await launch(opts);
  } catch (e) {
    if (e instanceof LaunchError || e instanceof HoraConfigError) {
      process.stderr.write(`hora run: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}
