// The actor runtime of the stream processor: each key (a device) is an actor with a mailbox.
// An actor handles its messages one at a time, in order; different actors run concurrently, at
// most `concurrency` at once per partition; the batch resolves only when every mailbox is empty,
// which holds the consumer back (backpressure). State lives in an ActorStates store, so another
// instance can take a partition over, and a start resumes where the stored checkpoint says; idle
// actors leave memory.
import type { StatementSync } from 'node:sqlite';
import type { Redis } from 'ioredis';
import { type DerivedDatabase, HeldRows } from '../../infra/sqlite.ts';

/** A position of the input saved with the states it led to. */
export interface StatesCheckpoint {
  name: string;
  position: number;
}

export interface ActorStates<S> {
  /** The stored states of these keys (missing: never saved). */
  load(keys: string[]): Promise<Map<string, S>>;
  /** Saves the states and, with `checkpoint`, moves that checkpoint in the same step: a start
   * resumes after it with the states as they were there. */
  save(states: Map<string, S>, checkpoint?: StatesCheckpoint): Promise<void>;
  /** The position last saved under this name (0: none). */
  checkpoint(name: string): Promise<number>;
}

export class MemoryActorStates<S> implements ActorStates<S> {
  private readonly states = new Map<string, S>();
  private readonly checkpoints = new Map<string, number>();
  async load(keys: string[]): Promise<Map<string, S>> {
    const found = new Map<string, S>();
    for (const k of keys) {
      const s = this.states.get(k);
      if (s !== undefined) found.set(k, s);
    }
    return found;
  }
  async save(states: Map<string, S>, checkpoint?: StatesCheckpoint): Promise<void> {
    for (const [k, s] of states) this.states.set(k, s);
    if (checkpoint) this.checkpoints.set(checkpoint.name, checkpoint.position);
  }
  async checkpoint(name: string): Promise<number> {
    return this.checkpoints.get(name) ?? 0;
  }
}

export class RedisActorStates<S> implements ActorStates<S> {
  private readonly redis: Redis;
  private readonly prefix: string;
  constructor(redis: Redis, name: string) {
    this.redis = redis;
    this.prefix = `hub:actor:${name}:`;
  }
  async load(keys: string[]): Promise<Map<string, S>> {
    const found = new Map<string, S>();
    if (keys.length === 0) return found;
    const values = await this.redis.mget(keys.map((k) => this.prefix + k));
    values.forEach((v, i) => {
      if (v !== null) found.set(keys[i]!, JSON.parse(v) as S);
    });
    return found;
  }
  async save(states: Map<string, S>, checkpoint?: StatesCheckpoint): Promise<void> {
    const args: string[] = [];
    for (const [k, s] of states) args.push(this.prefix + k, JSON.stringify(s));
    // One MSET: the states and their checkpoint land together.
    if (checkpoint) args.push(`${this.prefix}checkpoint:${checkpoint.name}`, String(checkpoint.position));
    if (args.length > 0) await this.redis.mset(args);
  }
  async checkpoint(name: string): Promise<number> {
    return Number((await this.redis.get(`${this.prefix}checkpoint:${name}`)) ?? 0);
  }
}

/** The embedded profile's states on disk, in the derived-state file (infra/sqlite.ts). A state is
 * written once when the transaction it changed in commits (HeldRows), with the checkpoint saved in
 * that window. */
export class SqliteActorStates<S> implements ActorStates<S> {
  private readonly d: DerivedDatabase;
  private readonly name: string;
  private readonly sql: Record<'get' | 'put' | 'checkpoint' | 'setCheckpoint', StatementSync>;
  /** States are values the behaviour replaces, never changes (receive is pure): held as they are. */
  private readonly held: HeldRows<S>;
  constructor(derived: DerivedDatabase, name: string) {
    this.d = derived;
    this.name = name;
    derived.migrate('actors', [
      `CREATE TABLE actor_states (
         name  TEXT NOT NULL,
         key   TEXT NOT NULL,
         state TEXT NOT NULL,
         PRIMARY KEY (name, key)
       ) STRICT, WITHOUT ROWID;
       CREATE TABLE actor_checkpoints (name TEXT PRIMARY KEY, position INTEGER NOT NULL) STRICT;`,
    ]);
    const db = derived.db;
    this.sql = {
      get: db.prepare('SELECT state FROM actor_states WHERE name = ? AND key = ?'),
      put: db.prepare(
        'INSERT INTO actor_states (name, key, state) VALUES (?, ?, ?) ON CONFLICT (name, key) DO UPDATE SET state = excluded.state',
      ),
      checkpoint: db.prepare('SELECT position FROM actor_checkpoints WHERE name = ?'),
      setCheckpoint: db.prepare(
        'INSERT INTO actor_checkpoints (name, position) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET position = excluded.position',
      ),
    };
    this.held = new HeldRows(derived, (k, s) => this.sql.put.run(this.name, k, JSON.stringify(s)));
  }
  async load(keys: string[]): Promise<Map<string, S>> {
    const found = new Map<string, S>();
    for (const k of keys) {
      const held = this.held.get(k);
      if (held !== undefined) {
        found.set(k, held);
        continue;
      }
      const row = this.sql.get.get(this.name, k) as { state: string } | undefined;
      if (row) found.set(k, JSON.parse(row.state) as S);
    }
    return found;
  }
  async save(states: Map<string, S>, checkpoint?: StatesCheckpoint): Promise<void> {
    if (states.size === 0 && !checkpoint) return;
    this.d.single(() => {
      if (checkpoint) this.sql.setCheckpoint.run(`${this.name}:${checkpoint.name}`, checkpoint.position);
    });
    for (const [k, s] of states) this.held.hold(k, s);
  }
  async checkpoint(name: string): Promise<number> {
    return (
      (this.sql.checkpoint.get(`${this.name}:${name}`) as { position: number } | undefined)?.position ?? 0
    );
  }
}

