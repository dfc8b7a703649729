// Where workers may run: the hosts of -H and of a hostfile ([user@]host and its slots), and whether a
// host is this machine (its workers start here) or a remote one (over ssh).

import * as fs from 'node:fs';
import * as os from 'node:os';
import { isLoopback } from '../config';
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

export function isLocalHost(userHost: string): boolean {
  const host = hostPart(userHost);
  if (isLoopback(host) || host === os.hostname()) return true;
  for (const addrs of Object.values(os.networkInterfaces())) {
    for (const a of addrs ?? []) if (a.address === host) return true;
  }
  return false;
}
