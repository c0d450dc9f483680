// Embedded read store on disk: the read models in the derived-state file (infra/sqlite.ts), so a
// start resumes each projection from its checkpoint instead of rebuilding it from the whole event
// store, and memory holds SQLite's page cache, not the fleet. A document is a row per field (a
// Redis hash's shape), so a patch writes only its fields, without reading the document back; an
// index is a row per member with a (score, member) index. A batch of writes and its checkpoint
// commit in one transaction.
import type { StatementSync } from 'node:sqlite';
import type { DerivedDatabase } from '../sqlite.ts';
import { InProcessReadStore } from './memory.ts';
import type { ApplyOutcome, Checkpoint, Doc, RangeOptions, ReadStore, Write } from './port.ts';

const MIGRATIONS = [
  `CREATE TABLE rm_generations (
     gen        INTEGER PRIMARY KEY,
     projection TEXT    NOT NULL,
     generation INTEGER NOT NULL,
     position   INTEGER NOT NULL DEFAULT 0,
     created    INTEGER NOT NULL DEFAULT 0,
     UNIQUE (projection, generation)
   ) STRICT;
   CREATE TABLE rm_projections (
     projection    TEXT PRIMARY KEY,
     active        INTEGER NOT NULL DEFAULT 1,
     replay_target INTEGER
   ) STRICT;
   CREATE TABLE rm_fields (
     gen   INTEGER NOT NULL,
     key   TEXT    NOT NULL,
     field TEXT    NOT NULL,
     value TEXT    NOT NULL,
     PRIMARY KEY (gen, key, field)
   ) STRICT, WITHOUT ROWID;
   CREATE TABLE rm_index (
     gen    INTEGER NOT NULL,
     key    TEXT    NOT NULL,
     member TEXT    NOT NULL,
     score  REAL    NOT NULL,
     PRIMARY KEY (gen, key, member)
   ) STRICT, WITHOUT ROWID;
   CREATE INDEX rm_index_by_score ON rm_index (gen, key, score, member);`,
];

/** Score bounds as SQLite takes them: Infinity binds as a REAL infinity. */
const bound = (n: number | undefined, fallback: number) => (n === undefined ? fallback : n);

export class SqliteReadStore extends InProcessReadStore implements ReadStore {
  readonly kind = 'sqlite';
  private readonly d: DerivedDatabase;
  /** `projection:generation` → the generation's row id (a handful: one per projection and replay). */
  private readonly gens = new Map<string, number>();
  private readonly active = new Map<string, number>();
  private readonly sql: Record<string, StatementSync>;

