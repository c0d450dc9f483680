// The HTTP side of a delivery attempt: one POST through undici's agent (connections pooled per
// origin), its answer read up to RESPONSE_BODY_LIMIT, within the attempt's time limit, and the
// outcome classified. It runs on the dispatcher's thread (PooledHttp) or on a thread of its own
// (ThreadedHttp, HUB_DISPATCHER_HTTP_THREADS=1): undici and the sockets are most of an attempt's
// CPU, and on the dispatcher's thread they bound it to one core while the rest of the machine idled.
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { Agent, errors, type Dispatcher as HttpDispatcher } from 'undici';
import { OnDemandThread, ThreadChannel } from '../infra/threads.ts';
import type { Outcome } from './deliveries.ts';
import { Egress, EgressError, type EgressPolicy } from './egress.ts';

/** Bytes of a receiver's answer kept in the attempt record. */
export const RESPONSE_BODY_LIMIT = 4096;

/** Where a subscription's deliveries go, in the parts undici's dispatch takes (made once, not at
 * every attempt from the URL's getters). */
export interface Target {
  origin: string;
  path: string;
}

export interface Answer {
  status: number;
  headers: Record<string, string>;
  body: string;
  truncated: boolean;
}

/** What one POST came to: the receiver's answer, or why there is none. */
export type Exchanged =
  | { answer: Answer }
  | { answer?: undefined; outcome: Exclude<Outcome, '2xx' | '3xx' | '4xx' | '5xx'>; error: string };

export interface WebhookHttp {
  /** Never rejects: a failure is an outcome. `body` is sent as its UTF-8 bytes. */
  post(target: Target, headers: Record<string, string>, body: string): Promise<Exchanged>;
  /** Waits for the attempts in flight, then closes the connections. */
  close(): Promise<void>;
}

export interface HttpOptions {
  egress: EgressPolicy;
  timeoutMs: number;
}

/** Why a POST failed, in the attempt record's terms. */
export function classify(err: unknown, timeoutMs: number): Exchanged {
  const e = err as Error & { code?: string; cause?: { code?: string } };
  if (e instanceof EgressError || e.code === 'EHUBEGRESS' || e.cause?.code === 'EHUBEGRESS')
    return { outcome: 'refused_address', error: e.cause?.code ?? e.code ?? e.message };
  if (
    e.name === 'TimeoutError' ||
    e instanceof errors.HeadersTimeoutError ||
    e instanceof errors.BodyTimeoutError ||
    e instanceof errors.ConnectTimeoutError
  )
    return { outcome: 'timeout', error: `no answer within ${timeoutMs} ms` };
  return { outcome: 'network', error: e.cause?.code ?? e.code ?? e.message };
}

/** undici on this thread. */
export class PooledHttp implements WebhookHttp {
  private readonly agent: Agent;
  private readonly deadlines = new Deadlines();
  private readonly timeoutMs: number;

  constructor(o: HttpOptions) {
    this.timeoutMs = o.timeoutMs;
    this.agent = new Agent({
      connect: { lookup: new Egress(o.egress).lookup, timeout: o.timeoutMs },
      connections: 128,
      keepAliveTimeout: 30_000,
      // No timers of undici's per request: each attempt's time limit, from connecting to the end of
      // the answer, is `deadlines`' (undici's headers and body timers were set, refreshed and
      // cleared at every request, beside the keep-alive timer).
      headersTimeout: 0,
      bodyTimeout: 0,
    });
  }

  /** Dispatched with a handler of our own rather than `request()`: no body stream, no async
   * iterator and no timer per attempt (the time limit is `deadlines`' one timer), a fifth of the
   * CPU an attempt took. */
  post({ origin, path }: Target, headers: Record<string, string>, body: string): Promise<Exchanged> {
    return new Promise<Answer>((resolve, reject) => {
      // A monotonic clock: a step of the wall clock neither cuts attempts short nor reorders them.
      const exchange = new Exchange(performance.now() + this.timeoutMs, this.deadlines, resolve, reject);
      this.deadlines.add(exchange);
      this.agent.dispatch({ origin, path, method: 'POST', headers, body }, exchange);
    }).then(
      (answer) => ({ answer }),
      (err) => classify(err, this.timeoutMs),
    );
  }

  close(): Promise<void> {
    return this.agent.close();
  }
}

/** undici on a thread of its own: each POST crosses as its parts (those of one turn as one
 * message) and its outcome comes back. If the thread dies, the POSTs waiting on it end as
 * `network` failures (retried as any), and the next starts a new thread. */
export class ThreadedHttp implements WebhookHttp {
  private readonly thread: OnDemandThread;

  constructor(o: HttpOptions) {
    this.thread = new OnDemandThread({
      url: new URL(import.meta.url),
      workerData: { webhookHttp: o },
      name: 'the webhook HTTP thread',
    });
  }

