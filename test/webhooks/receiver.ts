// A real HTTP receiver for webhook tests: records every request (raw body, headers, when) per
// path, and answers as the path says: /ok, /status/<code>[?retry-after=<s>], /hang, /redirect; /ok
// and /status/<code> ?delay=<ms> later.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
  /** The status answered; undefined while (or when) the request hangs. */
  status?: number;
}

export class Receiver {
  readonly received: Received[] = [];
  private server!: Server;
  /** Paths told to fail (500) or hang for a while, whatever their name says. */
  private readonly modes = new Map<string, 'fail' | 'hang'>();
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const url = new URL(req.url!, 'http://x');
        const received: Received = {
          path: url.pathname,
          headers: req.headers,
          body: Buffer.concat(chunks).toString(),
          at: Date.now(),
        };
        this.received.push(received);
        res.once('finish', () => {
          received.status = res.statusCode;
        });
        const mode = this.modes.get(url.pathname);
        if (mode === 'hang') return;
        if (mode === 'fail') {
          res.writeHead(500, { 'content-type': 'text/plain' });
          return res.end('failing for a while');
        }
        const status = /^\/status\/(\d{3})/.exec(url.pathname)?.[1];
        if (url.pathname.startsWith('/hang')) return; // never answers
        if (url.pathname.startsWith('/redirect')) {
          res.writeHead(301, { location: `${this.url}/ok/redirected` });
          return res.end();
        }
        const headers: Record<string, string> = { 'content-type': 'text/plain' };
        const retryAfter = url.searchParams.get('retry-after');
        if (retryAfter) headers['retry-after'] = retryAfter;
        // ?proto: a header named __proto__, which the attempt record must keep as any other.
        if (url.searchParams.has('proto')) res.setHeader('__proto__', 'a header like any other');
        const answer = () => {
          res.writeHead(status ? Number(status) : 200, headers);
          res.end(`answer ${'x'.repeat(Number(url.searchParams.get('size') ?? 2))}`);
        };
        // ?delay=<ms>: answered that much later, as a receiver that takes its time.
        const delay = Number(url.searchParams.get('delay') ?? 0);
        if (delay > 0) setTimeout(answer, delay);
        else answer();
      });
    });
    this.server.keepAliveTimeout = 60_000;
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** Makes `path` answer 500, or hang, until told `ok` again. */
  behave(path: string, mode: 'fail' | 'hang' | 'ok'): void {
    if (mode === 'ok') this.modes.delete(path);
    else this.modes.set(path, mode);
  }

  at(path: string): Received[] {
    return this.received.filter((r) => r.path === path);
  }

  async waitFor(path: string, count: number, timeoutMs = 15_000): Promise<Received[]> {
    const deadline = Date.now() + timeoutMs;
    while (Date.now() < deadline) {
      if (this.at(path).length >= count) return this.at(path);
      await new Promise((r) => setTimeout(r, 25));
    }
    throw new Error(`${path}: ${this.at(path).length} of ${count} requests within ${timeoutMs} ms`);
  }

  async stop(): Promise<void> {
    this.server.closeAllConnections();
    await new Promise((r) => this.server.close(r));
  }
}

/**
 * The arrivals `at` (ms) keep to `perSecond`: any two deliveries k apart are k intervals apart, but
 * for the half interval a job may start after its slot (processors/delivery/throttle.ts) and
 * `jitterMs` for the network and the receiver's clock.
 */
export function assertKeepsRate(at: number[], perSecond: number, jitterMs = 30): void {
  const t = [...at].sort((a, b) => a - b);
  const interval = 1000 / perSecond;
  for (let i = 0; i < t.length; i++)
    for (let j = i + 1; j < t.length; j++) {
      const least = (j - i) * interval - interval / 2 - jitterMs;
      assert.ok(
        t[j]! - t[i]! >= least,
        `deliveries ${i} and ${j} arrived ${t[j]! - t[i]!} ms apart, less than ${least} at ${perSecond}/s: ${t.map((x) => x - t[0]!).join(', ')}`,
      );
    }
}
