// Where workers may run: the hosts of -H, of a hostfile ([user@]host and its slots) or of the Slurm
// allocation hora run runs in, and whether a host is this machine (its workers start here) or a remote
// one (over ssh, or srun for a node of the allocation: host-spawner.ts).

import * as fs from 'node:fs';
import * as os from 'node:os';
import { HoraConfigError, isLoopback, slurmCounts, slurmHostlist } from '../config';
import { UsageError } from './flags';
import { hostPart } from './ssh';
import type { HostSlots } from './spawn';

// [user@]host: letters, digits, dots, dashes, underscores. No leading dash
// (ssh would read an option) and nothing a shell or ssh would interpret.
const HOST_PATTERN = /^(?:[A-Za-z0-9._-]+@)?[A-Za-z0-9_][A-Za-z0-9._-]*$/;

/** -H text: host[:slots],... */
export function parseHosts(text: string): HostSlots[] {
  const out: HostSlots[] = [];
  for (const entry of text.split(',')) {
    const trimmed = entry.trim();
    const m = /^(.+?)(?::(\d+))?$/.exec(trimmed);
    if (!m || trimmed === '') throw new UsageError('-H', text, 'host[:slots][,host[:slots]...], e.g. localhost:4');
    if (!HOST_PATTERN.test(m[1])) {
      throw new UsageError('-H', text, `host names of letters, digits, ".", "-", "_" (optionally user@host); ${JSON.stringify(m[1])} is not one (IPv6 addresses are not supported)`);
    }
    const slots = m[2] === undefined ? 1 : Number(m[2]);
    if (slots < 1) throw new UsageError('-H', text, `at least 1 slot for ${m[1]}`);
    out.push({ host: m[1], slots, remote: !isLocalHost(m[1]) });
  }
  return out;
}

/**
 * Hostfile text: one "host [slots=N]" a line; "#" starts a comment; blank
 * lines are skipped. Errors name the file, the line number and the line.
 */
export function parseHostfile(text: string, file: string): HostSlots[] {
  const out: HostSlots[] = [];
  text.split(/\r?\n/).forEach((raw, index) => {
    const line = raw.replace(/#.*/, '').trim();
    if (line === '') return;
    const m = /^(\S+)(?:\s+slots\s*=\s*(\d+))?$/.exec(line);
    const bad = (expected: string) => new UsageError(`--hostfile ${file} line ${index + 1}`, raw.trim(), expected);
    if (!m) throw bad('"host slots=N", e.g. "node1 slots=4"');
    if (!HOST_PATTERN.test(m[1])) throw bad(`a host name of letters, digits, ".", "-", "_" (optionally user@host), then slots=N`);
    const slots = m[2] === undefined ? 1 : Number(m[2]);
    if (slots < 1) throw bad(`at least 1 slot for ${m[1]}`);
    out.push({ host: m[1], slots, remote: !isLocalHost(m[1]) });
  });
  if (out.length === 0) throw new UsageError('--hostfile', file, 'at least one "host slots=N" line');
  return out;
}

export function readHostfile(file: string): HostSlots[] {
  let text: string;
  try {
    text = fs.readFileSync(file, 'utf8');
  } catch (e) {
    throw new UsageError('--hostfile', file, `a readable file (${(e as Error).message})`);
  }
  return parseHostfile(text, file);
}

/**
 * The nodes of the Slurm allocation this process runs in, with as many slots as Slurm gives tasks there:
 * SLURM_JOB_NODELIST ("node[01-02]") and SLURM_TASKS_PER_NODE ("2(x2)"), or SLURM_JOB_CPUS_PER_NODE when
 * no task count is set (an allocation made with --nodes only). undefined outside an allocation (no
 * SLURM_JOB_ID, or no node list). A list that does not parse, or counts that do not match the nodes, is a
 * UsageError naming the variable.
 */
export function allocationHosts(env: NodeJS.ProcessEnv): HostSlots[] | undefined {
  if (env.SLURM_JOB_ID === undefined || env.SLURM_JOB_ID.trim() === '') return undefined;
  const listVar = env.SLURM_JOB_NODELIST?.trim() ? 'SLURM_JOB_NODELIST' : 'SLURM_NODELIST';
  const countVar = env.SLURM_TASKS_PER_NODE?.trim() ? 'SLURM_TASKS_PER_NODE' : 'SLURM_JOB_CPUS_PER_NODE';
  try {
    const nodes = slurmHostlist(env, listVar);
    if (nodes === undefined) return undefined;
    if (!env[countVar]?.trim()) throw new UsageError(countVar, undefined, `set by Slurm with ${listVar}: how many tasks each node of the allocation takes`);
    const counts = slurmCounts(env, countVar);
    if (counts.length !== nodes.length) {
      throw new UsageError(countVar, env[countVar], `one count per node of ${listVar}=${env[listVar]} (${nodes.length} nodes), e.g. "2(x${nodes.length})"`);
    }
    return nodes.map((host, i) => ({ host, slots: counts[i], remote: !isLocalHost(host, env) }));
  } catch (e) {
    if (e instanceof HoraConfigError) throw new UsageError(e.variable, e.value, e.expected);
    throw e;
  }
}

/** A host that is this machine: loopback, its name or address, or the Slurm node it runs on (SLURMD_NODENAME). */
export function isLocalHost(userHost: string, env: NodeJS.ProcessEnv = process.env): boolean {
  const host = hostPart(userHost);
  if (isLoopback(host) || host === os.hostname() || host === env.SLURMD_NODENAME?.trim()) return true;
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) if (a.address === host) return true;
  }
  return false;
}
