// Starting workers on other machines over ssh, for `hora run -H`, or with srun on the nodes of the Slurm
// allocation hora run runs in (the same wrapper and channel; srunArgs says how srun is called).
//
// One ssh per worker: `ssh [--ssh-opts] [-p] [-i] -o BatchMode=yes ... -- host
// '<command line>'`. The command line goes to the remote login shell (POSIX
// quoting): it enters the launcher's working directory and runs the worker
// under a wrapper (remoteWrapper) with the launcher's node binary, which must
// exist at the same path on every host (as must the script: the usual
// shared-filesystem or identical-image setup).
//
// ssh's stdin is the wrapper's channel from the launcher. Its first line is
// the worker's environment as a JSON object: the job secret and the user's -x
// values are in it, and a command line (ssh's, the remote shell's) can be read
// by every user of either machine in `ps`, a pipe only by its owner. The
// wrapper starts the worker once that line is in, and gives up if it is not
// within ENV_WAIT_MS.
//
// Why a wrapper at all: sshd delivers no signals to a command started without
// a tty, and closing the connection does not kill it. So every later line
// names a signal for the worker's process group, and end of input (the
// launcher closed it, or it or ssh died) stops the worker: SIGTERM, then
// SIGKILL 3 s later.

import * as child_process from 'node:child_process';
import * as dgram from 'node:dgram';
import * as net from 'node:net';
import type { Readable } from 'node:stream';
import { trackChild } from './child';
import { bindingFor, cpuList, readCores, wrapNote } from './bind';
import type { BindRequest } from './bind';
import type { WorkerHandle, WorkerSpec } from './spawn';

export interface SshOptions {
  /** -p: ssh port on every remote host; undefined = ssh's default (its config, else 22). */
  port?: number;
  /** -i: private key file; undefined = ssh's default. */
  identity?: string;
  /** --ssh-opts, already split into words. Placed first, so they win over hora's defaults. */
  extraArgs: string[];
}

// ssh keeps the first value it is given for an option, so user options (earlier) win.
// BatchMode: never prompt (no terminal: a password prompt would hang the job).
// ConnectTimeout / ServerAlive*: an unreachable or vanished host fails the job within seconds.
const DEFAULT_SSH_OPTIONS = ['BatchMode=yes', 'ConnectTimeout=10', 'ServerAliveInterval=5', 'ServerAliveCountMax=3'];

/** Seconds between end of input and SIGKILL in the remote wrapper. */
const REMOTE_KILL_DELAY_MS = 3000;

/**
 * How long the remote wrapper waits for its environment line. The launcher writes it as it starts ssh,
 * so it is there before the wrapper runs unless the launcher is stuck; an ssh that died ends the input,
 * which the wrapper notices at once.
 */
const ENV_WAIT_MS = 30000;

/** Seconds after kill('SIGKILL') before the local ssh itself is killed (remote host unresponsive). */
const LOCAL_SSH_KILL_DELAY_MS = 2000;

/**
 * Runs on the remote host as `node -e '(<this function>)(...)' -- command args...`
 * (it is sent as source text, so it may use nothing from this module). It
 * reads the worker's environment from the first line of stdin, then runs the
 * worker in its own process group so that a signal reaches whatever it
 * started; it exits with the worker's status, 128 + signal number when a
 * signal ended it.
 */
