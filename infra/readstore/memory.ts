// Embedded read store: plain maps in this process. Applies are synchronous, so a batch and its
// checkpoint are atomic by construction. Nothing is persisted: at start the projection runner
// rebuilds every read model from the event store.
import { EventEmitter } from 'node:events';
import type { ApplyOutcome, Checkpoint, Doc, RangeOptions, ReadStore, Write } from './port.ts';

type Value = Map<string, string> | SortedIndex;

interface Generation {
  data: Map<string, Value>;
  checkpoint: Checkpoint;
}

export class MemoryReadStore implements ReadStore {
  readonly kind = 'memory';
  private readonly generations = new Map<string, Generation>();
  private readonly active = new Map<string, number>();
  private readonly targets = new Map<string, number>();
  private readonly locks = new Map<string, { owner: string; until: number }>();
  private readonly events = new EventEmitter();

  constructor() {
    this.events.setMaxListeners(0);
  }

  private gen(projection: string, generation: number): Generation {
    const id = `${projection}:${generation}`;
    let g = this.generations.get(id);
    if (!g) {
      g = { data: new Map(), checkpoint: { position: 0, created: 0 } };
      this.generations.set(id, g);
    }
    return g;
  }

  async activeGeneration(projection: string): Promise<number> {
    return this.active.get(projection) ?? 1;
  }

  async activate(projection: string, generation: number): Promise<void> {
    this.active.set(projection, generation);
  }

  async checkpoint(projection: string, generation: number): Promise<Checkpoint> {
    return { ...this.gen(projection, generation).checkpoint };
  }

  async apply(
    projection: string,
    generation: number,
    writes: Write[],
    from: number,
    to: Checkpoint,
    onlyIfActive: boolean,
  ): Promise<ApplyOutcome> {
    const g = this.gen(projection, generation);
    if (onlyIfActive && (this.active.get(projection) ?? 1) !== generation) return 'inactive';
    if (g.checkpoint.position !== from) return 'moved';
    for (const w of writes) applyWrite(g.data, w);
    g.checkpoint = { ...to };
    this.events.emit('checkpoint', projection, generation, to.position);
    return 'ok';
  }

  async get(projection: string, generation: number, key: string): Promise<Doc | undefined> {
    const v = this.gen(projection, generation).data.get(key);
    if (!(v instanceof Map)) return undefined;
    return Object.fromEntries([...v].map(([f, json]) => [f, JSON.parse(json)]));
  }

  async range(projection: string, generation: number, key: string, o: RangeOptions = {}): Promise<string[]> {
    const v = this.gen(projection, generation).data.get(key);
    if (!v || v instanceof Map) return [];
    let entries = v.order.filter((e) => e.score >= (o.min ?? -Infinity) && e.score <= (o.max ?? Infinity));
    if (o.reverse) entries = entries.slice().reverse();
    const offset = o.offset ?? 0;
    return entries.slice(offset, o.limit === undefined ? undefined : offset + o.limit).map((e) => e.member);
  }

  async count(
    projection: string,
    generation: number,
    key: string,
    min = -Infinity,
    max = Infinity,
  ): Promise<number> {
    const v = this.gen(projection, generation).data.get(key);
    if (!v || v instanceof Map) return 0;
    return v.order.filter((e) => e.score >= min && e.score <= max).length;
  }

  async dump(projection: string, generation: number): Promise<Record<string, unknown>> {
    const data = this.gen(projection, generation).data;
    const out: Record<string, unknown> = {};
    for (const key of [...data.keys()].sort()) {
      const v = data.get(key)!;
      out[key] =
        v instanceof Map
          ? Object.fromEntries([...v.keys()].sort().map((f) => [f, JSON.parse(v.get(f)!)]))
          : v.order.map((e) => [e.member, e.score]);
    }
    return out;
  }

  async drop(projection: string, generation: number): Promise<number> {
    const id = `${projection}:${generation}`;
    const n = this.generations.get(id)?.data.size ?? 0;
    this.generations.delete(id);
    return n;
  }

