// Calls between the threads of one process. An object served on one end of a port is called from
// the other end as if it were local, each method answering a promise: the embedded profile's API
// threads reach what the main thread owns (the event store, the read models, the event log, the
// delivery store) this way, as the distributed profile's API processes reach Redis and PostgreSQL.
//
// Messages of one turn of the event loop travel together, as one array: at thousands of calls a
// second a message per call would cost more than the calls (the SQLite writer batches likewise).

import { Worker } from 'node:worker_threads';
import {
  type AppendResult,
  appendedEvents,
  type NewEvent,
  WrongExpectedRevisionError,
} from './eventstore/port.ts';

/** What both ends of a worker_threads channel offer: a Worker, parentPort or a MessagePort. */
export interface Endpoint {
  postMessage(value: unknown): void;
  on(event: 'message', listener: (value: unknown) => void): unknown;
}

/** A call (`id` > 0 expects an answer, 0 does not), or an answer (`-id`). */
type Message =
  | [id: number, target: string, method: string, args: unknown[]]
  | [id: number, ok: boolean, value: unknown];

const crossingErrors = new Map<string, { prototype: Error }>();
/**
 * Error classes that cross as themselves: the callee's error arrives as an instance of the same
 * class, its own fields kept (a WrongExpectedRevisionError still has `actual`), so `instanceof`
 * holds where the caller tells errors apart. Any other error arrives as an Error with its message.
 */
export function errorsCrossThreads(...classes: Array<{ prototype: Error; name: string }>): void {
  for (const c of classes) crossingErrors.set(c.name, c);
}

interface ErrorShape {
  name: string;
  message: string;
  fields: Record<string, unknown>;
}

function errorOut(err: unknown): ErrorShape {
  if (!(err instanceof Error)) return { name: 'Error', message: String(err), fields: {} };
  return { name: err.name, message: err.message, fields: { ...err } };
}

function errorIn(shape: ErrorShape): Error {
  const known = crossingErrors.get(shape.name);
  const err: Error = known ? Object.create(known.prototype) : new Error(shape.message);
  Object.assign(err, shape.fields);
  Object.defineProperty(err, 'message', { value: shape.message, writable: true, configurable: true });
  if (known)
    Object.defineProperty(err, 'stack', {
      value: `${shape.name}: ${shape.message}\n    (from another thread)`,
      writable: true,
      configurable: true,
    });
  return err;
}

export class ThreadChannel {
  private readonly endpoint: Endpoint;
  private readonly served = new Map<string, { target: object; methods: ReadonlySet<string> }>();
  private readonly waiting = new Map<number, { resolve(v: unknown): void; reject(e: Error): void }>();
  private nextId = 1;
  private outbox: Message[] = [];
  /** A flush is scheduled at the end of this turn. */
  private flushing = false;
  /** The timer of sends that may wait (sendSoon), while some do. */
  private soon: NodeJS.Timeout | undefined;
  private closed: Error | undefined;

  constructor(endpoint: Endpoint) {
    this.endpoint = endpoint;
    endpoint.on('message', (batch) => {
      for (const m of batch as Message[]) this.receive(m);
    });
  }

  /** Serves the listed methods of `target` under `name` to the other end (no others). */
  serve(name: string, target: object, methods: readonly string[]): void {
    this.served.set(name, { target, methods: new Set(methods) });
  }

