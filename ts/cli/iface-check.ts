// Does the address `hora run --iface` picked face the -H hosts?
//
// The rendezvous server binds the interface's address and every worker is told
// to connect there. When that address is on a subnet none of the remote hosts
// is on (the launcher's eth0 on one network, the hosts on another), the
// workers can reach it only through a router, and usually cannot at all. The
// launcher says so before it starts anything, rather than leaving the workers
// to find out. It is a warning, not an error: routed setups exist.

import * as dns from 'node:dns';
import * as net from 'node:net';
import * as os from 'node:os';
import { isLoopback } from '../config';

/** One IPv4 address of an interface with its prefix length. */
export interface InterfaceAddress {
  /** Interface name (eth0). */
  name: string;
  address: string;
  prefix: number;
}

/** A remote host as written in -H, and its IPv4 address (undefined: did not resolve). */
export interface ResolvedHost {
  host: string;
  address: string | undefined;
}

type Interfaces = ReturnType<typeof os.networkInterfaces>;
type Lookup = (host: string) => Promise<string>;

function isIPv4(a: os.NetworkInterfaceInfo): boolean {
  return a.family === 'IPv4' || (a.family as unknown) === 4;
}

function ipv4ToInt(address: string): number {
  return address.split('.').reduce((n, part) => n * 256 + Number(part), 0);
}

function prefixOf(netmask: string): number {
  let bits = ipv4ToInt(netmask);
  let n = 0;
  while (bits & 0x80000000) {
    n++;
    bits = (bits << 1) >>> 0;
  }
  return n;
}

/**
 * The interface address that `iface` (a name or an IPv4 address, as --iface takes it) binds: the first
 * IPv4 address of the named interface, or the interface that holds the given address. Undefined when
 * the address is on no interface of this machine (nothing to compare then).
 */
export function interfaceAddress(iface: string, interfaces: Interfaces = os.networkInterfaces()): InterfaceAddress | undefined {
  const byName = interfaces[iface]?.find(isIPv4);
  if (byName) return { name: iface, address: byName.address, prefix: prefixOf(byName.netmask) };
  if (!net.isIPv4(iface)) return undefined;
  for (const [name, addrs] of Object.entries(interfaces)) {
    const a = addrs?.find((x) => isIPv4(x) && x.address === iface);
    if (a) return { name, address: a.address, prefix: prefixOf(a.netmask) };
  }
  return undefined;
}

/** True when address is inside the subnet of `on`. */
export function onSubnet(on: InterfaceAddress, address: string): boolean {
  if (!net.isIPv4(address)) return false;
  const mask = on.prefix === 0 ? 0 : (0xffffffff << (32 - on.prefix)) >>> 0;
  return ((ipv4ToInt(on.address) & mask) >>> 0) === ((ipv4ToInt(address) & mask) >>> 0);
}

/** IPv4 address of host, by the system resolver (hosts file, DNS); rejects after timeoutMs. */
export function lookupIPv4(host: string, timeoutMs = 5000): Promise<string> {
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`resolving ${host} took over ${timeoutMs / 1000} s`)), timeoutMs);
    dns.lookup(host, { family: 4 }, (err, address) => {
      clearTimeout(timer);
      if (err) reject(err);
      else resolve(address);
    });
  });
}

/**
 * The warning to print when the address `iface` binds is on a subnet none of `hosts` (the remote -H
 * hosts, [user@]host) is on; undefined when one of them is, or when nothing can be compared (the
 * address is on no local interface, no host resolves). `flag` names where iface came from in the text
 * ("--iface eth0", "HORA_IFACE=eth0").
 */
export async function ifaceSubnetWarning(
  iface: string,
  flag: string,
  hosts: string[],
  { interfaces = os.networkInterfaces(), lookup = lookupIPv4 }: { interfaces?: Interfaces; lookup?: Lookup } = {},
): Promise<string | undefined> {
  const bound = interfaceAddress(iface, interfaces);
  if (bound === undefined || hosts.length === 0) return undefined;
  const resolved: ResolvedHost[] = await Promise.all(hosts.map(async (host) => {
    const name = host.slice(host.lastIndexOf('@') + 1);
    try {
      return { host, address: net.isIPv4(name) ? name : await lookup(name) };
    } catch {
      // ssh reports a host that does not resolve; it proves nothing about the subnet.
      return { host, address: undefined };
    }
  }));
  const known = resolved.filter((h) => h.address !== undefined) as { host: string; address: string }[];
  if (known.length === 0 || known.some((h) => onSubnet(bound, h.address))) return undefined;
  const listed = known.map((h) => (h.host === h.address ? h.host : `${h.host} = ${h.address}`)).join(', ');
  const where = `${flag} is ${bound.address}/${bound.prefix}${bound.name !== iface ? ` on ${bound.name}` : ''}`;
  if (isLoopback(bound.address)) {
    return `${where}, a loopback address: the workers on ${listed} cannot reach a rendezvous server there; ` +
      'name the interface of this machine that is on their network';
  }
  return `${where}, a subnet none of the hosts is on (${listed}): unless a router joins the networks, their workers ` +
    'cannot reach the rendezvous server; name the interface of this machine that is on their network';
}