  async replayTarget(projection: string): Promise<number | undefined> {
    return this.targets.get(projection);
  }

  async setReplayTarget(projection: string, generation: number | undefined): Promise<void> {
    if (generation === undefined) this.targets.delete(projection);
    else this.targets.set(projection, generation);
  }

  async lock(name: string, owner: string, ttlMs: number): Promise<boolean> {
    const held = this.locks.get(name);
    if (held && held.owner !== owner && held.until > Date.now()) return false;
    this.locks.set(name, { owner, until: Date.now() + ttlMs });
    return true;
  }

  async unlock(name: string, owner: string): Promise<void> {
    if (this.locks.get(name)?.owner === owner) this.locks.delete(name);
  }

  onCheckpoint(listener: (projection: string, generation: number, position: number) => void): () => void {
    this.events.on('checkpoint', listener);
    return () => this.events.off('checkpoint', listener);
  }

  async close(): Promise<void> {
    this.events.removeAllListeners();
  }
}

/** The document at a key, created empty when there is none (or an index stood there). */
function docAt(data: Map<string, Value>, key: string): Map<string, string> {
  let doc = data.get(key);
  if (!(doc instanceof Map)) {
    doc = new Map();
    data.set(key, doc);
  }
  return doc;
}

function applyWrite(data: Map<string, Value>, w: Write): void {
  switch (w.op) {
    case 'set': {
      const fields = Object.entries(w.doc).filter(([, v]) => v !== null && v !== undefined);
      if (fields.length === 0) data.delete(w.key);
      else data.set(w.key, new Map(fields.map(([f, v]) => [f, JSON.stringify(v)])));
      return;
    }
    case 'patch': {
      const doc = docAt(data, w.key);
      for (const [f, v] of Object.entries(w.doc)) {
        if (v === null || v === undefined) doc.delete(f);
        else doc.set(f, JSON.stringify(v));
      }
      if (doc.size === 0) data.delete(w.key);
      return;
    }
    case 'del':
      data.delete(w.key);
      return;
    case 'incr': {
      const doc = docAt(data, w.key);
      doc.set(w.field, String(Number(doc.get(w.field) ?? 0) + w.by));
      return;
    }
    case 'zadd': {
      let index = data.get(w.key);
      if (!index || index instanceof Map) {
        index = { scores: new Map(), order: [] };
        data.set(w.key, index);
      }
      sortedInsert(index, w.member, w.score);
      return;
    }
    case 'zrem': {
      const index = data.get(w.key);
      if (!index || index instanceof Map) return;
      sortedRemove(index, w.member);
      if (index.order.length === 0) data.delete(w.key);
      return;
    }
  }
}

/** A sorted index like Redis's sorted set: members ordered by (score, member). */
interface SortedIndex {
  scores: Map<string, number>;
  /** Members in (score, member) order. */
  order: { score: number; member: string }[];
}

function compareEntries(a: { score: number; member: string }, b: { score: number; member: string }): number {
  return a.score - b.score || (a.member < b.member ? -1 : a.member > b.member ? 1 : 0);
}

function sortedInsert(index: SortedIndex, member: string, score: number): void {
  const previous = index.scores.get(member);
  if (previous !== undefined) {
    if (previous === score) return;
    sortedRemove(index, member);
  }
  index.scores.set(member, score);
  const entry = { score, member };
  let lo = 0;
  let hi = index.order.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareEntries(index.order[mid]!, entry) < 0) lo = mid + 1;
    else hi = mid;
  }
  index.order.splice(lo, 0, entry);
}

function sortedRemove(index: SortedIndex, member: string): void {
  const score = index.scores.get(member);
  if (score === undefined) return;
  index.scores.delete(member);
  const entry = { score, member };
  let lo = 0;
  let hi = index.order.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (compareEntries(index.order[mid]!, entry) < 0) lo = mid + 1;
    else hi = mid;
  }
  index.order.splice(lo, 1);
}
