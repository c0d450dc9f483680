// Embedded read store on disk: the read models in the derived-state file (infra/sqlite.ts), so a
// start resumes each projection from its checkpoint instead of rebuilding it from the whole event
// store, and memory holds SQLite's page cache, not the fleet. A document is one row, a JSON object
// whose values are each field's JSON text (a Redis hash's shape); an index is a row per member with
// a (score, member) index. A batch's index writes and its checkpoint go in the open transaction of
// the derived state at once; its documents are changed in memory and written once each when that
// transaction commits (HeldRows: a device's documents change with each of its events, several times
// a commit's window under ingestion), so reads look at the held documents first.
import type { StatementSync } from 'node:sqlite';
import { type DerivedDatabase, HeldRows } from '../sqlite.ts';
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
  // A row per document instead of a row per field: the stream catalog's patch of five fields was
  // five upserts for each event stored, a third of the derived state's cost under ingestion.
  `CREATE TABLE rm_docs (
     gen INTEGER NOT NULL,
     key TEXT    NOT NULL,
     doc TEXT    NOT NULL,
     PRIMARY KEY (gen, key)
   ) STRICT, WITHOUT ROWID;
   INSERT INTO rm_docs (gen, key, doc) SELECT gen, key, json_group_object(field, value) FROM rm_fields GROUP BY gen, key;
   DROP TABLE rm_fields;`,
];

/** A document's fields, each value as its JSON text; in a patch, null removes the field. */
type Fields = Map<string, string | null>;
/**
 * A document changed in the open transaction, written when it commits (HeldRows): the whole
 * document (set, del, or a patch of one), or a patch of the stored row. A patch needs no read of
 * the row: a device's documents under ingestion are patches, merged here and written by one
 * json_patch a commit.
 */
type HeldDoc = { gen: number; key: string; whole: boolean; fields: Fields };
const heldKey = (gen: number, key: string) => `${gen}:${key}`;

/** Lays `change` over `doc`, in place: a whole change replaces it, a patch's fields go over its. */
function layer(doc: HeldDoc, change: HeldDoc): void {
  if (change.whole) {
    doc.whole = true;
    doc.fields = change.fields;
    return;
  }
  for (const [f, v] of change.fields) {
    if (v === null && doc.whole) doc.fields.delete(f);
    else doc.fields.set(f, v);
  }
}

function decode(fields: Iterable<[string, string | null]>): Doc | undefined {
  const doc: Doc = {};
  let empty = true;
  for (const [f, v] of fields) {
    if (v === null) continue;
    doc[f] = JSON.parse(v);
    empty = false;
  }
  return empty ? undefined : doc;
}

/** Score bounds as SQLite takes them: Infinity binds as a REAL infinity. */
const bound = (n: number | undefined, fallback: number) => (n === undefined ? fallback : n);

