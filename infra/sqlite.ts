// The embedded profile's file of derived state (`derived.sqlite` in HUB_DATA_DIR): read models,
// the account event log, the device actors' states and the processor's checkpoint, each adapter
// with tables of its own in the one file, so a follower's batch and its checkpoint commit in one
// transaction. Everything in it is derived from the event store: it is written with
// synchronous = NORMAL (a power loss may take its last commits, never its consistency, and a
// start derives again from the checkpoints it kept), and checkpointed on the WAL thread.
import { DatabaseSync, type StatementSync } from 'node:sqlite';
import { BACKSTOP_PAGES, BUSY_TIMEOUT_MS, unwatch, watch } from './checkpointer.ts';

export interface DerivedDatabase {
  readonly db: DatabaseSync;
  readonly path: string;
  /** Applies a component's migrations not yet applied, each once, in order. */
  migrate(component: string, migrations: string[]): void;
  /**
   * Runs `work` all or nothing (a savepoint) in the open transaction, which commits COMMIT_EVERY_MS
   * after it began: every follower's batch of that time (each projection, the event log, the
   * actors' states) and its checkpoint commit together, a page that many batches change written
   * once. A crash before the commit loses those writes with their checkpoints: the next start
   * derives them again. The connection reads its own writes at once.
   */
  transaction<T>(work: () => T): T;
  /** Runs `work`, one statement (all or nothing by itself), in the open transaction: no savepoint. */
  single<T>(work: () => T): T;
  /** Rows a component holds back for the commit (HeldRows): `flush` writes them just before it,
   * in the transaction; `discard` forgets them when the transaction rolls back instead. */
  beforeCommit(held: { flush(): void; discard(): void }): void;
  close(): Promise<void>;
}

/**
 * How long the derived state's transaction stays open, ms. A commit writes every page its window
 * changed to the log: under device-meta ingestion a window's events touch most of the fleet's pages
 * (each device's documents, its stream record, its actor's state) whatever its length, so fewer,
 * longer windows write each page fewer times. A commit per turn of the event loop cost the WAL
 * checkpointer a fifth of a core; one every 50 ms still spent 10 % of the main thread in COMMIT
 * at 5,000 requests/s, one every 500 ms 4 %. A crash loses at most this much derived work, which
 * the next start derives again from the checkpoints committed with it.
 */
const COMMIT_EVERY_MS = 500;

/** `log`: told when a file written by an earlier version is upgraded (the migrations of a
 * component that had some applied), before and after. */
