// Embedded read store: plain maps in this process. Applies are synchronous, so a batch and its
// checkpoint are atomic by construction. Nothing is persisted: at start the projection runner
// rebuilds every read model from the event store.
import { EventEmitter } from 'node:events';
import type {
  ApplyOutcome,
  Checkpoint,
  CheckpointListener,
  Doc,
  RangeOptions,
  ReadStore,
  Write,
} from './port.ts';

type Value = Map<string, string> | SortedIndex;

interface Generation {
  data: Map<string, Value>;
  checkpoint: Checkpoint;
}

/**
 * What the embedded read stores (memory, SQLite) do alike: one process holds them (the data dir's
 * lock), so leases and checkpoint notices live in that process.
 */
export abstract class InProcessReadStore {
  private readonly held = new Map<string, { owner: string; until: number }>();
  protected readonly events = new EventEmitter();

  constructor() {
    this.events.setMaxListeners(0);
  }

  async lock(name: string, owner: string, ttlMs: number): Promise<boolean> {
    const held = this.held.get(name);
    if (held && held.owner !== owner && held.until > Date.now()) return false;
    this.held.set(name, { owner, until: Date.now() + ttlMs });
    return true;
  }

  async unlock(name: string, owner: string): Promise<void> {
    if (this.held.get(name)?.owner === owner) this.held.delete(name);
  }

  async lockHolder(name: string): Promise<string | undefined> {
    const held = this.held.get(name);
    return held && held.until > Date.now() ? held.owner : undefined;
  }

  onCheckpoint(listener: CheckpointListener): () => void {
    this.events.on('checkpoint', listener);
    return () => this.events.off('checkpoint', listener);
  }

  async close(): Promise<void> {
    this.events.removeAllListeners();
  }
}

export class MemoryReadStore extends InProcessReadStore implements ReadStore {
  readonly kind = 'memory';
  private readonly generations = new Map<string, Generation>();
  private readonly active = new Map<string, number>();
  private readonly targets = new Map<string, number>();

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
    this.events.emit('checkpoint', projection, generation, to.position, writes.length > 0);
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
    return v.range(
      o.min ?? -Infinity,
      o.max ?? Infinity,
      o.reverse ?? false,
      o.offset ?? 0,
      o.limit ?? Infinity,
    );
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
    return v.count(min, max);
  }

  async dump(projection: string, generation: number): Promise<Record<string, unknown>> {
    const data = this.gen(projection, generation).data;
    const out: Record<string, unknown> = {};
    for (const key of [...data.keys()].sort()) {
      const v = data.get(key)!;
      out[key] =
        v instanceof Map
          ? Object.fromEntries([...v.keys()].sort().map((f) => [f, JSON.parse(v.get(f)!)]))
          : v.entries().map((e) => [e.member, e.score]);
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
        index = new SortedIndex();
        data.set(w.key, index);
      }
      index.insert(w.member, w.score);
      return;
    }
    case 'zrem': {
      const index = data.get(w.key);
      if (!index || index instanceof Map) return;
      index.remove(w.member);
      if (index.size === 0) data.delete(w.key);
      return;
    }
  }
}

/** A sorted index like Redis's sorted set: members ordered by (score, member), kept in chunks of
 * at most 2 × CHUNK sorted entries so that moving a member (a device's new update time) costs a
 * binary search and a small splice, not a shift of the whole index. */
const CHUNK = 256;

interface Entry {
  score: number;
  member: string;
}

/** A position in the index: entry `i` of chunk `c` (c = chunks.length at the end). */
interface At {
  c: number;
  i: number;
}

function compareEntries(a: Entry, b: Entry): number {
  return a.score - b.score || (a.member < b.member ? -1 : a.member > b.member ? 1 : 0);
}

/** First index in `list` for which `before(list[index])` is false (`list` sorted, `before` monotone). */
function partition<T>(list: T[], before: (x: T) => boolean): number {
  let lo = 0;
  let hi = list.length;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (before(list[mid]!)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

class SortedIndex {
  readonly scores = new Map<string, number>();
  private chunks: Entry[][] = [];

  get size(): number {
    return this.scores.size;
  }

  /** The first position whose entry is not `before`. */
  private seek(before: (e: Entry) => boolean): At {
    const c = partition(this.chunks, (chunk) => before(chunk[chunk.length - 1]!));
    return c === this.chunks.length ? { c, i: 0 } : { c, i: partition(this.chunks[c]!, before) };
  }

  insert(member: string, score: number): void {
    const previous = this.scores.get(member);
    if (previous === score) return;
    if (previous !== undefined) this.remove(member);
    this.scores.set(member, score);
    const entry = { score, member };
    if (this.chunks.length === 0) {
      this.chunks.push([entry]);
      return;
    }
    let { c, i } = this.seek((e) => compareEntries(e, entry) < 0);
    if (c === this.chunks.length) {
      c--;
      i = this.chunks[c]!.length;
    }
    const chunk = this.chunks[c]!;
    chunk.splice(i, 0, entry);
    if (chunk.length > 2 * CHUNK) this.chunks.splice(c, 1, chunk.slice(0, CHUNK), chunk.slice(CHUNK));
  }

  remove(member: string): void {
    const score = this.scores.get(member);
    if (score === undefined) return;
    this.scores.delete(member);
    const entry = { score, member };
    const { c, i } = this.seek((e) => compareEntries(e, entry) < 0);
    const chunk = this.chunks[c]!;
    chunk.splice(i, 1);
    if (chunk.length === 0) this.chunks.splice(c, 1);
  }

  private rank(at: At): number {
    let n = at.i;
    for (let c = 0; c < at.c; c++) n += this.chunks[c]!.length;
    return n;
  }

  /** How many members score within [min, max]. */
  count(min: number, max: number): number {
    if (min === -Infinity && max === Infinity) return this.size;
    return Math.max(
      0,
      this.rank(this.seek((e) => e.score <= max)) - this.rank(this.seek((e) => e.score < min)),
    );
  }

  /** Members scoring within [min, max], in order or reversed, skipping `offset`, at most `limit`. */
  range(min: number, max: number, reverse: boolean, offset: number, limit: number): string[] {
    const out: string[] = [];
    let skip = offset;
    if (!reverse) {
      let { c, i } = this.seek((e) => e.score < min);
      for (; c < this.chunks.length && out.length < limit; c++, i = 0) {
        const chunk = this.chunks[c]!;
        for (; i < chunk.length && out.length < limit; i++) {
          if (chunk[i]!.score > max) return out;
          if (skip > 0) skip--;
          else out.push(chunk[i]!.member);
        }
      }
      return out;
    }
    // Backwards from the last member scoring at most max.
    const end = this.seek((e) => e.score <= max);
    for (let c = end.c, i = end.i - 1; c >= 0 && out.length < limit; c--) {
      const chunk = this.chunks[c];
      for (; chunk && i >= 0 && out.length < limit; i--) {
        if (chunk[i]!.score < min) return out;
        if (skip > 0) skip--;
        else out.push(chunk[i]!.member);
      }
      i = (this.chunks[c - 1]?.length ?? 0) - 1;
    }
    return out;
  }

  entries(): Entry[] {
    return this.chunks.flat();
  }
}