  constructor(derived: DerivedDatabase) {
    super();
    this.d = derived;
    derived.migrate('readstore', MIGRATIONS);
    const db = derived.db;
    const prepare = (sql: string) => db.prepare(sql);
    this.sql = {
      genId: prepare('SELECT gen FROM rm_generations WHERE projection = ? AND generation = ?'),
      newGen: prepare('INSERT INTO rm_generations (projection, generation) VALUES (?, ?) RETURNING gen'),
      checkpoint: prepare('SELECT position, created FROM rm_generations WHERE gen = ?'),
      setCheckpoint: prepare('UPDATE rm_generations SET position = ?, created = ? WHERE gen = ?'),
      active: prepare('SELECT active, replay_target FROM rm_projections WHERE projection = ?'),
      activate: prepare(
        'INSERT INTO rm_projections (projection, active) VALUES (?, ?) ON CONFLICT (projection) DO UPDATE SET active = excluded.active',
      ),
      setTarget: prepare(
        'INSERT INTO rm_projections (projection, replay_target) VALUES (?, ?) ON CONFLICT (projection) DO UPDATE SET replay_target = excluded.replay_target',
      ),
      fields: prepare('SELECT field, value FROM rm_fields WHERE gen = ? AND key = ?'),
      incr: prepare(
        `INSERT INTO rm_fields (gen, key, field, value) VALUES (?1, ?2, ?3, CAST(?4 AS TEXT))
         ON CONFLICT (gen, key, field) DO UPDATE SET value = CAST(CAST(value AS INTEGER) + ?4 AS TEXT)`,
      ),
      setField: prepare(
        'INSERT INTO rm_fields (gen, key, field, value) VALUES (?, ?, ?, ?) ON CONFLICT (gen, key, field) DO UPDATE SET value = excluded.value',
      ),
      delField: prepare('DELETE FROM rm_fields WHERE gen = ? AND key = ? AND field = ?'),
      delDoc: prepare('DELETE FROM rm_fields WHERE gen = ? AND key = ?'),
      delIndex: prepare('DELETE FROM rm_index WHERE gen = ? AND key = ?'),
      zadd: prepare(
        'INSERT INTO rm_index (gen, key, member, score) VALUES (?, ?, ?, ?) ON CONFLICT (gen, key, member) DO UPDATE SET score = excluded.score',
      ),
      zrem: prepare('DELETE FROM rm_index WHERE gen = ? AND key = ? AND member = ?'),
      range: prepare(
        'SELECT member FROM rm_index WHERE gen = ? AND key = ? AND score >= ? AND score <= ? ORDER BY score, member LIMIT ? OFFSET ?',
      ),
      rangeReverse: prepare(
        'SELECT member FROM rm_index WHERE gen = ? AND key = ? AND score >= ? AND score <= ? ORDER BY score DESC, member DESC LIMIT ? OFFSET ?',
      ),
      count: prepare(
        'SELECT count(*) AS n FROM rm_index WHERE gen = ? AND key = ? AND score >= ? AND score <= ?',
      ),
      dumpFields: prepare('SELECT key, field, value FROM rm_fields WHERE gen = ? ORDER BY key, field'),
      dumpIndex: prepare('SELECT key, member, score FROM rm_index WHERE gen = ? ORDER BY key, score, member'),
      dropFields: prepare('DELETE FROM rm_fields WHERE gen = ?'),
      dropIndex: prepare('DELETE FROM rm_index WHERE gen = ?'),
      dropGen: prepare('DELETE FROM rm_generations WHERE gen = ?'),
      countKeys: prepare(
        'SELECT (SELECT count(DISTINCT key) FROM rm_fields WHERE gen = ?) + (SELECT count(DISTINCT key) FROM rm_index WHERE gen = ?) AS n',
      ),
    };
  }

  /** The generation's row id; created (with checkpoint 0) when `create`, else undefined if none. */
  private gen(projection: string, generation: number, create: true): number;
  private gen(projection: string, generation: number, create?: false): number | undefined;
  private gen(projection: string, generation: number, create = false): number | undefined {
    const id = `${projection}:${generation}`;
    const known = this.gens.get(id);
    if (known !== undefined) return known;
    const row = this.sql.genId!.get(projection, generation) as { gen: number } | undefined;
    if (row) {
      this.gens.set(id, row.gen);
      return row.gen;
    }
    if (!create) return undefined;
    const { gen } = this.sql.newGen!.get(projection, generation) as { gen: number };
    this.gens.set(id, gen);
    return gen;
  }

  async activeGeneration(projection: string): Promise<number> {
    let active = this.active.get(projection);
    if (active === undefined) {
      const row = this.sql.active!.get(projection) as { active: number } | undefined;
      active = row?.active ?? 1;
      this.active.set(projection, active);
    }
    return active;
  }

  async activate(projection: string, generation: number): Promise<void> {
    this.sql.activate!.run(projection, generation);
    this.active.set(projection, generation);
  }

  async checkpoint(projection: string, generation: number): Promise<Checkpoint> {
    const gen = this.gen(projection, generation);
    if (gen === undefined) return { position: 0, created: 0 };
    const row = this.sql.checkpoint!.get(gen) as Checkpoint | undefined;
    return { position: row?.position ?? 0, created: row?.created ?? 0 };
  }

  async apply(
    projection: string,
    generation: number,
    writes: Write[],
    from: number,
    to: Checkpoint,
    onlyIfActive: boolean,
  ): Promise<ApplyOutcome> {
    if (onlyIfActive && (await this.activeGeneration(projection)) !== generation) return 'inactive';
    const outcome = this.d.transaction((): ApplyOutcome => {
      const gen = this.gen(projection, generation, true);
      const cp = this.sql.checkpoint!.get(gen) as { position: number };
      if (cp.position !== from) return 'moved';
      for (const w of writes) this.write(gen, w);
      this.sql.setCheckpoint!.run(to.position, to.created, gen);
      return 'ok';
    });
    if (outcome === 'ok') this.events.emit('checkpoint', projection, generation, to.position);
    return outcome;
  }

