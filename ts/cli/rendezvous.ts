// `hora rendezvous`: the rendezvous of an elastic job whose workers are started by someone else, such as
// the pods of a Kubernetes Job (docs/cluster.md). It forms worlds from the workers that register, as
// `hora run --min-np` does, but starts no process and kills none: a worker it leaves out has its control
// connection closed and exits, and whoever started it (the Job controller) may start it again; the new
// worker joins at the ranks' next commit.

import * as crypto from 'node:crypto';
import { HoraConfigError, makeLogger, readSettings, ELASTIC_SERVICE_PORT } from '../config';
import { RendezvousServer } from '../control/server';
import { countFlag, parseCommand, UsageError } from './flags';

export const RENDEZVOUS_USAGE = `Usage: hora rendezvous --min-np A [options]

Hosts the rendezvous of an elastic job whose workers others start (the pods of
a Kubernetes Job): the workers run the training script with HORA_ELASTIC=1,
HORA_RENDEZVOUS_ADDR (this service's address), HORA_RENDEZVOUS_PORT and
HORA_SECRET, and their training function runs in hora.elastic.run. Worlds form
as with hora run --min-np; a worker that comes back after a failure (a
restarted pod) joins at the ranks' next commit. Exits 0 once a worker's
training function has returned and every worker has left, 1 when the job failed.

  --min-np A            fewest workers the job trains with (required)
  --max-np B            most workers in one world (default 1024)
  -np N                 workers the first world waits for (default A)
  --port P              TCP port to listen on (default HORA_RENDEZVOUS_PORT, else ${ELASTIC_SERVICE_PORT})
  --bind ADDR           address to listen on (default 0.0.0.0: every interface)
  --elastic-timeout S   seconds the job may wait with fewer than A workers, and the
                        first world for its N, before it fails (default 600)
  HORA_SECRET           the job's secret, the same in every worker (required)
  HORA_ELASTIC_SETTLE_S seconds the survivors of a loss have to re-register (default 10)
  HORA_DEBUG            WARN, INFO or TRACE

The service is the job's single point of failure: when it dies, every worker
fails its collectives with ERR_PEER_LOST and exits.
`;

export interface RendezvousOptions {
  minNp: number;
  maxNp: number;
  np: number;
  port: number;
  bind: string;
  timeoutS: number;
  settleS: number;
  secret: string;
}

/** --max-np when none is given: the most ranks one world may have. */
const DEFAULT_MAX_NP = 1024;

const FLAGS = new Set(['--min-np', '--max-np', '-np', '--port', '--bind', '--elastic-timeout']);

/** Returns options, or 'help'. Throws UsageError naming the flag and the value received. */
export function parseRendezvousArgs(argv: string[], env: NodeJS.ProcessEnv = process.env): RendezvousOptions | 'help' {
  const values = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === '-h' || arg === '--help') return 'help';
    const eq = arg.indexOf('=');
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    if (!FLAGS.has(name)) throw new UsageError(arg, undefined, 'unknown option (see hora rendezvous --help)');
    const value = eq > 0 ? arg.slice(eq + 1) : argv[++i];
    if (value === undefined) throw new UsageError(name, undefined, 'missing value');
    values.set(name, value);
  }
  const count = (flag: string) => countFlag(values, flag);
  const minNp = count('--min-np');
  if (minNp === undefined) throw new UsageError('--min-np', undefined, 'missing: the fewest workers the job trains with, e.g. --min-np 2');
  const maxNp = count('--max-np') ?? DEFAULT_MAX_NP;
  if (maxNp < minNp) throw new UsageError('--max-np', values.get('--max-np'), `at least --min-np (${minNp})`);
  const np = count('-np') ?? minNp;
  if (np < minNp || np > maxNp) throw new UsageError('-np', values.get('-np'), `between --min-np (${minNp}) and --max-np (${maxNp})`);
  const portText = values.get('--port') ?? env.HORA_RENDEZVOUS_PORT?.trim();
  const portFlag = values.has('--port') ? '--port' : 'HORA_RENDEZVOUS_PORT';
  let port = ELASTIC_SERVICE_PORT;
  if (portText !== undefined && portText !== '') {
    port = Number(portText);
    if (!/^\d+$/.test(portText.trim()) || port < 1 || port > 65535) throw new UsageError(portFlag, portText, 'a TCP port 1-65535');
  }
  const timeoutText = values.get('--elastic-timeout');
  const timeoutS = timeoutText === undefined ? 600 : Number(timeoutText);
  if (timeoutText !== undefined && (timeoutText.trim() === '' || !Number.isFinite(timeoutS) || timeoutS <= 0)) {
    throw new UsageError('--elastic-timeout', timeoutText, 'a number of seconds > 0');
  }
  const secret = env.HORA_SECRET?.trim();
  if (!secret) throw new UsageError('HORA_SECRET', env.HORA_SECRET, 'the job\'s secret in this environment, the same as the workers\' (e.g. from a Kubernetes Secret)');
  let settleS: number;
  try {
    settleS = readSettings({ HORA_HOST_ID: 'unused', HORA_ELASTIC_SETTLE_S: env.HORA_ELASTIC_SETTLE_S }).elasticSettleS;
  } catch (e) {
    if (e instanceof HoraConfigError) throw new UsageError('HORA_ELASTIC_SETTLE_S', e.value, e.expected);
    throw e;
  }
  return { minNp, maxNp, np, port, bind: values.get('--bind')?.trim() || '0.0.0.0', timeoutS, settleS, secret };
}