function remoteWrapper(killDelayMs: number, envWaitMs: number, bind: BindRequest | null, binder: RemoteBinder | null): void {
  const cp: typeof import('node:child_process') = require('node:child_process');
  const os: typeof import('node:os') = require('node:os');
  const [command, ...args] = process.argv.slice(1);
  // --bind-to core: taskset binds the worker to its core of this host and execs it.
  let program = command;
  let programArgs = args;
  if (bind && binder) {
    const cores = binder.readCores();
    if (cores === null || cores.length === 0) {
      process.stderr.write(`hora run: --bind-to core: ${os.hostname()} does not say which CPUs this process may use; not starting ${JSON.stringify(command)}\n`);
      process.exit(1);
    }
    const note = bind.localRank === 0 ? binder.wrapNote(bind.localSize, cores.length, os.hostname()) : undefined;
    if (note) process.stderr.write(`hora run: ${note}\n`);
    program = 'taskset';
    programArgs = ['-c', binder.cpuList(binder.bindingFor(cores, bind.localRank, bind.mapBy)), command, ...args];
  }
  let child: import('node:child_process').ChildProcess | undefined;
  const requested = new Set<string>();
  const signalGroup = (signal: NodeJS.Signals) => {
    requested.add(signal);
    try {
      if (child?.pid !== undefined) process.kill(-child.pid, signal);
      if (child?.pid !== undefined && signal === 'SIGTERM') process.kill(-child.pid, 'SIGCONT');
    } catch {
      // the group is gone
    }
  };
  const giveUp = (why: string) => {
    process.stderr.write(`hora run: ${why}; not starting ${JSON.stringify(command)} on ${os.hostname()}\n`);
    process.exit(1);
  };
  const start = (line: string) => {
    let env: unknown;
    try {
      env = JSON.parse(line);
    } catch {
      env = undefined;
    }
    if (env === null || typeof env !== 'object' || Array.isArray(env) || Object.values(env as object).some((v) => typeof v !== 'string')) {
      giveUp('the first line from the launcher is not the worker\'s environment (a JSON object of strings)');
      return;
    }
    const c = cp.spawn(program, programArgs, { env: { ...process.env, ...(env as Record<string, string>) }, stdio: ['ignore', 'inherit', 'inherit'], detached: true });
    child = c;
    c.on('error', (err) => {
      const what = program === command ? '' : ' (--bind-to core runs it under taskset, of util-linux)';
      process.stderr.write(`hora run: cannot start ${JSON.stringify(program)} on ${os.hostname()}${what}: ${err.message}\n`);
      process.exit(127);
    });
    c.on('exit', (code, signal) => {
      // Said only when the signal came from elsewhere (the launcher knows what it sent).
      if (signal && !requested.has(signal)) {
        process.stderr.write(`hora run: ${command} (pid ${c.pid}) on ${os.hostname()} was killed by ${signal}\n`);
      }
      // Children the worker left behind would hold ssh's output open and keep the job from ending.
      signalGroup('SIGKILL');
      process.exit(signal ? 128 + (os.constants.signals[signal] ?? 0) : (code ?? 1));
    });
  };
  const envTimer = setTimeout(() => giveUp(`no environment from the launcher within ${envWaitMs / 1000} s`), envWaitMs);
  let pending = '';
  let ended = false;
  const stop = () => {
    if (ended) return;
    ended = true;
    if (child === undefined) giveUp('the launcher\'s connection closed before it sent the worker\'s environment');
    signalGroup('SIGTERM');
    setTimeout(() => signalGroup('SIGKILL'), killDelayMs);
  };
  process.stdin.setEncoding('utf8');
  process.stdin.on('data', (text: string) => {
    pending += text;
    for (let nl = pending.indexOf('\n'); nl >= 0; nl = pending.indexOf('\n')) {
      const line = pending.slice(0, nl).trim();
      pending = pending.slice(nl + 1);
      if (child === undefined) {
        clearTimeout(envTimer);
        start(line);
      } else if (/^SIG[A-Z0-9]+$/.test(line) && line in os.constants.signals) signalGroup(line as NodeJS.Signals);
    }
  });
  process.stdin.on('end', stop);
  process.stdin.on('error', stop);
  // sshd may HUP or TERM the session when the connection goes: pass it on as a stop.
  for (const s of ['SIGHUP', 'SIGTERM', 'SIGINT'] as const) process.on(s, stop);
}

/** bind.ts's functions, sent to the remote host as source text with the wrapper. */
interface RemoteBinder {
  readCores: typeof readCores;
  bindingFor: typeof bindingFor;
  cpuList: typeof cpuList;
  wrapNote: typeof wrapNote;
}

/** Quotes one word for a POSIX shell. */
export function shellQuote(word: string): string {
  if (/^[A-Za-z0-9_@%+=:,./-]+$/.test(word)) return word;
  return `'${word.replace(/'/g, `'\\''`)}'`;
}

/**
 * Splits text into words the way a POSIX shell would (quotes and backslashes,
 * no expansions). Throws an Error saying what is wrong for unbalanced quotes.
 */
export function splitShellWords(text: string): string[] {
  const words: string[] = [];
  let word = '';
  let inWord = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === "'") {
      const end = text.indexOf("'", i + 1);
      if (end < 0) throw new Error(`unbalanced ' at character ${i + 1}`);
      word += text.slice(i + 1, end);
      inWord = true;
      i = end;
    } else if (c === '"') {
      let j = i + 1;
      for (; j < text.length && text[j] !== '"'; j++) {
        // Inside double quotes a backslash escapes only these.
        if (text[j] === '\\' && j + 1 < text.length && '"\\$`\n'.includes(text[j + 1])) {
          j++;
          if (text[j] !== '\n') word += text[j];
        } else word += text[j];
      }
      if (j >= text.length) throw new Error(`unbalanced " at character ${i + 1}`);
      inWord = true;
      i = j;
    } else if (c === '\\') {
      if (i + 1 >= text.length) throw new Error('a trailing \\ escapes nothing');
      i++;
      if (text[i] !== '\n') {
        word += text[i];
        inWord = true;
      }
    } else if (/\s/.test(c)) {
      if (inWord) words.push(word);
      word = '';
      inWord = false;
    } else {
      word += c;
      inWord = true;
    }
  }
  if (inWord) words.push(word);
  return words;
}