export interface ActorBehaviour<S, M, O> {
  initial(key: string): S;
  /** Pure: one message, the next state and what it produced. */
  receive(state: S, message: M): { state: S; out: O[] };
}

interface Actor<S, M> {
  state: S;
  mailbox: M[];
  lastUsed: number;
}

export interface RuntimeStats {
  actors: number;
  /** Messages waiting in mailboxes when the batch was posted. */
  mailboxDepth: number;
}

export class ActorRuntime<S, M, O> {
  /** Least recently used first. Not an LRU library's cache: an actor must not leave while a batch
   * runs it, so eviction waits for the batch's end (and idle actors leave then too). */
  private readonly actors = new Map<string, Actor<S, M>>();
  private readonly behaviour: ActorBehaviour<S, M, O>;
  private readonly states: ActorStates<S>;
  private readonly concurrency: number;
  private readonly maxActors: number;
  private readonly idleMs: number;
  readonly stats: RuntimeStats = { actors: 0, mailboxDepth: 0 };

  constructor(o: {
    behaviour: ActorBehaviour<S, M, O>;
    states: ActorStates<S>;
    concurrency?: number;
    maxActors?: number;
    idleMs?: number;
  }) {
    this.behaviour = o.behaviour;
    this.states = o.states;
    this.concurrency = o.concurrency ?? 64;
    this.maxActors = o.maxActors ?? 100_000;
    this.idleMs = o.idleMs ?? 60_000;
  }

  /**
   * Posts a batch (in order) to the actors' mailboxes and runs them until every mailbox is empty.
   * Returns what they produced, each actor's output in its messages' order, and the states to save.
   */
  async run(batch: { key: string; message: M }[]): Promise<{ out: O[]; changed: Map<string, S> }> {
    const now = Date.now();
    const waiting: string[] = [];
    const missing: string[] = [];
    const posted = new Map<string, M[]>();
    for (const { key, message } of batch) {
      let mailbox = posted.get(key);
      if (!mailbox) {
        mailbox = [];
        posted.set(key, mailbox);
        waiting.push(key);
        if (!this.actors.has(key)) missing.push(key);
      }
      mailbox.push(message);
    }
    this.stats.mailboxDepth = batch.length;
    // One round trip wakes every actor not in memory.
    const stored = await this.states.load(missing);
    for (const key of missing) {
      this.actors.set(key, {
        state: stored.get(key) ?? this.behaviour.initial(key),
        mailbox: [],
        lastUsed: now,
      });
    }
    const out: O[][] = [];
    const changed = new Map<string, S>();
    let next = 0;
    const worker = async () => {
      while (next < waiting.length) {
        const index = next++;
        const key = waiting[index]!;
        const actor = this.actors.get(key)!;
        actor.mailbox.push(...posted.get(key)!);
        const produced: O[] = [];
        // One message at a time: each sees the state the previous one left.
        for (let m = actor.mailbox.shift(); m !== undefined; m = actor.mailbox.shift()) {
          const r = this.behaviour.receive(actor.state, m);
          if (r.state !== actor.state) changed.set(key, r.state);
          actor.state = r.state;
          produced.push(...r.out);
        }
        out[index] = produced;
        actor.lastUsed = now;
        this.actors.delete(key); // re-inserted last: most recently used
        this.actors.set(key, actor);
        await undefined;
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.concurrency, waiting.length) }, worker));
    this.stats.mailboxDepth = 0;
    this.evict(now);
    return { out: out.flat(), changed };
  }

  /** Forgets every actor (their states are saved): after a rebalance, stored state is the truth. */
  clear(): void {
    this.actors.clear();
    this.stats.actors = 0;
  }

  private evict(now: number): void {
    for (const [key, actor] of this.actors) {
      if (this.actors.size <= this.maxActors && now - actor.lastUsed < this.idleMs) break;
      this.actors.delete(key);
    }
    this.stats.actors = this.actors.size;
  }
}