/** Serves one elastic job; resolves with the exit status. */
export async function serveRendezvous(opts: RendezvousOptions): Promise<number> {
  const log = makeLogger('rendezvous');
  const server = new RendezvousServer({
    size: opts.np,
    secret: opts.secret,
    host: opts.bind,
    port: opts.port,
    timeoutMs: 0,
    jobId: crypto.randomBytes(8).toString('hex'),
    log,
    elastic: { minSize: opts.minNp, maxSize: opts.maxNp, settleMs: opts.settleS * 1000, waitMs: opts.timeoutS * 1000, assignWorkerIds: true },
  });
  try {
    await server.listen();
  } catch (e) {
    process.stderr.write(`hora rendezvous: cannot listen on ${opts.bind}:${opts.port}: ${(e as Error).message}\n`);
    return 1;
  }
  const membership = server.elastic;
  if (!membership) throw new Error('hora rendezvous: the server is not elastic');
  process.stderr.write(`hora rendezvous: listening on ${opts.bind}:${server.port}; the first world waits for ${opts.np} worker(s) (--min-np ${opts.minNp})\n`);
  return new Promise<number>((resolve) => {
    let failed: string | undefined;
    const finish = (code: number) => {
      clearInterval(watch);
      for (const s of signals) process.off(s, onSignal);
      void server.close().then(() => resolve(code));
    };
    server.on('formed', (generation: number, size: number) => process.stderr.write(`hora rendezvous: world ${generation} formed with ${size} rank(s)\n`));
    server.on('evict', (_workerId: number, _pid: number, reason: string) => process.stderr.write(`hora rendezvous: ${reason}\n`));
    server.on('elastic-timeout', (message: string) => {
      failed = message;
      process.stderr.write(`hora rendezvous: ${message}; ending the job\n`);
      server.abort(message, -1, 'ERR_TIMEOUT');
    });
    // Done once the job is ending (a training function returned, or it failed) and every worker has left.
    const watch = setInterval(() => {
      if ((membership.isFinishing || failed !== undefined) && membership.memberCount === 0) {
        process.stderr.write(failed === undefined ? 'hora rendezvous: the job finished\n' : 'hora rendezvous: the job failed\n');
        finish(failed === undefined ? 0 : 1);
      }
    }, 200);
    const signals: NodeJS.Signals[] = ['SIGINT', 'SIGTERM'];
    const onSignal = (signal: NodeJS.Signals) => {
      process.stderr.write(`hora rendezvous: received ${signal}: ending the job\n`);
      server.abort(`the hora rendezvous service received ${signal}`, -1, 'ERR_SHUTDOWN');
      setTimeout(() => finish(128 + 15), 500).unref();
    };
    for (const s of signals) process.on(s, onSignal);
  });
}

/** `hora rendezvous ...`: parses argv (after "rendezvous") and serves; resolves with the exit status. */
export async function rendezvousMain(argv: string[]): Promise<number> {
  const opts = parseCommand('rendezvous', RENDEZVOUS_USAGE, () => parseRendezvousArgs(argv));
  return typeof opts === 'number' ? opts : serveRendezvous(opts);
}
