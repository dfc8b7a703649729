// `hora run --dashboard [port]`: a live web page of the job, served on
// 127.0.0.1 only.
//
// Two resources: GET / is one self-contained page (dashboard-page.ts: no
// external scripts, styles or fonts), which fetches GET /stats.json every
// second and draws it; /stats.json is the rendezvous server's JobSnapshot as
// of the request. Requests must name the server by a loopback Host header, so
// that a web page elsewhere cannot read the figures through DNS rebinding.

import * as http from 'node:http';
import type { AddressInfo } from 'node:net';
import type { JobSnapshot } from '../control/monitor';
import { DASHBOARD_PAGE } from './dashboard-page';

export interface Dashboard {
  /** http://127.0.0.1:PORT/ */
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

const HEADERS = {
  'cache-control': 'no-store',
  'x-content-type-options': 'nosniff',
  'referrer-policy': 'no-referrer',
};

const PAGE_HEADERS = {
  ...HEADERS,
  'content-type': 'text/html; charset=utf-8',
  'content-security-policy': "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:",
  'x-frame-options': 'DENY',
};

/** Serves the dashboard of `snapshot` on 127.0.0.1:port (0 picks a free port). */
export function startDashboard(snapshot: () => JobSnapshot, port: number): Promise<Dashboard> {
  const server = http.createServer((req, res) => {
    const bound = (server.address() as AddressInfo).port;
    const host = req.headers.host ?? '';
    if (host !== `127.0.0.1:${bound}` && host !== `localhost:${bound}`) {
      res.writeHead(403, { ...HEADERS, 'content-type': 'text/plain' }).end('hora dashboard: open it as http://127.0.0.1:PORT/\n');
      return;
    }
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { ...HEADERS, allow: 'GET, HEAD' }).end();
      return;
    }
    const path = (req.url ?? '/').split('?')[0];
    if (path === '/' || path === '/index.html') {
      res.writeHead(200, PAGE_HEADERS).end(req.method === 'HEAD' ? undefined : DASHBOARD_PAGE);
    } else if (path === '/stats.json') {
      let body: string;
      try {
        body = JSON.stringify(snapshot());
      } catch (e) {
        res.writeHead(500, { ...HEADERS, 'content-type': 'text/plain' }).end(`hora dashboard: ${(e as Error).message}\n`);
        return;
      }
      res.writeHead(200, { ...HEADERS, 'content-type': 'application/json' }).end(req.method === 'HEAD' ? undefined : body);
    } else {
      res.writeHead(404, { ...HEADERS, 'content-type': 'text/plain' }).end('not found\n');
    }
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: '127.0.0.1', port, exclusive: true }, () => {
      server.off('error', reject);
      const bound = (server.address() as AddressInfo).port;
      resolve({
        url: `http://127.0.0.1:${bound}/`,
        port: bound,
        close: () => new Promise<void>((done) => {
          server.close(() => done());
          server.closeAllConnections();
        }),
      });
    });
  });
}