const ENV_NAME = /^[A-Za-z_][A-Za-z0-9_]*$/;

/** The remote wrapper's argv for one worker: `node -e <wrapper> -- command args...`. It holds no variable. */
export function remoteWrapperArgv(command: string, args: string[], node = process.execPath, envWaitMs = ENV_WAIT_MS, bind?: BindRequest): string[] {
  const binder = bind === undefined ? 'null'
    : `{ readCores: ${readCores.toString()}, bindingFor: ${bindingFor.toString()}, cpuList: ${cpuList.toString()}, wrapNote: ${wrapNote.toString()} }`;
  const wrapper = `(${remoteWrapper.toString()})(${REMOTE_KILL_DELAY_MS}, ${envWaitMs}, ${bind === undefined ? 'null' : JSON.stringify(bind)}, ${binder})`;
  return [node, '-e', wrapper, '--', command, ...args];
}

/**
 * The command line the remote shell runs for one worker. It holds no variable: those go to the
 * wrapper's stdin (envLine).
 */
export function remoteCommandLine(cwd: string, command: string, args: string[], node = process.execPath, envWaitMs = ENV_WAIT_MS, bind?: BindRequest): string {
  return `cd ${shellQuote(cwd)} && exec ${remoteWrapperArgv(command, args, node, envWaitMs, bind).map(shellQuote).join(' ')}`;
}

/**
 * Arguments for srun to run the wrapper (remoteWrapperArgv) on `node` of the allocation this runs in:
 * one task on that node, in the launcher's directory. --overlap: the step shares the CPUs the batch
 * script's other steps (and the other workers' steps) hold, as a step of a batch job otherwise waits for
 * CPUs no step gives back. --whole: the step gets every CPU the job has on the node, where one task
 * would get one (and, with task/affinity or task/cgroup, be confined to it). --ntasks-per-node=1
 * overrides the allocation's value, which srun would otherwise take from SLURM_NTASKS_PER_NODE and
 * refuse. --mpi=none: the workers are not MPI programs.
 */
export function srunArgs(node: string, cwd: string, wrapperArgv: string[]): string[] {
  return [
    '--overlap', '--nodes=1', '--ntasks=1', '--ntasks-per-node=1', `--nodelist=${node}`, `--chdir=${cwd}`,
    '--whole', '--mpi=none', '--job-name=hora-worker', ...wrapperArgv,
  ];
}

/** The first line the launcher writes to the wrapper: the worker's environment. */
export function envLine(env: Record<string, string>): string {
  for (const name of Object.keys(env)) {
    if (!ENV_NAME.test(name)) throw new Error(`environment variable name ${JSON.stringify(name)} cannot be passed to a remote worker`);
  }
  // JSON escapes newlines inside values, so the object stays on one line.
  return `${JSON.stringify(env)}\n`;
}

/** Arguments for ssh to run `remoteCommand` on host. */
export function sshArgs(host: string, ssh: SshOptions, remoteCommand: string): string[] {
  const args = [...ssh.extraArgs];
  if (ssh.port !== undefined) args.push('-p', String(ssh.port));
  if (ssh.identity !== undefined) args.push('-i', ssh.identity);
  for (const o of DEFAULT_SSH_OPTIONS) args.push('-o', o);
  // -T: no tty (output stays a plain stream); -x: no X11. "--" so that the host is never read as an option.
  args.push('-T', '-x', '--', host, remoteCommand);
  return args;
}

/** The host part of "user@host". */
export function hostPart(host: string): string {
  const at = host.lastIndexOf('@');
  return at >= 0 ? host.slice(at + 1) : host;
}

/**
 * The local IPv4 address the kernel would use to reach host: a connected UDP
 * socket gets one without sending anything. Rejects when host does not resolve
 * or no route leads there.
 */
export function localAddressToward(host: string, timeoutMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const socket = dgram.createSocket('udp4');
    const timer = setTimeout(() => finish(new Error(`resolving ${host} took over ${timeoutMs / 1000} s`)), timeoutMs);
    let done = false;
    const finish = (err: Error | null, addr?: string) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.close();
      if (err) reject(err);
      else resolve(addr as string);
    };
    socket.on('error', (err) => finish(err));
    // Port 9 (discard): any port does, nothing is sent.
    socket.connect(9, hostPart(host), () => finish(null, socket.address().address));
  });
}