  call(target: string, method: string, args: unknown[]): Promise<unknown> {
    if (this.closed) return Promise.reject(this.closed);
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.waiting.set(id, { resolve, reject });
      this.post([id, target, method, args]);
    });
  }

  /** A call whose answer nobody waits for (a log line). */
  send(target: string, method: string, args: unknown[]): void {
    if (!this.closed) this.post([0, target, method, args]);
  }

  /**
   * A send that may wait up to `withinMs` for the next message to the other end and go with it:
   * a busy channel carries it at the end of the turn as any other; a quiet one wakes the other
   * thread once for all that gathered meanwhile instead of once each. For news the other end is
   * better off knowing soon but need not (a cache kept current, whose misses are checked anyway).
   */
  sendSoon(target: string, method: string, args: unknown[], withinMs: number): void {
    if (this.closed) return;
    this.outbox.push([0, target, method, args]);
    this.soon ??= setTimeout(() => this.flush(), withinMs).unref();
  }

  /**
   * The other end's `name` as an object of this end: each listed method calls across; `fixed`
   * adds what is known here without asking (a store's kind, its flags).
   */
  remote<T>(name: string, methods: readonly string[], fixed: Partial<T> = {}): T {
    const out: Record<string, unknown> = { ...fixed };
    for (const method of methods) out[method] = (...args: unknown[]) => this.call(name, method, args);
    return out as T;
  }

  /** The other end is gone: what still waits for an answer fails, later calls too. */
  close(reason: Error): void {
    this.closed = reason;
    for (const w of this.waiting.values()) w.reject(reason);
    this.waiting.clear();
  }

  private post(message: Message): void {
    if (!this.flushing) {
      this.flushing = true;
      setImmediate(() => this.flush());
    }
    if (this.outbox.push(message) >= 64) this.flush();
  }

  /** Sends what waits now rather than at the end of the turn (a caller that gathered a turn's
   * worth itself). */
  flush(): void {
    this.flushing = false;
    if (this.soon) {
      clearTimeout(this.soon);
      this.soon = undefined;
    }
    if (this.outbox.length === 0) return;
    const batch = this.outbox;
    this.outbox = [];
    try {
      this.endpoint.postMessage(batch);
    } catch (err) {
      // A value that cannot be cloned: each message on its own, so that one fails alone.
      for (const m of batch) this.postOne(m, err as Error);
    }
  }

  private postOne(m: Message, batchError: Error): void {
    try {
      this.endpoint.postMessage([m]);
    } catch {
      if (m[0] < 0) this.endpoint.postMessage([[m[0], false, errorOut(batchError)]]);
      else if (m[0] > 0) this.settle(m[0], false, errorOut(batchError));
    }
  }

  private receive(m: Message): void {
    const id = m[0];
    if (id < 0) {
      this.settle(-id, m[1] as boolean, m[2]);
      return;
    }
    const [, target, method, args] = m as [number, string, string, unknown[]];
    const answer = (ok: boolean, value: unknown) => {
      if (id > 0) this.post([-id, ok, ok ? value : errorOut(value)]);
    };
    try {
      const served = this.served.get(target);
      const fn = served?.methods.has(method)
        ? (served.target as Record<string, (...args: unknown[]) => unknown>)[method]
        : undefined;
      if (typeof fn !== 'function') throw new Error(`no method ${target}.${method} served on this thread`);
      const result = fn.apply(served!.target, args);
      if (result instanceof Promise)
        result.then(
          (v) => answer(true, v),
          (e) => answer(false, e),
        );
      else answer(true, result);
    } catch (err) {
      answer(false, err);
    }
  }

  private settle(id: number, ok: boolean, value: unknown): void {
    const w = this.waiting.get(id);
    if (!w) return;
    this.waiting.delete(id);
    if (ok) w.resolve(value);
    else w.reject(errorIn(value as ErrorShape));
  }
}

/**
 * A worker thread started at its first use, and again at the first use after it died (the calls
 * waiting on the one that died fail). `setup` serves what the thread may call back.
 */
export class OnDemandThread {
  private readonly url: URL;
  private readonly workerData: unknown;
  private readonly name: string;
  private readonly setup: (channel: ThreadChannel) => void;
  private readonly gone: (err: Error) => void;
  private running: { worker: Worker; channel: ThreadChannel } | undefined;

  /** `gone`: told when a thread dies, after the calls waiting on it have failed. */
  constructor(o: {
    url: URL;
    workerData: unknown;
    name: string;
    setup?: (channel: ThreadChannel) => void;
    gone?: (err: Error) => void;
  }) {
    this.url = o.url;
    this.workerData = o.workerData;
    this.name = o.name;
    this.setup = o.setup ?? (() => {});
    this.gone = o.gone ?? (() => {});
  }

  get started(): boolean {
    return this.running !== undefined;
  }

  channel(): ThreadChannel {
    if (this.running) return this.running.channel;
    const worker = new Worker(this.url, { workerData: this.workerData });
    const channel = new ThreadChannel(worker);
    this.setup(channel);
    const running = { worker, channel };
    worker.on('error', (err) => this.ended(running, err));
    worker.on('exit', (code) => this.ended(running, new Error(`${this.name} exited (${code})`)));
    this.running = running;
    return channel;
  }

  /** Ends the thread, if one runs, after `last` (a closing call) has settled. */
  async stop(last?: (channel: ThreadChannel) => Promise<unknown>): Promise<void> {
    const running = this.running;
    if (!running) return;
    try {
      await last?.(running.channel);
    } finally {
      await this.terminate();
    }
  }

  /** Ends the thread at once, as a crash would: what waits on it fails. */
  async terminate(): Promise<void> {
    const running = this.running;
    if (!running) return;
    this.ended(running, new Error(`${this.name} was stopped`));
    await running.worker.terminate();
  }

  private ended(running: { worker: Worker; channel: ThreadChannel }, err: Error): void {
    if (this.running !== running) return;
    this.running = undefined;
    running.channel.close(err);
    this.gone(err);
  }
}

/** How long a thread that lost a race on a stream holds its turn (its retry takes a read and an
 * append); a turn its holder does not use ends then. */
const TURN_MS = 100;
/**
 * How long the news of a thread's append may wait to reach the other threads (their cached states
 * kept current): under load it goes at the end of the turn with the rest, at a moderate rate with
 * the next message or after this long, one wake-up for several appends. A request that meets its
 * stream's state before the news decides on it anyway; the append's revision check catches that.
 */
