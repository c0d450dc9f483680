// Wraps any adapter so that every appended event matches the Avro schema of its type (refused
// with a SchemaError naming the field otherwise), records the schema version it was written
// with, and is read back as the current version of its schema. Being the one wrapper every append
// passes through, it also times appends (hub_eventstore_append_duration_seconds) when given a registry.
import { createHash } from 'node:crypto';
import { Histogram, type Registry } from 'prom-client';
import { SchemaError, type SchemaRegistry } from '../../schemas/registry.ts';
import type {
  AppendResult,
  EventStore,
  ExpectedRevision,
  NewEvent,
  RecordedEvent,
  Snapshot,
  SubscribeOptions,
  Subscription,
  WriterLink,
} from './port.ts';
import { WrongExpectedRevisionError } from './port.ts';

export const SCHEMA_VERSION = 'schema_version';
export const APPEND_DURATION = 'hub_eventstore_append_duration_seconds';

/**
 * The check of every append, on the thread that appends: each event matched against its type's
 * schema, stored complete (defaults filled in) with the schema version it was written with, and
 * the append timed. SchemaCheckedStore runs it for its appends; the embedded hub's API threads
 * run it themselves for the appends they send straight to the store's writer thread.
 */
export class SchemaCheck {
  private readonly registry: SchemaRegistry;
  private readonly appendDuration: Histogram<'outcome'> | undefined;

  constructor(registry: SchemaRegistry, metrics?: Registry) {
    this.registry = registry;
    this.appendDuration =
      metrics &&
      new Histogram({
        name: APPEND_DURATION,
        help: 'Time to append one batch of events to the event store, by outcome: ok, conflict (expected revision), error.',
        labelNames: ['outcome'],
        buckets: [0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 2.5],
        registers: [metrics],
      });
  }

  /** The events as stored; a SchemaError for the first that does not match. */
  stamp(events: NewEvent[]): NewEvent[] {
    return events.map((e) => {
      if (!this.registry.has(e.type)) throw new SchemaError(e.type, 'type', 'is not a known event type');
      this.registry.validate(e.type, e.data);
      // Stored complete: readers never meet a field missing because it had a default.
      const data = this.registry.normalize(e.type, e.data);
      return {
        ...e,
        data,
        metadata: { ...e.metadata, [SCHEMA_VERSION]: this.registry.currentVersion(e.type) },
      };
    });
  }

  async timed(append: () => Promise<AppendResult>): Promise<AppendResult> {
    const end = this.appendDuration?.startTimer();
    try {
      const result = await append();
      end?.({ outcome: 'ok' });
      return result;
    } catch (err) {
      end?.({ outcome: err instanceof WrongExpectedRevisionError ? 'conflict' : 'error' });
      throw err;
    }
  }
}

export class SchemaCheckedStore implements EventStore {
  readonly kind: string;
  readonly exclusiveWriter: boolean;
  readonly localReads: boolean;
  readonly snapshotEvery: number;
  private readonly inner: EventStore;
  private readonly registry: SchemaRegistry;
  private readonly check: SchemaCheck;
  /** The current version of every schema, hashed: see readSnapshot. */
  private readonly schemasShape: string;

  constructor(inner: EventStore, registry: SchemaRegistry, metrics?: Registry) {
    this.inner = inner;
    this.registry = registry;
    this.check = new SchemaCheck(registry, metrics);
    this.kind = inner.kind;
    this.exclusiveWriter = inner.exclusiveWriter === true;
    this.localReads = inner.localReads === true;
    this.snapshotEvery = inner.readSnapshot && inner.saveSnapshot ? (inner.snapshotEvery ?? 0) : 0;
    const versions = registry.names().map((name) => `${name}.v${registry.currentVersion(name)}`);
    this.schemasShape = createHash('sha256').update(versions.join('\n')).digest('hex').slice(0, 12);
  }

  async append(stream: string, events: NewEvent[], expected?: ExpectedRevision): Promise<AppendResult> {
    const stamped = this.check.stamp(events);
    return this.check.timed(() => this.inner.append(stream, stamped, expected));
  }

  /** The appends sent to this port are the caller's to check (SchemaCheck). */
  connectAppender(): WriterLink | undefined {
    return this.inner.connectAppender?.();
  }

  hasten(position: number): void {
    this.inner.hasten?.(position);
  }

  async readStream(stream: string, fromRevision?: number, max?: number): Promise<RecordedEvent[]> {
    return (await this.inner.readStream(stream, fromRevision, max)).map((e) => this.current(e));
  }

  async readAll(after?: number, max?: number): Promise<RecordedEvent[]> {
    return (await this.inner.readAll(after, max)).map((e) => this.current(e));
  }

  subscribe(after?: number, options?: SubscribeOptions): Subscription {
    const inner = this.inner.subscribe(after, options);
    const upcast = (e: RecordedEvent) => this.current(e);
    async function* run(): AsyncGenerator<RecordedEvent[]> {
      for await (const batch of inner) yield batch.map(upcast);
    }
    const iterator = run();
    return { close: () => inner.close(), [Symbol.asyncIterator]: () => iterator };
  }

  head(): Promise<number> {
    return this.inner.head();
  }

  /**
   * Snapshots of states folded from events as this process reads them: a new version of a schema
   * (whose upcast fills in a field, say) may change the states folded from the same events, so a
   * snapshot's shape carries the versions it was folded with, and one of other versions is ignored.
   */
  async readSnapshot(stream: string, kind: string): Promise<Snapshot | undefined> {
    const found = await this.inner.readSnapshot?.(stream, kind);
    const suffix = `+${this.schemasShape}`;
    if (!found?.shape.endsWith(suffix)) return undefined;
    return { ...found, shape: found.shape.slice(0, -suffix.length) };
  }

  async saveSnapshot(stream: string, snapshot: Snapshot): Promise<void> {
    await this.inner.saveSnapshot?.(stream, { ...snapshot, shape: `${snapshot.shape}+${this.schemasShape}` });
  }

  close(): Promise<void> {
    return this.inner.close();
  }

  private current(e: RecordedEvent): RecordedEvent {
    const version = e.metadata[SCHEMA_VERSION];
    if (typeof version !== 'number' || !this.registry.has(e.type)) return e;
    // A newer version than this process knows (a rolling deploy) is read as it is.
    if (version >= this.registry.currentVersion(e.type)) return e;
    return { ...e, data: this.registry.upcast(e.type, version, e.data) };
  }
}
