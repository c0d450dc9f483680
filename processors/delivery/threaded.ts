// The SQLite delivery store on a thread of its own: the proxy the embedded profile runs, and the
// thread's side (this module, loaded on the thread, serves a SqliteDeliveryStore).
import { EventEmitter } from 'node:events';
import { isMainThread, parentPort, workerData } from 'node:worker_threads';
import { OnDemandThread, ThreadChannel } from '../../infra/threads.ts';
import type { EndpointHealth } from './health.ts';
import {
  type Attempt,
  type AttemptRecord,
  type DeliveryStore,
  type Hold,
  heldOf,
  type Job,
  type Rooms,
  type StatusFilter,
} from './port.ts';
import { SqliteDeliveryStore } from './sqlite.ts';
import { claimed, FinishWindow, jobRow } from './sqlite-rows.ts';

/** What the thread serves of its SqliteDeliveryStore. */
const THREAD_METHODS = [
  'enqueueRows',
  'claimRows',
  'renew',
  'finishRows',
  'nextDue',
  'pending',
  'health',
  'probe',
  'attempts',
  'attempt',
  'attemptsOfEvent',
  'close',
] as const satisfies readonly (keyof SqliteDeliveryStore)[];

/**
 * The SQLite store on a thread of its own (what the embedded profile runs): SQLite's work, a
 * third of a delivery's cost on one thread, runs beside the HTTP work instead of before it. Calls
 * go through a ThreadChannel (those of one turn as one message, and their answers too). If the
 * thread dies, the calls waiting on it fail (their jobs are claimed again when their leases end)
 * and the next call starts a new one on the same file.
 */
export class ThreadedDeliveryStore implements DeliveryStore {
  private readonly path: string;
  private readonly retentionMs: number;
  private readonly emitter = new EventEmitter();
  private readonly thread: OnDemandThread;
  /** Finishes gathering for the next group commit, sent to the thread as one call. */
  private readonly window = new FinishWindow((fields) => this.call('finishRows', fields));

  constructor(path: string, o: { retentionMs: number }) {
    this.path = path;
    this.retentionMs = o.retentionMs;
    this.emitter.setMaxListeners(0);
    this.thread = new OnDemandThread({
      url: new URL(import.meta.url),
      workerData: { deliveryStore: { path: this.path, retentionMs: this.retentionMs } },
      name: "the delivery store's thread",
      setup: (channel) =>
        channel.serve('events', { enqueued: () => this.emitter.emit('enqueue') }, ['enqueued']),
    });
  }

  private call<T>(method: (typeof THREAD_METHODS)[number], ...args: unknown[]): Promise<T> {
    return this.thread.channel().call('store', method, args) as Promise<T>;
  }

  // Jobs and attempts cross to the thread as JSON (made here) and come back as JSON (parsed here):
  // copying a string is cheaper than cloning the object on one side and serializing it on the other.
  async enqueue(jobs: Job[], hold?: Hold): Promise<Job[]> {
    if (jobs.length === 0) return [];
    return heldOf(jobs, await this.call<string[]>('enqueueRows', jobs.map(jobRow), hold));
  }
  async claim(
    now: number,
    limit: number,
    leaseMs: number,
    rooms?: Rooms,
  ): Promise<{ job: Job; due: number }[]> {
    return (await this.call<{ body: string; due: number }[]>('claimRows', now, limit, leaseMs, rooms)).map(
      claimed,
    );
  }
  renew(jobIds: string[], until: number): Promise<void> {
    return this.call('renew', jobIds, until);
  }
  /** Group-committed on this thread: the window crosses as one message, committed at once. */
  finish(job: Job, attempt: Attempt | null, next: number | null, fresh = false): Promise<void> {
    return this.window.add(job, attempt, next, fresh);
  }
  nextDue(): Promise<number | undefined> {
    this.window.send();
    return this.call('nextDue');
  }
  pending(): Promise<{ count: number; oldestDue: number | undefined }> {
    this.window.send();
    return this.call('pending');
  }
  health(subscriptions: string[]): Promise<EndpointHealth[]> {
    this.window.send();
    return this.call('health', subscriptions);
  }
  probe(subscription: string, now: number, until: number): Promise<boolean> {
    this.window.send();
    return this.call('probe', subscription, now, until);
  }
  attempts(subscription: string, q: { status?: StatusFilter; limit: number; skip: number }) {
    this.window.send();
    return this.call<{ items: AttemptRecord[]; total: number }>('attempts', subscription, q);
  }
  attempt(id: string): Promise<AttemptRecord | undefined> {
    this.window.send();
    return this.call('attempt', id);
  }
  attemptsOfEvent(owner: string, eventId: string): Promise<AttemptRecord[]> {
    this.window.send();
    return this.call('attemptsOfEvent', owner, eventId);
  }
  onEnqueue(listener: () => void): () => void {
    this.emitter.on('enqueue', listener);
    return () => this.emitter.off('enqueue', listener);
  }
  async close(): Promise<void> {
    this.window.send();
    await this.thread.stop((channel) => channel.call('store', 'close', []));
    this.emitter.removeAllListeners();
  }
}

// The thread of a ThreadedDeliveryStore: the SQLite store, answering the calls posted to it.
if (!isMainThread && workerData?.deliveryStore) {
  const { path, retentionMs } = workerData.deliveryStore as { path: string; retentionMs: number };
  const store = new SqliteDeliveryStore(path, { retentionMs });
  const channel = new ThreadChannel(parentPort!);
  channel.serve('store', store, THREAD_METHODS);
  store.onEnqueue(() => channel.send('events', 'enqueued', []));
}