export class SqliteReadStore extends InProcessReadStore implements ReadStore {
  readonly kind = 'sqlite';
  private readonly d: DerivedDatabase;
  /** `projection:generation` → the generation's row id (a handful: one per projection and replay). */
  private readonly gens = new Map<string, number>();
  private readonly active = new Map<string, number>();
  private readonly sql: Record<string, StatementSync>;
  private readonly docs: HeldRows<HeldDoc>;

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
      moveCheckpoint: prepare(
        'UPDATE rm_generations SET position = ?, created = ? WHERE gen = ? AND position = ?',
      ),
      active: prepare('SELECT active, replay_target FROM rm_projections WHERE projection = ?'),
      activate: prepare(
        'INSERT INTO rm_projections (projection, active) VALUES (?, ?) ON CONFLICT (projection) DO UPDATE SET active = excluded.active',
      ),
      setTarget: prepare(
        'INSERT INTO rm_projections (projection, replay_target) VALUES (?, ?) ON CONFLICT (projection) DO UPDATE SET replay_target = excluded.replay_target',
      ),
      doc: prepare('SELECT doc FROM rm_docs WHERE gen = ? AND key = ?'),
      putDoc: prepare(
        'INSERT INTO rm_docs (gen, key, doc) VALUES (?, ?, ?) ON CONFLICT (gen, key) DO UPDATE SET doc = excluded.doc',
      ),
      // json_patch drops the fields set to null (RFC 7396); a document left empty goes.
      patchDoc: prepare(
        `INSERT INTO rm_docs (gen, key, doc) VALUES (?1, ?2, json_patch('{}', ?3))
         ON CONFLICT (gen, key) DO UPDATE SET doc = json_patch(doc, ?3)`,
      ),
      delEmptyDoc: prepare(`DELETE FROM rm_docs WHERE gen = ? AND key = ? AND doc = '{}'`),
      delDoc: prepare('DELETE FROM rm_docs WHERE gen = ? AND key = ?'),
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
      dumpDocs: prepare('SELECT key, doc FROM rm_docs WHERE gen = ? ORDER BY key'),
      dumpIndex: prepare('SELECT key, member, score FROM rm_index WHERE gen = ? ORDER BY key, score, member'),
      dropDocs: prepare('DELETE FROM rm_docs WHERE gen = ?'),
      dropIndex: prepare('DELETE FROM rm_index WHERE gen = ?'),
      dropGen: prepare('DELETE FROM rm_generations WHERE gen = ?'),
      countKeys: prepare(
        'SELECT (SELECT count(*) FROM rm_docs WHERE gen = ?) + (SELECT count(DISTINCT key) FROM rm_index WHERE gen = ?) AS n',
      ),
    };
    this.docs = new HeldRows(derived, (_, doc) => this.writeHeld(doc));
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
    // The checkpoint moves only from where the writer found it: one statement that says whether it
    // did. A batch with nothing to write (most projections skip most events) is that statement alone.
    let gen = 0;
    const moveCheckpoint = () => {
      gen = this.gen(projection, generation, true);
      return Number(this.sql.moveCheckpoint!.run(to.position, to.created, gen, from).changes) === 1;
    };
    // What the batch changes of each document, held for the commit only once all of it succeeded.
    const changes = new Map<string, HeldDoc>();
    const outcome =
      writes.length === 0
        ? this.d.single(() => (moveCheckpoint() ? 'ok' : 'moved'))
        : this.d.transaction((): ApplyOutcome => {
            if (!moveCheckpoint()) return 'moved';
            for (const w of writes) this.write(gen, w, changes);
            return 'ok';
          });
    if (outcome === 'ok') {
      for (const [id, change] of changes) {
        const held = this.docs.get(id);
        if (held && !change.whole) layer(held, change);
        else this.docs.hold(id, change);
      }
      this.events.emit('checkpoint', projection, generation, to.position, writes.length > 0);
    }
    return outcome;
  }

  /** Indexes are written at once; documents change in `changes` (see HeldRows). */
  private write(gen: number, w: Write, changes: Map<string, HeldDoc>): void {
    const s = this.sql;
    switch (w.op) {
      case 'set': {
        s.delIndex!.run(gen, w.key);
        const fields: Fields = new Map();
        for (const [f, v] of Object.entries(w.doc))
          if (v !== null && v !== undefined) fields.set(f, JSON.stringify(v));
        changes.set(heldKey(gen, w.key), { gen, key: w.key, whole: true, fields });
        return;
      }
      case 'patch': {
        // A patched field is replaced, never merged into; a null removes it.
        const fields: Fields = new Map();
        for (const [f, v] of Object.entries(w.doc))
          fields.set(f, v === null || v === undefined ? null : JSON.stringify(v));
        this.change(gen, w.key, changes, { gen, key: w.key, whole: false, fields });
        return;
      }
      case 'del':
        s.delIndex!.run(gen, w.key);
        changes.set(heldKey(gen, w.key), { gen, key: w.key, whole: true, fields: new Map() });
        return;
      case 'incr': {
        // A counter's value is its digits' JSON text, as SQLite's CAST reads them.
        const now = this.field(gen, w.key, w.field, changes.get(heldKey(gen, w.key)));
        const fields: Fields = new Map([[w.field, String((Number.parseInt(now ?? '0', 10) || 0) + w.by)]]);
        this.change(gen, w.key, changes, { gen, key: w.key, whole: false, fields });
        return;
      }
      case 'zadd':
        s.zadd!.run(gen, w.key, w.member, w.score);
        return;
      case 'zrem':
        s.zrem!.run(gen, w.key, w.member);
        return;
    }
  }

  private change(gen: number, key: string, changes: Map<string, HeldDoc>, change: HeldDoc): void {
    const id = heldKey(gen, key);
    const before = changes.get(id);
    if (before) layer(before, change);
    else changes.set(id, change);
  }

  /** A field's JSON text as the batch's change, the held document and the stored row say. */
  private field(gen: number, key: string, field: string, change: HeldDoc | undefined): string | undefined {
    for (const doc of [change, this.docs.get(heldKey(gen, key))]) {
      if (!doc) continue;
      const v = doc.fields.get(field);
      if (v !== undefined || doc.fields.has(field) || doc.whole) return v ?? undefined;
    }
    return this.stored(gen, key)?.[field];
  }

  private stored(gen: number, key: string): Record<string, string> | undefined {
    const row = this.sql.doc!.get(gen, key) as { doc: string } | undefined;
    return row ? (JSON.parse(row.doc) as Record<string, string>) : undefined;
  }

  /** A held document as a row, one statement: replaced, patched (json_patch, RFC 7396: a null
   * removes a field) or, with no field left, gone. */
  private writeHeld(doc: HeldDoc): void {
    const { gen, key, fields } = doc;
    if (doc.whole) {
      if (fields.size === 0) this.sql.delDoc!.run(gen, key);
      else this.sql.putDoc!.run(gen, key, JSON.stringify(Object.fromEntries(fields)));
      return;
    }
    this.sql.patchDoc!.run(gen, key, JSON.stringify(Object.fromEntries(fields)));
    for (const v of fields.values()) {
      if (v === null) {
        this.sql.delEmptyDoc!.run(gen, key);
        return;
      }
    }
  }

  async get(projection: string, generation: number, key: string): Promise<Doc | undefined> {
    const gen = this.gen(projection, generation);
    if (gen === undefined) return undefined;
    const held = this.docs.get(heldKey(gen, key));
    if (held?.whole) return decode(held.fields);
    const stored = this.stored(gen, key);
    if (!held) return stored ? decode(Object.entries(stored)) : undefined;
    const fields: Fields = new Map(stored ? Object.entries(stored) : []);
    layer({ gen, key, whole: true, fields }, held);
    return decode(fields);
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
    this.docs.flush();
    const docs = new Map<string, Doc>();
    for (const r of this.sql.dumpDocs!.iterate(gen) as Iterable<{ key: string; doc: string }>) {
      const doc = decode(Object.entries(JSON.parse(r.doc) as Record<string, string>));
      if (doc) docs.set(r.key, doc);
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
    this.docs.flush();
    const n = (this.sql.countKeys!.get(gen, gen) as { n: number }).n;
    this.d.transaction(() => {
      this.sql.dropDocs!.run(gen);
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