const APPENDED_WITHIN_MS = 20;

/**
 * The appends of several threads to one event store, as the thread that commits them runs them
 * (the main thread; embedded, the event store's writer thread): each in its stream's turn
 * (StreamTurns), and each told to the other threads, whose cached states then stay current. The
 * news carry the events as appended: their `data` serialised when the store took them so.
 */
export class ThreadAppends {
  private readonly turns = new StreamTurns<ThreadChannel>(TURN_MS);
  private readonly threads = new Set<ThreadChannel>();

  join(thread: ThreadChannel): void {
    this.threads.add(thread);
  }

  /** The thread is gone: its turns pass on, and it hears of no more appends. */
  leave(thread: ThreadChannel): void {
    this.threads.delete(thread);
    this.turns.forget(thread);
  }

  async append(
    from: ThreadChannel,
    stream: string,
    events: NewEvent[],
    append: () => Promise<AppendResult>,
  ): Promise<AppendResult> {
    const result = await this.turns.run(stream, from, append);
    const recorded = appendedEvents(stream, events, result);
    for (const t of this.threads)
      if (t !== from) t.sendSoon('appended', 'apply', [stream, recorded], APPENDED_WITHIN_MS);
    return result;
  }
}

interface Turn<Who> {
  holder: Who;
  until: number;
  /** Threads that lost while the turn was held: each gets it in this order. */
  next: Who[];
  /** Resolved when the turn passes on. */
  over: PromiseWithResolvers<void>;
  timer: NodeJS.Timeout;
}

/**
 * Turns on contended streams. Each thread runs its commands on one stream one at a time, but the
 * threads race: the one that just appended decides its next command on the state it cached and
 * appends at once, while a loser must read the stream again before it retries, and so can lose
 * every race to a thread with a queue of commands for that stream (one device reporting on many
 * connections). A thread whose append lost (a conflict) therefore gets the stream's turn, or a
 * place in line for it: the other threads' appends to the stream wait until the holder has
 * appended (its retry), then the turn passes to the next in line. A turn its holder does not use
 * within `turnMs` (it decided that nothing was left to do, or its thread ended) passes on then.
 * A command thus loses at most twice: once to get in line, and once more if the append it had
 * waiting when its turn came was decided before the previous holder's. Uncontended streams pay
 * one map lookup.
 */
export class StreamTurns<Who> {
  private readonly held = new Map<string, Turn<Who>>();
  private readonly turnMs: number;
  constructor(turnMs: number) {
    this.turnMs = turnMs;
  }

  async run<T>(stream: string, who: Who, append: () => Promise<T>): Promise<T> {
    for (let turn = this.held.get(stream); turn && turn.holder !== who; turn = this.held.get(stream))
      await turn.over.promise;
    let result: T;
    try {
      result = await append();
    } catch (err) {
      if (err instanceof WrongExpectedRevisionError) this.lost(stream, who);
      else this.done(stream, who);
      throw err;
    }
    this.done(stream, who);
    return result;
  }

  /** Ends every turn `who` holds and its places in line (its thread is gone). */
  forget(who: Who): void {
    for (const [stream, turn] of this.held) {
      turn.next = turn.next.filter((w) => w !== who);
      if (turn.holder === who) this.pass(stream, turn);
    }
  }

  private lost(stream: string, who: Who): void {
    const turn = this.held.get(stream);
    if (!turn) this.hand(stream, who, []);
    else if (turn.holder === who)
      turn.until = Date.now() + this.turnMs; // its retry: the turn holds
    else if (!turn.next.includes(who)) turn.next.push(who);
  }

  /** `who` appended (or failed otherwise): its turn, if it held one, passes on. */
  private done(stream: string, who: Who): void {
    const turn = this.held.get(stream);
    if (turn?.holder === who) this.pass(stream, turn);
  }

  private hand(stream: string, holder: Who, next: Who[]): void {
    const turn: Turn<Who> = {
      holder,
      until: Date.now() + this.turnMs,
      next,
      over: Promise.withResolvers(),
      timer: setTimeout(() => this.expire(stream, turn), this.turnMs),
    };
    turn.timer.unref();
    this.held.set(stream, turn);
  }

  private expire(stream: string, turn: Turn<Who>): void {
    if (this.held.get(stream) !== turn) return;
    const left = turn.until - Date.now();
    if (left > 0) {
      turn.timer = setTimeout(() => this.expire(stream, turn), left);
      turn.timer.unref();
    } else this.pass(stream, turn);
  }

  private pass(stream: string, turn: Turn<Who>): void {
    clearTimeout(turn.timer);
    this.held.delete(stream);
    const next = turn.next.shift();
    if (next !== undefined) this.hand(stream, next, turn.next);
    turn.over.resolve();
  }
}