export function openDerivedDatabase(path: string, log?: (message: string) => void): DerivedDatabase {
  const db = new DatabaseSync(path, { timeout: BUSY_TIMEOUT_MS });
  try {
    // temp_store = MEMORY: a batch's savepoint journals the old images of the pages it changes
    // again in the open transaction, and past 64 KiB SQLite spilled them to a temp file: under a
    // steady 500 writes/s about 5,800 writes a second to such files on the main thread.
    db.exec(`PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
             PRAGMA wal_autocheckpoint = ${BACKSTOP_PAGES}; PRAGMA cache_size = -16000;
             PRAGMA temp_store = MEMORY;
             CREATE TABLE IF NOT EXISTS migrations (component TEXT PRIMARY KEY, version INTEGER NOT NULL) STRICT;`);
  } catch (err) {
    db.close();
    throw err;
  }
  watch(path);
  const version = db.prepare('SELECT version FROM migrations WHERE component = ?');
  const setVersion = db.prepare(
    'INSERT INTO migrations (component, version) VALUES (?, ?) ON CONFLICT (component) DO UPDATE SET version = excluded.version',
  );
  let closing: Promise<void> | undefined;
  let depth = 0;
  let committing: NodeJS.Timeout | undefined;
  const held: { flush(): void; discard(): void }[] = [];
  // Prepared once: a follower's batch opens a savepoint, and compiling its statement at each
  // batch cost more than the savepoint (batches of a few events, several followers a turn).
  const statement = new Map<string, StatementSync>();
  const run = (sql: string) => {
    let s = statement.get(sql);
    if (!s) {
      s = db.prepare(sql);
      statement.set(sql, s);
    }
    s.run();
  };
  /** The held rows of a transaction that ended without its commit: SQLite rolls the whole
   * transaction back by itself on some errors (I/O, a full disk, no memory), with the checkpoints
   * moved in it, so those rows must not go into the next. */
  const forgetHeld = () => {
    for (const h of held) h.discard();
  };
  const commit = () => {
    committing = undefined;
    if (!db.isOpen) return;
    if (!db.isTransaction) return forgetHeld();
    try {
      for (const h of held) h.flush();
      run('COMMIT');
    } catch (err) {
      // A full disk, an I/O error: the turn's writes go with their checkpoints, and followers find
      // their checkpoint moved back (they resume from it); a start resumes from what was committed.
      forgetHeld();
      if (db.isTransaction) run('ROLLBACK');
      process.emitWarning(`derived state not committed (${path}): ${(err as Error).message}`);
    }
  };
  const begun = () => {
    if (!db.isTransaction) {
      // A commit still due: the last transaction ended without it.
      if (committing) {
        clearTimeout(committing);
        committing = undefined;
        forgetHeld();
      }
      run('BEGIN IMMEDIATE');
      committing = setTimeout(commit, COMMIT_EVERY_MS);
    }
  };
  const transaction = <T>(work: () => T): T => {
    begun();
    const savepoint = `s${depth++}`;
    run(`SAVEPOINT ${savepoint}`);
    try {
      const result = work();
      run(`RELEASE ${savepoint}`);
      return result;
    } catch (err) {
      if (db.isTransaction) {
        run(`ROLLBACK TO ${savepoint}`);
        run(`RELEASE ${savepoint}`);
      }
      throw err;
    } finally {
      depth--;
    }
  };
  return {
    db,
    path,
    migrate(component, migrations) {
      const at = (version.get(component) as { version: number } | undefined)?.version ?? 0;
      const upgrade = at > 0 && at < migrations.length;
      const started = Date.now();
      if (upgrade) log?.(`derived state: upgrading ${component} from version ${at} to ${migrations.length}`);
      for (let v = at; v < migrations.length; v++) {
        transaction(() => {
          db.exec(migrations[v]!);
          setVersion.run(component, v + 1);
        });
      }
      if (upgrade) log?.(`derived state: ${component} upgraded in ${Date.now() - started} ms`);
    },
    transaction,
    single(work) {
      begun();
      return work();
    },
    beforeCommit(h) {
      held.push(h);
    },
    close() {
      closing ??= (async () => {
        if (!db.isOpen) return;
        if (committing) clearTimeout(committing);
        commit();
        await unwatch(path);
        db.close();
      })();
      return closing;
    },
  };
}

/**
 * Rows a component rewrites many times in one transaction, held in memory and written once each
 * just before it commits. Under device-meta ingestion a device's documents and its actor's state
 * change with each of its events, several times in a commit's window (COMMIT_EVERY_MS): written at
 * every batch, SQLite merged, encoded and rewrote the same row each time. The commit makes the same
 * state durable either way, with the checkpoints moved in the same window, and a rollback forgets
 * both. The component reads its held rows before the table's (`get`), and writes them out before
 * reading the table directly (`flush`).
 */
export class HeldRows<V> {
  private readonly derived: DerivedDatabase;
  private readonly write: (key: string, value: V) => void;
  private rows = new Map<string, V>();

  constructor(derived: DerivedDatabase, write: (key: string, value: V) => void) {
    this.derived = derived;
    this.write = write;
    derived.beforeCommit({
      flush: () => this.flush(),
      discard: () => {
        this.rows = new Map();
      },
    });
  }

  get(key: string): V | undefined {
    return this.rows.get(key);
  }

  /** Holds a row for the open transaction's commit: one of a batch whose statements (its
   * checkpoint's move) succeeded in it. */
  hold(key: string, value: V): void {
    if (!this.derived.db.isTransaction) throw new Error('rows are held only for an open transaction');
    this.rows.set(key, value);
  }

  /** Writes the held rows now, in the open transaction. Should a write fail, they stay held (each
   * row written is a whole row, written again the same). */
  flush(): void {
    const rows = this.rows;
    this.rows = new Map();
    try {
      for (const [key, value] of rows) this.write(key, value);
    } catch (err) {
      this.rows = rows;
      throw err;
    }
  }
}
