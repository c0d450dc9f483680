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

export function openDerivedDatabase(path: string): DerivedDatabase {
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
  const commit = () => {
    committing = undefined;
    if (!db.isOpen || !db.isTransaction) return;
    try {
      run('COMMIT');
    } catch (err) {
      // A full disk, an I/O error: the turn's writes go with their checkpoints, and followers find
      // their checkpoint moved back (they resume from it); a start resumes from what was committed.
      if (db.isTransaction) run('ROLLBACK');
      process.emitWarning(`derived state not committed (${path}): ${(err as Error).message}`);
    }
  };
  const begun = () => {
    if (!db.isTransaction) {
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
      for (let v = at; v < migrations.length; v++) {
        transaction(() => {
          db.exec(migrations[v]!);
          setVersion.run(component, v + 1);
        });
      }
    },
    transaction,
    single(work) {
      begun();
      return work();
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
