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
  /** Runs `work` in one transaction (nested calls join the outer one). */
  transaction<T>(work: () => T): T;
  close(): Promise<void>;
}

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
  const transaction = <T>(work: () => T): T => {
    if (db.isTransaction) return work();
    db.exec('BEGIN IMMEDIATE');
    try {
      const result = work();
      db.exec('COMMIT');
      return result;
    } catch (err) {
      if (db.isTransaction) db.exec('ROLLBACK');
      throw err;
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
        await unwatch(path);
        db.close();
      })();
      return closing;
    },
  };
}
