'use strict';
// hora run's check that --iface faces the -H hosts. The interface table and the name lookup are the
// test's own: nothing is resolved or sent.
const t = require('tap');
const path = require('node:path');

const { ifaceSubnetWarning, interfaceAddress, onSubnet } = require(path.join(__dirname, '..', 'dist', 'ts', 'cli', 'iface-check.js'));

const v4 = (address, netmask, internal = false) => ({ address, netmask, family: 'IPv4', mac: '00:00:00:00:00:00', internal, cidr: null });
const INTERFACES = {
  lo: [v4('127.0.0.1', '255.0.0.0', true)],
  eth0: [{ address: 'fe80::1', netmask: 'ffff:ffff:ffff:ffff::', family: 'IPv6', mac: '', internal: false, cidr: null, scopeid: 2 }, v4('10.20.0.2', '255.255.255.0')],
  eth1: [v4('172.16.5.9', '255.255.0.0')],
};
const NAMES = { a: '10.30.0.5', b: '10.30.0.6', c: '172.16.200.1' };
const lookup = async (host) => {
  if (host in NAMES) return NAMES[host];
  throw Object.assign(new Error(`getaddrinfo ENOTFOUND ${host}`), { code: 'ENOTFOUND' });
};
const check = (iface, hosts, flag = `--iface ${iface}`) => ifaceSubnetWarning(iface, flag, hosts, { interfaces: INTERFACES, lookup });

t.test('interface address and prefix, by name or by address', async (t) => {
  t.same(interfaceAddress('eth0', INTERFACES), { name: 'eth0', address: '10.20.0.2', prefix: 24 }, 'the IPv4 address, not the IPv6 one');
  t.same(interfaceAddress('172.16.5.9', INTERFACES), { name: 'eth1', address: '172.16.5.9', prefix: 16 });
  t.equal(interfaceAddress('10.99.0.1', INTERFACES), undefined, 'an address of no local interface');
  t.equal(interfaceAddress('wlan0', INTERFACES), undefined);
  const eth1 = interfaceAddress('eth1', INTERFACES);
  t.ok(onSubnet(eth1, '172.16.200.1'));
  t.notOk(onSubnet(eth1, '172.17.0.1'));
  t.ok(onSubnet({ name: 'x', address: '10.0.0.1', prefix: 0 }, '192.168.1.1'), 'a /0 holds everything');
  t.ok(onSubnet({ name: 'x', address: '10.0.0.1', prefix: 32 }, '10.0.0.1'));
  t.notOk(onSubnet({ name: 'x', address: '10.0.0.1', prefix: 32 }, '10.0.0.2'));
});

t.test('no host on the subnet of --iface: a warning naming the interface, its address/prefix and the hosts', async (t) => {
  const w = await check('eth0', ['a', 'root@b', '10.30.0.7']);
  t.match(w, /^--iface eth0 is 10\.20\.0\.2\/24, a subnet none of the hosts is on \(a = 10\.30\.0\.5, root@b = 10\.30\.0\.6, 10\.30\.0\.7\)/);
  t.match(w, /cannot reach the rendezvous server; name the interface of this machine that is on their network/);
  const fromEnv = await check('eth0', ['a'], 'HORA_IFACE=eth0');
  t.match(fromEnv, /^HORA_IFACE=eth0 is 10\.20\.0\.2\/24/, 'names where the interface came from');
  const byAddress = await check('10.20.0.2', ['a']);
  t.match(byAddress, /^--iface 10\.20\.0\.2 is 10\.20\.0\.2\/24 on eth0,/, 'an address is traced to its interface');
});

t.test('loopback --iface with remote hosts says loopback', async (t) => {
  t.match(await check('lo', ['a']), /^--iface lo is 127\.0\.0\.1\/8, a loopback address: the workers on a = 10\.30\.0\.5 cannot reach/);
});

t.test('no warning when a host is on the subnet, or nothing can be compared', async (t) => {
  t.equal(await check('eth1', ['a', 'c']), undefined, 'c is on eth1\'s /16');
  t.equal(await check('eth1', ['unknown-host']), undefined, 'hosts that do not resolve prove nothing');
  t.equal(await check('eth0', []), undefined, 'no remote host');
  t.equal(await check('10.99.0.1', ['a']), undefined, 'an address on no local interface');
  t.match(await check('eth0', ['unknown-host', 'a']), /\(a = 10\.30\.0\.5\)$|\(a = 10\.30\.0\.5\):/, 'lists only the hosts that resolved');
});
