// The embedded profile's file of derived state (`derived.sqlite` in HUB_DATA_DIR): read models,
// the account event log, the device actors' states and the processor's checkpoint, each adapter
// with tables of its own in the one file, so a follower's batch and its checkpoint commit in one
// transaction. Everything in it is derived from the event store: it is written with
// synchronous = NORMAL (a power loss may take its last commits, never its consistency, and a
// start derives again from the checkpoints it kept), and checkpointed on the WAL thread.
import { DatabaseSync } from 'node:sqlite';
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
  close(): Promise<void>;
}

/**
 * How long the derived state's transaction stays open, ms. Under the ingestion load, a commit per
 * turn of the event loop (hundreds a second) wrote the same hot pages (an owner's index, the event
 * totals) over and over, and their copies back cost the WAL checkpointer a fifth of a core.
 */
const COMMIT_EVERY_MS = 50;

export function openDerivedDatabase(path: string): DerivedDatabase {
  const db = new DatabaseSync(path, { timeout: BUSY_TIMEOUT_MS });
  try {
    db.exec(`PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;
             PRAGMA wal_autocheckpoint = ${BACKSTOP_PAGES}; PRAGMA cache_size = -16000;
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
  const commit = () => {
    committing = undefined;
    if (!db.isOpen || !db.isTransaction) return;
    try {
      db.exec('COMMIT');
    } catch (err) {
      // A full disk, an I/O error: the turn's writes go with their checkpoints, and followers find
      // their checkpoint moved back (they resume from it); a start resumes from what was committed.
      if (db.isTransaction) db.exec('ROLLBACK');
      process.emitWarning(`derived state not committed (${path}): ${(err as Error).message}`);
    }
  };
  const transaction = <T>(work: () => T): T => {
    if (!db.isTransaction) {
      db.exec('BEGIN IMMEDIATE');
      committing = setTimeout(commit, COMMIT_EVERY_MS);
    }
    const savepoint = `s${depth++}`;
    db.exec(`SAVEPOINT ${savepoint}`);
    try {
      const result = work();
      db.exec(`RELEASE ${savepoint}`);
      return result;
    } catch (err) {
      if (db.isTransaction) db.exec(`ROLLBACK TO ${savepoint}; RELEASE ${savepoint}`);
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