/**
 * HORA_* variables of the launcher's environment, then spec's on top. An
 * HORA_IFACE that is an address belongs to the launcher's machine: a remote
 * worker could not bind it, so it is left out (an interface name is kept).
 */
export function remoteWorkerEnv(launcherEnv: NodeJS.ProcessEnv, specEnv: Record<string, string>): Record<string, string> {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(launcherEnv)) {
    if (name.startsWith('HORA_') && value !== undefined) env[name] = value;
  }
  Object.assign(env, specEnv);
  if (env.HORA_IFACE !== undefined && net.isIP(env.HORA_IFACE.trim())) delete env.HORA_IFACE;
  return env;
}

/**
 * Starts workers on remote hosts; see the top of this file. `via` 'srun' starts them on nodes of the
 * Slurm allocation this runs in with srun instead of ssh (srunArgs): the same wrapper, the same channel
 * on its stdin, which srun passes to the one task of the step.
 */
export class SshSpawner {
  constructor(
    private readonly ssh: SshOptions,
    private readonly sshCommand = 'ssh',
    private readonly via: 'ssh' | 'srun' = 'ssh',
  ) {}

  spawn(spec: WorkerSpec): WorkerHandle {
    const command = spec.command === 'node' ? process.execPath : spec.command;
    const env = envLine(remoteWorkerEnv(process.env, spec.env));
    const argv = this.via === 'srun'
      ? srunArgs(hostPart(spec.host), process.cwd(), remoteWrapperArgv(command, spec.args, process.execPath, ENV_WAIT_MS, spec.bind))
      : sshArgs(spec.host, this.ssh, remoteCommandLine(process.cwd(), command, spec.args, process.execPath, ENV_WAIT_MS, spec.bind));
    const child = child_process.spawn(this.sshCommand, argv, {
      stdio: ['pipe', 'pipe', 'pipe'],
      // Own process group: a Ctrl-C at the terminal reaches the launcher, which stops workers in order.
      detached: true,
    });
    // Writing a signal to an ssh that has just exited fails with EPIPE: nothing is left to signal then.
    child.stdin?.on('error', () => undefined);
    child.stdin?.write(env);

    // The last lines of ssh's stderr, to say why ssh failed.
    let stderrTail = '';
    child.stderr?.on('data', (chunk: Buffer) => {
      stderrTail = (stderrTail + chunk.toString('utf8')).slice(-4096);
    });

    let startError: string | undefined;
    const life = trackChild(child, (err) => {
      startError = `cannot start ${this.sshCommand} for rank ${spec.rank} on ${spec.host}: ${err.message}`;
    });

    let killTimer: NodeJS.Timeout | undefined;
    return {
      rank: spec.rank,
      stdout: child.stdout as Readable,
      stderr: child.stderr as Readable,
      kill: (signal: NodeJS.Signals) => {
        if (life.exited || child.pid === undefined || !child.stdin) return;
        if (!child.stdin.writableEnded) child.stdin.write(`${signal}\n`);
        if (signal !== 'SIGKILL' || killTimer) return;
        child.stdin.end();
        // A host that does not answer any more cannot be told: end ssh here.
        killTimer = setTimeout(() => {
          if (life.exited || child.pid === undefined) return;
          try {
            process.kill(-child.pid, 'SIGKILL');
          } catch {
            // already gone
          }
        }, LOCAL_SSH_KILL_DELAY_MS);
        killTimer.unref();
      },
      describeFailure: (code: number | null) => {
        if (startError) return startError;
        const lines = stderrTail.split('\n').map((l) => l.trim()).filter(Boolean);
        if (this.via === 'srun') {
          // srun's own failures (no such node, the allocation is gone) are its "srun: error:" lines; those
          // that say how the task ended ("srun: error: node1: task 0: Exited with exit code 3") are the worker's.
          const error = lines.find((l) => l.startsWith('srun: error:') && !/^srun: error: \S+: tasks? [\d,-]+: /.test(l));
          return error === undefined ? undefined : `srun onto ${spec.host} failed (exit ${code}): ${error}`;
        }
        // 255 is ssh's own failure (no connection, refused, authentication).
        if (code !== 255) return undefined;
        const why = lines.length > 0 ? `: ${lines[lines.length - 1]}` : '';
        return `ssh to ${spec.host} failed (exit 255)${why}`;
      },
      onExit: life.onExit,
      onDone: life.onDone,
    };
  }
}
