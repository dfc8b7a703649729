// The small parsers of config.ts and config-launch.ts: one environment variable each, every error a
// HoraConfigError that names the variable, the value and what would have been accepted.

import type { Env } from './config-variables';

/** Thrown for any variable (or launcher flag) with a value hora cannot use. */
export class HoraConfigError extends Error {
  readonly code = 'ERR_INVALID_ARGUMENT';
  constructor(
    readonly variable: string,
    readonly value: string | undefined,
    /** What would have been accepted. */
    readonly expected: string,
  ) {
    super(`${variable}=${value === undefined ? '(unset)' : JSON.stringify(value)} is invalid: expected ${expected}`);
    this.name = 'HoraConfigError';
  }
}


export function isSet(env: Env, name: string): boolean {
  const v = env[name];
  return v !== undefined && v.trim() !== '';
}

export function parseInteger(env: Env, name: string, min: number): number | undefined {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return undefined;
  const text = raw.trim();
  if (!/^[+-]?\d+$/.test(text)) throw new HoraConfigError(name, raw, `an integer >= ${min}`);
  const n = Number(text);
  if (!Number.isSafeInteger(n) || n < min) throw new HoraConfigError(name, raw, `an integer >= ${min}`);
  return n;
}

export function parseNumber(env: Env, name: string, fallback: number, allowZero: boolean): number {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const n = Number(raw.trim());
  const ok = Number.isFinite(n) && (allowZero ? n >= 0 : n > 0);
  if (!ok) throw new HoraConfigError(name, raw, allowZero ? 'a number >= 0' : 'a number > 0');
  return n;
}

export function parseChoice<T extends string>(env: Env, name: string, choices: readonly T[], fallback: T, upper: boolean): T {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return fallback;
  const text = upper ? raw.trim().toUpperCase() : raw.trim().toLowerCase();
  const found = choices.find((c) => c === text);
  if (found === undefined) throw new HoraConfigError(name, raw, `one of ${choices.join(', ')}`);
  return found;
}

export function parseFlag(env: Env, name: string): boolean {
  const raw = env[name];
  if (raw === undefined || raw.trim() === '') return false;
  const text = raw.trim().toLowerCase();
  if (text === '1' || text === 'true') return true;
  if (text === '0' || text === 'false') return false;
  throw new HoraConfigError(name, raw, '1 or 0 (true or false)');
}

export function parsePort(env: Env, name: string): number | undefined {
  const port = parseInteger(env, name, 1);
  if (port !== undefined && port > 65535) throw new HoraConfigError(name, env[name], 'a TCP port 1-65535');
  return port;
}