  private write(gen: number, w: Write): void {
    const s = this.sql;
    switch (w.op) {
      case 'set':
        s.delDoc!.run(gen, w.key);
        s.delIndex!.run(gen, w.key);
        for (const [f, v] of Object.entries(w.doc)) {
          if (v !== null && v !== undefined) s.setField!.run(gen, w.key, f, JSON.stringify(v));
        }
        return;
      case 'patch':
        for (const [f, v] of Object.entries(w.doc)) {
          if (v === null || v === undefined) s.delField!.run(gen, w.key, f);
          else s.setField!.run(gen, w.key, f, JSON.stringify(v));
        }
        return;
      case 'del':
        s.delDoc!.run(gen, w.key);
        s.delIndex!.run(gen, w.key);
        return;
      case 'incr':
        s.incr!.run(gen, w.key, w.field, w.by);
        return;
      case 'zadd':
        s.zadd!.run(gen, w.key, w.member, w.score);
        return;
      case 'zrem':
        s.zrem!.run(gen, w.key, w.member);
        return;
    }
  }

  async get(projection: string, generation: number, key: string): Promise<Doc | undefined> {
    const gen = this.gen(projection, generation);
    if (gen === undefined) return undefined;
    const rows = this.sql.fields!.all(gen, key) as { field: string; value: string }[];
    if (rows.length === 0) return undefined;
    const doc: Doc = {};
    for (const { field, value } of rows) doc[field] = JSON.parse(value);
    return doc;
  }

  async range(projection: string, generation: number, key: string, o: RangeOptions = {}): Promise<string[]> {
    const gen = this.gen(projection, generation);
    if (gen === undefined) return [];
    const limit = o.limit === undefined || o.limit === Infinity ? -1 : o.limit;
    const rows = (o.reverse ? this.sql.rangeReverse! : this.sql.range!).all(
      gen,
      key,
      bound(o.min, -Infinity),
      bound(o.max, Infinity),
      limit,
      o.offset ?? 0,
    ) as { member: string }[];
    return rows.map((r) => r.member);
  }

  async count(
    projection: string,
    generation: number,
    key: string,
    min = -Infinity,
    max = Infinity,
  ): Promise<number> {
    const gen = this.gen(projection, generation);
    if (gen === undefined) return 0;
    return (this.sql.count!.get(gen, key, min, max) as { n: number }).n;
  }

  async dump(projection: string, generation: number): Promise<Record<string, unknown>> {
    const gen = this.gen(projection, generation);
    if (gen === undefined) return {};
    const docs = new Map<string, Doc>();
    for (const r of this.sql.dumpFields!.iterate(gen) as Iterable<{
      key: string;
      field: string;
      value: string;
    }>) {
      let doc = docs.get(r.key);
      if (!doc) {
        doc = {};
        docs.set(r.key, doc);
      }
      doc[r.field] = JSON.parse(r.value);
    }
    const indexes = new Map<string, [string, number][]>();
    for (const r of this.sql.dumpIndex!.iterate(gen) as Iterable<{
      key: string;
      member: string;
      score: number;
    }>) {
      let index = indexes.get(r.key);
      if (!index) {
        index = [];
        indexes.set(r.key, index);
      }
      index.push([r.member, r.score]);
    }
    const out: Record<string, unknown> = {};
    for (const key of [...docs.keys(), ...indexes.keys()].sort())
      out[key] = docs.get(key) ?? indexes.get(key);
    return out;
  }

  async drop(projection: string, generation: number): Promise<number> {
    const gen = this.gen(projection, generation);
    if (gen === undefined) return 0;
    const n = (this.sql.countKeys!.get(gen, gen) as { n: number }).n;
    this.d.transaction(() => {
      this.sql.dropFields!.run(gen);
      this.sql.dropIndex!.run(gen);
      this.sql.dropGen!.run(gen);
    });
    this.gens.delete(`${projection}:${generation}`);
    return n;
  }

  async replayTarget(projection: string): Promise<number | undefined> {
    const row = this.sql.active!.get(projection) as { replay_target: number | null } | undefined;
    return row?.replay_target ?? undefined;
  }

  async setReplayTarget(projection: string, generation: number | undefined): Promise<void> {
    this.sql.setTarget!.run(projection, generation ?? null);
  }
}
