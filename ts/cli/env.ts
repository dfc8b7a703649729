// `hora env`: every HORA_* variable with its current value, default and help,
// grouped by purpose, then what this environment resolves to.

import { Env, HORA_VARIABLES, resolveLaunch, readSettings, VARIABLE_GROUP_TITLES, VariableGroup } from '../config';

export const ENV_USAGE = `Usage: hora env [--json]

Prints every HORA_* variable with its current value, default and meaning,
then the job layout this environment resolves to (rank, size, rendezvous).
  --json    machine-readable output
`;

/** Text of `hora env` for the given environment. Also returns whether every value parsed. */
export function describeEnvironment(env: Env): { text: string; ok: boolean } {
  const lines: string[] = [];
  const groups = Object.keys(VARIABLE_GROUP_TITLES) as VariableGroup[];
  for (const group of groups) {
    lines.push(`${VARIABLE_GROUP_TITLES[group]}:`);
    for (const v of HORA_VARIABLES.filter((x) => x.group === group)) {
      const current = env[v.name];
      const shown = current === undefined ? '(unset)' : v.name === 'HORA_SECRET' ? '(set, hidden)' : JSON.stringify(current);
      const dflt = v.default === undefined ? '' : `  [default ${v.default}]`;
      lines.push(`  ${v.name} = ${shown}${dflt}`);
      lines.push(`      ${v.help}`);
    }
    lines.push('');
  }
  let ok = true;
  lines.push('Resolved:');
  try {
    const settings = readSettings(env);
    const launch = resolveLaunch(env);
    lines.push(`  launched by: ${launch.source}`);
    lines.push(`  rank ${launch.rank} of ${launch.size}` +
      (launch.localRank !== undefined ? `, local rank ${launch.localRank}` : '') +
      (launch.localSize !== undefined ? ` of ${launch.localSize}` : ''));
    if (launch.rendezvousAddr !== undefined) {
      lines.push(`  rendezvous: ${launch.rendezvousAddr}:${launch.rendezvousPort}${launch.isRendezvousHost ? ' (hosted by this process)' : ''}`);
      lines.push(`  secret: ${launch.secretDerived ? 'derived from the job id (weak: set HORA_SECRET on shared networks)' : 'given'}`);
    }
    lines.push(`  host id: ${settings.hostId}`);
    lines.push(`  timeout ${settings.timeoutS} s, debug ${settings.debug}, fusion ${settings.fusionMb} MiB, algo ${settings.algo}, transport ${settings.transport}` +
      (settings.ifaceAddr ? `, iface ${settings.ifaceAddr}` : ''));
  } catch (e) {
    ok = false;
    lines.push(`  error: ${(e as Error).message}`);
  }
  return { text: lines.join('\n') + '\n', ok };
}

/** `hora env [--json]`; returns the exit status (1 when a value is invalid). */
export function envMain(argv: string[], env: Env = process.env): number {
  if (argv.includes('-h') || argv.includes('--help')) {
    process.stdout.write(ENV_USAGE);
    return 0;
  }
  const unknown = argv.find((a) => a !== '--json');
  if (unknown !== undefined) {
    process.stderr.write(`hora env: unknown option ${JSON.stringify(unknown)}\n${ENV_USAGE}`);
    return 2;
  }
  if (argv.includes('--json')) {
    const variables = HORA_VARIABLES.map((v) => ({
      ...v,
      value: v.name === 'HORA_SECRET' && env[v.name] !== undefined ? '(hidden)' : env[v.name] ?? null,
    }));
    let resolved: unknown = null;
    let error: string | null = null;
    try {
      const launch = resolveLaunch(env);
      resolved = { ...launch, secret: launch.secret === undefined ? undefined : '(hidden)', settings: readSettings(env) };
    } catch (e) {
      error = (e as Error).message;
    }
    process.stdout.write(JSON.stringify({ variables, resolved, error }, null, 2) + '\n');
    return error === null ? 0 : 1;
  }
  const { text, ok } = describeEnvironment(env);
  process.stdout.write(text);
  return ok ? 0 : 1;
}
