// SQLite checkpoints on a thread of their own. In WAL mode every commit appends pages to the
// log, and a checkpoint copies them back into the database file and syncs it. Left to SQLite, the
// connection that commits does this itself every 1,000 pages, and the commit that triggers it
// waits for the copy and the sync (for the delivery schedule, a quarter of its thread's time and
// stalls of tens of ms). Here a thread of its own checkpoints the files registered with it
// several times a second, beside their writers (a passive checkpoint never blocks them); their own
// connections keep a far larger threshold as a backstop, should this thread fall behind.
import { DatabaseSync } from 'node:sqlite';
import { isMainThread, parentPort, Worker, workerData } from 'node:worker_threads';

/** How often the files are checkpointed, ms. */
const EVERY_MS = 200;
/** The writers' own threshold, pages (4 KB each): reached only if this thread falls behind. */
export const BACKSTOP_PAGES = 10_000;
/** How long a writer's statement waits for a file another connection holds, ms. */
export const BUSY_TIMEOUT_MS = 5000;

let thread: Worker | undefined;
const watched = new Map<string, number>();
/** Unwatches sent to the thread and not yet done: resolved once its connection is closed. */
const letGo = new Map<string, (() => void)[]>();

/** Checkpoints `path` from now on, until `unwatch` is called as often as `watch` (an in-memory
 * database, which has no log, is left alone). */
export function watch(path: string): void {
  if (path === ':memory:') return;
  watched.set(path, (watched.get(path) ?? 0) + 1);
  if (watched.get(path) !== 1) return;
  if (thread) thread.postMessage({ watch: path });
  else start(); // a new thread is sent every file watched
}

/** Stops checkpointing `path` once `unwatch` has been called as often as `watch`. Resolves when
 * this thread's connection to the file is closed: a writer awaits it before closing its own, so
 * that the last connection, which checkpoints the log and removes it, is the writer's and a store
 * reopened at once on the same file does not find it locked. */
export function unwatch(path: string): Promise<void> {
  if (path === ':memory:') return Promise.resolve();
  const n = (watched.get(path) ?? 0) - 1;
  if (n > 0) {
    watched.set(path, n);
    return Promise.resolve();
  }
  watched.delete(path);
  if (!thread) return Promise.resolve();
  thread.postMessage({ unwatch: path });
  thread.ref(); // the caller waits on this thread's answer: the process stays up for it
  return new Promise((resolve) => {
    const waiting = letGo.get(path) ?? [];
    waiting.push(resolve);
    letGo.set(path, waiting);
  });
}

/** One unwatch of `path` answered (the thread answers each in order), or all when it is gone. */
function release(path?: string): void {
  if (path !== undefined) {
    const waiting = letGo.get(path);
    waiting?.shift()?.();
    if (waiting?.length === 0) letGo.delete(path);
  } else {
    for (const waiting of letGo.values()) for (const resolve of waiting) resolve();
    letGo.clear();
  }
  if (letGo.size === 0) thread?.unref();
}

function start(): void {
  const worker = new Worker(new URL(import.meta.url), { workerData: { checkpointer: true } });
  worker.unref(); // checkpoints never keep the process alive
  // If the thread dies, the writers checkpoint at their backstop until the next watch starts a
  // new one, which takes every file watched.
  worker.on('error', (err) => process.emitWarning(`SQLite checkpointer stopped: ${err.message}`));
  for (const path of watched.keys()) worker.postMessage({ watch: path });
  worker.on('message', (m: { unwatched: string }) => release(m.unwatched));
  worker.on('exit', () => {
    if (thread === worker) thread = undefined;
    release(); // a thread gone holds no connection
  });
  thread = worker;
}

// The thread: one connection per file, a passive checkpoint of each every EVERY_MS.
if (!isMainThread && workerData?.checkpointer) {
  const dbs = new Map<string, DatabaseSync>();
  parentPort!.on('message', (m: { watch?: string; unwatch?: string }) => {
    if (m.watch && !dbs.has(m.watch)) {
      try {
        dbs.set(m.watch, new DatabaseSync(m.watch));
      } catch {
        // Gone before this thread got to it (closed and removed): nothing to checkpoint.
      }
    }
    if (m.unwatch) {
      dbs.get(m.unwatch)?.close();
      dbs.delete(m.unwatch);
      parentPort!.postMessage({ unwatched: m.unwatch });
    }
  });
  setInterval(() => {
    for (const db of dbs.values()) {
      try {
        db.exec('PRAGMA wal_checkpoint(PASSIVE)');
      } catch {
        // A file being closed or busy: the next round, or the writer's backstop, takes it.
      }
    }
  }, EVERY_MS);
}
