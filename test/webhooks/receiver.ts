// A real HTTP receiver for webhook tests: records every request (raw body, headers, when) per
// path, and answers as the path says: /ok, /status/<code>[?retry-after=<s>], /hang, /redirect.
import { once } from 'node:events';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  path: string;
  headers: IncomingHttpHeaders;
  body: string;
  at: number;
}

export class Receiver {
  readonly received: Received[] = [];
  private server!: Server;
  url = '';

  async start(): Promise<this> {
    this.server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c) => chunks.push(c));
      req.on('end', () => {
        const url = new URL(req.url!, 'http://x');
        this.received.push({
          path: url.pathname,
          headers: req.headers,
          body: Buffer.concat(chunks).toString(),
          at: Date.now(),
        });
        const status = /^\/status\/(\d{3})/.exec(url.pathname)?.[1];
        if (url.pathname.startsWith('/hang')) return; // never answers
        if (url.pathname.startsWith('/redirect')) {
          res.writeHead(301, { location: `${this.url}/ok/redirected` });
          return res.end();
        }
        const headers: Record<string, string> = { 'content-type': 'text/plain' };
        const retryAfter = url.searchParams.get('retry-after');
        if (retryAfter) headers['retry-after'] = retryAfter;
        res.writeHead(status ? Number(status) : 200, headers);
        res.end(`answer ${'x'.repeat(Number(url.searchParams.get('size') ?? 2))}`);
      });
    });
    this.server.keepAliveTimeout = 60_000;
    this.server.listen(0, '127.0.0.1');
    await once(this.server, 'listening');
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
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
