// Wraps any adapter so that every appended event matches the Avro schema of its type (refused
// with a SchemaError naming the field otherwise), records the schema version it was written
// with, and is read back as the current version of its schema.
import { SchemaError, type SchemaRegistry } from '../../schemas/registry.ts';
import type {
  AppendResult,
  EventStore,
  ExpectedRevision,
  NewEvent,
  RecordedEvent,
  Subscription,
} from './port.ts';

export const SCHEMA_VERSION = 'schema_version';

export class SchemaCheckedStore implements EventStore {
  readonly kind: string;
  readonly exclusiveWriter: boolean;
  private readonly inner: EventStore;
  private readonly registry: SchemaRegistry;

  constructor(inner: EventStore, registry: SchemaRegistry) {
    this.inner = inner;
    this.registry = registry;
    this.kind = inner.kind;
    this.exclusiveWriter = inner.exclusiveWriter === true;
  }

  async append(stream: string, events: NewEvent[], expected?: ExpectedRevision): Promise<AppendResult> {
    const stamped = events.map((e) => {
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
    return this.inner.append(stream, stamped, expected);
  }

  async readStream(stream: string, fromRevision?: number, max?: number): Promise<RecordedEvent[]> {
    return (await this.inner.readStream(stream, fromRevision, max)).map((e) => this.current(e));
  }

  async readAll(after?: number, max?: number): Promise<RecordedEvent[]> {
    return (await this.inner.readAll(after, max)).map((e) => this.current(e));
  }

  subscribe(after?: number, options?: { batchSize?: number }): Subscription {
    const inner = this.inner.subscribe(after, options);
    const upcast = (e: RecordedEvent) => this.current(e);
    async function* run(): AsyncGenerator<RecordedEvent> {
      for await (const e of inner) yield upcast(e);
    }
    const iterator = run();
    return { close: () => inner.close(), [Symbol.asyncIterator]: () => iterator };
  }

  head(): Promise<number> {
    return this.inner.head();
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
