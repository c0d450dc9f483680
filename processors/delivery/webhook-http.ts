// The HTTP side of a delivery attempt: one POST through undici's agent (connections pooled per
// origin), its answer read up to RESPONSE_BODY_LIMIT, within the attempt's time limit, and the
// outcome classified. It runs on the dispatcher's thread (PooledHttp), or there at moderate rates
// and on a thread of its own past them (SpilloverHttp, the default):
// undici and the sockets are most of an attempt's CPU, and on the dispatcher's thread they bound it
// to one core while the rest of the machine idled.
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { Agent, errors, type Dispatcher as HttpDispatcher } from 'undici';
import { OnDemandThread, ThreadChannel } from '../../infra/threads.ts';
import { Egress, EgressError, type EgressPolicy } from './egress.ts';
import type { Outcome } from './port.ts';

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

/** Why a POST has no answer. */
type Failure = Exclude<Outcome, '2xx' | '3xx' | '4xx' | '5xx'>;

/** What one POST came to: the receiver's answer, or why there is none. */
export type Exchanged = { answer: Answer } | { answer?: undefined; outcome: Failure; error: string };

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
  private readonly deadlines = new Deadlines<Exchange>();
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
  post(
    { origin, path }: Target,
    headers: Record<string, string> | string[],
    body: string,
  ): Promise<Exchanged> {
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

/**
 * undici on a thread of its own. The POSTs of one turn cross as one flat array of strings and
 * numbers, and their outcomes come back likewise: as objects, each cost several times as much to
 * copy from thread to thread (measured alone, both ways: a POST and its answer 18 µs, flat 5; in the
 * dispatcher 6 % less CPU per delivery, 1.05 × the rate, bench/compare.ts). If the thread
 * dies, the POSTs waiting on it end as `network` failures (retried as any), and the next POST
 * starts a new thread.
 *
 * A POST, flat: its number, origin, path, body, how many headers, then each name and value. An
 * outcome: the POST's number, the status (0: no answer), whether the body was cut (0 or 1), the
 * body or the error, the failure's class ('' for an answer), how many headers, each name and value.
 */
export class ThreadedHttp implements WebhookHttp {
  /** Its thread (the tests end it as a crash would). */
  readonly thread: OnDemandThread;
  private readonly waiting = new Map<number, Posted>();
  /** A backstop per POST, a second past the thread's own limit: a thread alive but wedged still
   * ends its attempts. */
  private readonly deadlines = new Deadlines<Posted>();
  private readonly backstopMs: number;
  private readonly timedOut: Exchanged;
  private outbox: Flat = [];
  private posts = 0;
  private closed = false;

  constructor(o: HttpOptions) {
    this.backstopMs = o.timeoutMs + 1000;
    this.timedOut = { outcome: 'timeout', error: `no answer within ${o.timeoutMs} ms` };
    this.thread = new OnDemandThread({
      url: new URL(import.meta.url),
      workerData: { webhookHttp: o },
      name: 'the webhook HTTP thread',
      setup: (channel) =>
        channel.serve('outcomes', { settle: (flat: Flat) => this.settle(flat) }, ['settle']),
      gone: (err) => {
        this.outbox = [];
        for (const id of [...this.waiting.keys()])
          this.finish(id, { outcome: 'network', error: err.message });
      },
    });
  }

  post({ origin, path }: Target, headers: Record<string, string>, body: string): Promise<Exchanged> {
    if (this.closed)
      return Promise.resolve({ outcome: 'network', error: 'the webhook HTTP client is closed' });
    return new Promise((resolve) => {
      const id = ++this.posts;
      const deadline = performance.now() + this.backstopMs;
      const posted: Posted = { deadline, resolve, timeout: () => this.finish(id, this.timedOut) };
      this.waiting.set(id, posted);
      this.deadlines.add(posted);
      const out = this.outbox;
      if (out.length === 0) setImmediate(() => this.flush());
      out.push(id, origin, path, body);
      pushHeaders(out, headers);
    });
  }

  /** Settles a POST once: with its outcome, or as its backstop passes. */
  private finish(id: number, outcome: Exchanged): void {
    const posted = this.waiting.get(id);
    if (!posted) return;
    this.waiting.delete(id);
    this.deadlines.delete(posted);
    posted.resolve(outcome);
  }

  private flush(): void {
    const batch = this.outbox;
    if (batch.length === 0) return;
    this.outbox = [];
    try {
      const channel = this.thread.channel();
      channel.send('http', 'posts', [batch]);
      channel.flush();
    } catch (err) {
      // No thread could be started: the batch fails as network failures, retried as any.
      const failed: Exchanged = { outcome: 'network', error: (err as Error).message };
      for (let at = 0; at < batch.length; at += 5 + 2 * (batch[at + 4] as number))
        this.finish(batch[at] as number, failed);
    }
  }

  private settle(flat: Flat): void {
    for (let at = 0; at < flat.length; ) {
      const id = flat[at] as number;
      const status = flat[at + 1] as number;
      const truncated = flat[at + 2] === 1;
      const text = flat[at + 3] as string;
      const outcome = flat[at + 4] as Failure | '';
      const end = at + 6 + 2 * (flat[at + 5] as number);
      if (outcome !== '') {
        at = end;
        this.finish(id, { outcome, error: text });
        continue;
      }
      const headers: Record<string, string> = {};
      for (at += 6; at < end; at += 2) setHeader(headers, flat[at] as string, flat[at + 1] as string);
      this.finish(id, { answer: { status, headers, body: text, truncated } });
    }
  }

  /** Waits for the POSTs sent, then closes the connections and ends the thread. */
  close(): Promise<void> {
    this.closed = true;
    this.flush();
    return this.thread.stop((channel) => channel.call('http', 'close', []).catch(() => {}));
  }
}

/**
 * undici on this thread at moderate rates, the HTTP thread past them. At a steady, moderate rate a
 * POST on the thread cost two more wake-ups than one here (the thread woken to send, and again by
 * the answer, before it wakes this one), each about as much CPU as the POST itself on the machines
 * measured (bench/latency.ts's floors); under load the thread takes the POSTs, and with them most of
 * undici's CPU, from this thread, which is then the limit. Past a rate, not past a share of this
 * thread's time: under load its event loop, waiting on the other threads, was often less than
 * three quarters busy, and the POSTs that then stayed here cost a fifth of the embedded dispatch
 * rate. The rate is counted at each POST over the time since the last count (a tenth of a second
 * or more; no timer). The thread starts at its first POST.
 */
export class SpilloverHttp implements WebhookHttp {
  private readonly here: PooledHttp;
  /** Where the POSTs go past the rate (the tests look at its thread). */
  readonly spill: ThreadedHttp;
  private counted = performance.now();
  private posts = 0;
  private readonly inlineUpTo: number;
  private busy: boolean;
  private closing: Promise<void> | undefined;

  /** `inlineUpToPerSecond`: INLINE_UP_TO_PER_SECOND unless a test says otherwise (0: all cross). */
  constructor(o: HttpOptions & { inlineUpToPerSecond?: number }) {
    this.here = new PooledHttp(o);
    this.spill = new ThreadedHttp(o);
    this.inlineUpTo = o.inlineUpToPerSecond ?? INLINE_UP_TO_PER_SECOND;
    this.busy = this.inlineUpTo === 0;
  }

  post(target: Target, headers: Record<string, string>, body: string): Promise<Exchanged> {
    const now = performance.now();
    this.posts++;
    if (now - this.counted >= COUNT_EVERY_MS) {
      this.busy = (this.posts * 1000) / (now - this.counted) > this.inlineUpTo;
      this.counted = now;
      this.posts = 0;
    }
    // Once closed, the thread's side answers as ThreadedHttp does (a network failure, retried).
    return this.busy || this.closing
      ? this.spill.post(target, headers, body)
      : this.here.post(target, headers, body);
  }

  /** Once: undici's agent refuses a second close. */
  close(): Promise<void> {
    this.closing ??= Promise.all([this.here.close(), this.spill.close()]).then(() => {});
    return this.closing;
  }
}

const COUNT_EVERY_MS = 100;
/** POSTs a second that stay on the dispatching thread: a steady 500 events/s does, saturation
 * (thousands on two cores) does not. */
const INLINE_UP_TO_PER_SECOND = 1000;

/** A POST on its way to the HTTP thread and back; `timeout` when its backstop passes. */
interface Posted {
  readonly deadline: number;
  readonly resolve: (outcome: Exchanged) => void;
  timeout(): void;
}

type Flat = (string | number)[];

/** Appends the headers as the flat arrays carry them: how many, then each name and value. */
function pushHeaders(into: Flat, headers: Record<string, string>): void {
  const counted = into.push(0) - 1;
  let n = 0;
  for (const name in headers) {
    into.push(name, headers[name]!);
    n++;
  }
  into[counted] = n;
}

/** A header may be named like anything, __proto__ too: that one is defined, as assigning it would
 * set the prototype instead of a property. */
function setHeader(headers: Record<string, string>, name: string, value: string): void {
  if (name === '__proto__')
    Object.defineProperty(headers, name, { value, enumerable: true, writable: true, configurable: true });
  else headers[name] = value;
}

/** Thrown into an attempt past its time limit; classified like undici's own timeouts. */
class AttemptTimeoutError extends Error {
  override name = 'TimeoutError';
}

/** The attempts in flight, in the order they started: all have the same time limit, so this is
 * also the order of their deadlines, and one timer set for the first serves them all (it fires
 * about once per time limit, however many attempts pass). */
class Deadlines<T extends { readonly deadline: number; timeout(): void }> {
  private readonly open = new Set<T>();
  private timer: NodeJS.Timeout | undefined;

  add(item: T): void {
    this.open.add(item);
    if (!this.timer) this.arm();
  }

  delete(item: T): void {
    this.open.delete(item);
  }

  private arm(): void {
    const first = this.open.values().next().value;
    this.timer = first && setTimeout(() => this.expire(), Math.max(0, first.deadline - performance.now()));
    this.timer?.unref(); // the requests themselves keep the process up
  }

  private expire(): void {
    const now = performance.now();
    try {
      for (const item of this.open) {
        if (item.deadline > now) break;
        this.open.delete(item);
        item.timeout();
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
  private readonly deadlines: Deadlines<Exchange>;
  private readonly resolve: (answer: Answer) => void;
  private readonly reject: (err: Error) => void;

  constructor(
    deadline: number,
    deadlines: Deadlines<Exchange>,
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
    // off its fast path for the whole attempt record (4-5 µs a record instead of 2-3).
    const copy: Record<string, string> = {};
    for (const name in headers) {
      const v = headers[name];
      setHeader(copy, name, typeof v === 'string' ? v : Array.isArray(v) ? v.join(', ') : String(v));
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

// The thread of a ThreadedHttp: a PooledHttp making the POSTs that come, their outcomes sent back
// those of one turn together.
if (!isMainThread && workerData?.webhookHttp) {
  const http = new PooledHttp(workerData.webhookHttp as HttpOptions);
  const channel = new ThreadChannel(parentPort!);
  let outcomes: Flat = [];
  const flush = () => {
    channel.send('outcomes', 'settle', [outcomes]);
    channel.flush();
    outcomes = [];
  };
  const settle = (id: number, e: Exchanged) => {
    if (outcomes.length === 0) setImmediate(flush);
    if (!e.answer) {
      outcomes.push(id, 0, 0, e.error, e.outcome, 0);
      return;
    }
    const { status, truncated, body, headers } = e.answer;
    outcomes.push(id, status, truncated ? 1 : 0, body, '');
    pushHeaders(outcomes, headers);
  };
  const posts = (flat: Flat) => {
    for (let at = 0; at < flat.length; ) {
      const id = flat[at] as number;
      const target = { origin: flat[at + 1] as string, path: flat[at + 2] as string };
      const body = flat[at + 3] as string;
      const end = at + 5 + 2 * (flat[at + 4] as number);
      const headers = flat.slice(at + 5, end) as string[];
      at = end;
      void http.post(target, headers, body).then((e) => settle(id, e));
    }
  };
  channel.serve('http', { posts, close: () => http.close() }, ['posts', 'close']);
}