  post(target: Target, headers: Record<string, string>, body: string): Promise<Exchanged> {
    return (this.thread.channel().call('http', 'post', [target, headers, body]) as Promise<Exchanged>).catch(
      (err: Error) => ({ outcome: 'network' as const, error: err.message }),
    );
  }

  close(): Promise<void> {
    return this.thread.stop((channel) => channel.call('http', 'close', []).catch(() => {}));
  }
}

/** Thrown into an attempt past its time limit; classified like undici's own timeouts. */
class AttemptTimeoutError extends Error {
  override name = 'TimeoutError';
}

/** The attempts in flight, in the order they started: all have the same time limit, so this is
 * also the order of their deadlines, and one timer set for the first serves them all (it fires
 * about once per time limit, however many attempts pass). */
class Deadlines {
  private readonly open = new Set<Exchange>();
  private timer: NodeJS.Timeout | undefined;

  add(exchange: Exchange): void {
    this.open.add(exchange);
    if (!this.timer) this.arm();
  }

  delete(exchange: Exchange): void {
    this.open.delete(exchange);
  }

  private arm(): void {
    const first = this.open.values().next().value;
    this.timer = first && setTimeout(() => this.expire(), Math.max(0, first.deadline - performance.now()));
    this.timer?.unref(); // the requests themselves keep the process up
  }

  private expire(): void {
    const now = performance.now();
    try {
      for (const exchange of this.open) {
        if (exchange.deadline > now) break;
        this.open.delete(exchange);
        exchange.timeout();
      }
    } finally {
      this.arm();
    }
  }
}

/** One attempt's request and answer, as undici's dispatch handler. Settles once: with the answer,
 * with the answer cut at RESPONSE_BODY_LIMIT (the rest is not read), or with the error. */
class Exchange implements HttpDispatcher.DispatchHandler {
  private controller: HttpDispatcher.DispatchController | undefined;
  private status = 0;
  private headers: Record<string, string> = {};
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private settled = false;
  readonly deadline: number;
  private readonly deadlines: Deadlines;
  private readonly resolve: (answer: Answer) => void;
  private readonly reject: (err: Error) => void;

  constructor(
    deadline: number,
    deadlines: Deadlines,
    resolve: (answer: Answer) => void,
    reject: (err: Error) => void,
  ) {
    this.deadline = deadline;
    this.deadlines = deadlines;
    this.resolve = resolve;
    this.reject = reject;
  }

  onRequestStart(controller: HttpDispatcher.DispatchController): void {
    this.controller = controller;
    if (this.settled) controller.abort(new AttemptTimeoutError('timed out before it was sent'));
  }

  onResponseStart(_c: HttpDispatcher.DispatchController, status: number, headers: Record<string, unknown>) {
    this.status = status;
    // Copied into an ordinary object: undici's has no prototype, which took V8's JSON.stringify
    // off its fast path for the whole attempt record (4-5 µs a record instead of 2-3). A header
    // may be named like anything, __proto__ too: that one is defined, as assigning it would set
    // the prototype instead of a property.
    const copy: Record<string, string> = {};
    for (const name in headers) {
      const v = headers[name];
      const value = typeof v === 'string' ? v : Array.isArray(v) ? v.join(', ') : String(v);
      if (name === '__proto__')
        Object.defineProperty(copy, name, { value, enumerable: true, writable: true, configurable: true });
      else copy[name] = value;
    }
    this.headers = copy;
  }

  onResponseData(controller: HttpDispatcher.DispatchController, chunk: Buffer): void {
    const room = RESPONSE_BODY_LIMIT - this.size;
    this.chunks.push(chunk.length > room ? chunk.subarray(0, room) : chunk);
    this.size += Math.min(chunk.length, room);
    if (chunk.length > room) {
      this.answer(true);
      controller.abort(new Error('the answer is longer than is kept'));
    }
  }

  onResponseEnd(): void {
    this.answer(false);
  }

  onResponseError(_c: HttpDispatcher.DispatchController, err: Error): void {
    this.fail(err);
  }

  /** Past the deadline: fails the attempt now, and stops its request (at once, or when it starts). */
  timeout(): void {
    const err = new AttemptTimeoutError('no answer in time');
    this.fail(err);
    this.controller?.abort(err);
  }

  private answer(truncated: boolean): void {
    if (this.settled) return;
    this.settled = true;
    this.deadlines.delete(this);
    const body = (this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks)).toString('utf8');
    this.resolve({ status: this.status, headers: this.headers, body, truncated });
  }

  private fail(err: Error): void {
    if (this.settled) return;
    this.settled = true;
    this.deadlines.delete(this);
    this.reject(err);
  }
}

// The thread of a ThreadedHttp: a PooledHttp, answering the POSTs posted to it.
if (!isMainThread && workerData?.webhookHttp) {
  const http = new PooledHttp(workerData.webhookHttp as HttpOptions);
  new ThreadChannel(parentPort!).serve('http', http, ['post', 'close']);
}
