// EventStoreDB event store, through @eventstore/db-client. A thin mapping: expected revisions,
// stream reads, $all reads and the $all subscription are the server's own. Global positions are
// the events' $all prepare positions: unique per event and increasing in $all order (events of one
// append may share a commit position), but not contiguous. Reading from {commit: p, prepare: p}
// and keeping prepare > p resumes exactly after the event at p, since an event's commit position
// is never below its prepare position.
//
// Snapshots are streams of their own (snapshotStream), each capped at its newest event by its
// metadata ($maxCount 1), so the server drops the older ones; reads of the log skip them.
import {
  ANY,
  type AppendExpectedRevision,
  BACKWARDS,
  END,
  EventStoreDBClient,
  excludeSystemEvents,
  FORWARDS,
  jsonEvent,
  NO_STREAM,
  type ResolvedEvent,
  START,
  STREAM_EXISTS,
  StreamNotFoundError,
  WrongExpectedVersionError,
} from '@eventstore/db-client';
import {
  type AppendResult,
  type EventStore,
  type ExpectedRevision,
  type NewEvent,
  type RecordedEvent,
  type Snapshot,
  type SubscribeOptions,
  type Subscription,
  WrongExpectedRevisionError,
} from './port.ts';

/** Streams of snapshots begin so: no stream of the domain does (device-, account-, unique-, …). */
const SNAPSHOTS = 'hub-snapshot-';
const snapshotStream = (stream: string, kind: string) => `${SNAPSHOTS}${kind}-${stream}`;

export class EsdbEventStore implements EventStore {
  readonly kind = 'esdb';
  readonly snapshotEvery: number;
  private readonly client: EventStoreDBClient;

  /** `snapshotEvery`: events between snapshots of an aggregate's state (see EventStore); 0: none. */
  constructor(connectionString: string, options: { snapshotEvery?: number } = {}) {
    this.client = EventStoreDBClient.connectionString(connectionString);
    this.snapshotEvery = options.snapshotEvery ?? 0;
  }

  async append(
    stream: string,
    events: NewEvent[],
    expected: ExpectedRevision = 'any',
  ): Promise<AppendResult> {
    const expectedRevision: AppendExpectedRevision =
      expected === 'any'
        ? ANY
        : expected === 'no_stream'
          ? NO_STREAM
          : expected === 'stream_exists'
            ? STREAM_EXISTS
            : BigInt(expected);
    try {
      const result = await this.client.appendToStream(
        stream,
        events.map((e) =>
          jsonEvent({ id: e.id, type: e.type, data: e.data as never, metadata: (e.metadata ?? {}) as never }),
        ),
        { expectedRevision },
      );
      return {
        nextRevision: Number(result.nextExpectedRevision),
        position: Number(result.position?.prepare ?? 0n),
      };
    } catch (err) {
      if (err instanceof WrongExpectedVersionError) {
        const actual = typeof err.actualVersion === 'bigint' ? Number(err.actualVersion) : -1;
        throw new WrongExpectedRevisionError(stream, expected, actual);
      }
      throw err;
    }
  }

  async readStream(stream: string, fromRevision = 0, max = 1000): Promise<RecordedEvent[]> {
    const out: RecordedEvent[] = [];
    try {
      for await (const resolved of this.client.readStream(stream, {
        fromRevision: BigInt(fromRevision),
        maxCount: max,
        direction: FORWARDS,
      })) {
        const e = toRecorded(resolved);
        if (e) out.push(e);
      }
    } catch (err) {
      if (err instanceof StreamNotFoundError) return [];
      throw err;
    }
    return out;
  }

  async readSnapshot(stream: string, kind: string): Promise<Snapshot | undefined> {
    return (await this.lastSnapshot(snapshotStream(stream, kind)))?.snapshot;
  }

  /** Appended after the stored one, at its revision: a save that meets another's reads the
   * stored one again (each such conflict is another save done) and is dropped if that is newer. */
  async saveSnapshot(stream: string, snapshot: Snapshot): Promise<void> {
    const name = snapshotStream(stream, snapshot.kind);
    for (;;) {
      const stored = await this.lastSnapshot(name);
      if (stored && stored.snapshot.revision > snapshot.revision) return;
      if (!stored) await this.client.setStreamMetadata(name, { maxCount: 1 });
      try {
        await this.client.appendToStream(name, jsonEvent({ type: 'Snapshot', data: snapshot as never }), {
          expectedRevision: stored ? stored.at : NO_STREAM,
        });
        return;
      } catch (err) {
        if (!(err instanceof WrongExpectedVersionError)) throw err;
      }
    }
  }

  private async lastSnapshot(name: string): Promise<{ snapshot: Snapshot; at: bigint } | undefined> {
    try {
      for await (const resolved of this.client.readStream(name, {
        fromRevision: END,
        direction: BACKWARDS,
        maxCount: 1,
      })) {
        if (resolved.event)
          return { snapshot: resolved.event.data as unknown as Snapshot, at: resolved.event.revision };
      }
    } catch (err) {
      if (err instanceof StreamNotFoundError) return undefined;
      throw err;
    }
    return undefined;
  }

  async readAll(after = 0, max = 1000): Promise<RecordedEvent[]> {
    const out: RecordedEvent[] = [];
    let from: typeof START | { commit: bigint; prepare: bigint } =
      after === 0 ? START : { commit: BigInt(after), prepare: BigInt(after) };
    // System events are skipped: read on until the page is full or $all ends, so that a stretch
    // of system events never looks like the end of the log.
    while (out.length < max) {
      let seen = 0;
      let last: { commit: bigint; prepare: bigint } | undefined;
      for await (const resolved of this.client.readAll({
        fromPosition: from,
        maxCount: max,
        direction: FORWARDS,
      })) {
        seen++;
        last = resolved.event?.position ?? last;
        const e = toRecorded(resolved);
        if (e && e.position > (out.at(-1)?.position ?? after)) out.push(e);
        if (out.length === max) break;
      }
      if (seen < max || !last) break;
      from = last;
    }
    return out;
  }

  /** The server pushes each event as it is written: `lingerMs` does not apply. */
  subscribe(after = 0, options: SubscribeOptions = {}): Subscription {
    const subscription = this.client.subscribeToAll({
      fromPosition: after === 0 ? START : { commit: BigInt(after), prepare: BigInt(after) },
      filter: excludeSystemEvents(),
    });
    async function* run(): AsyncGenerator<RecordedEvent> {
      for await (const resolved of subscription) {
        const e = toRecorded(resolved);
        if (e && e.position > after) yield e;
      }
    }
    const iterator = batches(run(), options.batchSize ?? 500);
    return { close: () => void subscription.unsubscribe(), [Symbol.asyncIterator]: () => iterator };
  }

  async head(): Promise<number> {
    for await (const resolved of this.client.readAll({
      fromPosition: 'end',
      direction: 'backwards',
      maxCount: 50,
    })) {
      const e = toRecorded(resolved);
      if (e) return e.position;
    }
    return 0;
  }

  async close(): Promise<void> {
    await this.client.dispose();
  }
}

/**
 * The client delivers events one at a time; a subscription delivers batches: what has arrived
 * within one turn of the event loop joins the batch (at most `max`), what needs I/O starts the next.
 */
async function* batches<T>(source: AsyncIterable<T>, max: number): AsyncGenerator<T[]> {
  const it = source[Symbol.asyncIterator]();
  const NOT_YET = Symbol('not yet');
  let pending: Promise<IteratorResult<T>> | undefined;
  while (true) {
    const first = await (pending ?? it.next());
    pending = undefined;
    if (first.done) return;
    const batch = [first.value];
    while (batch.length < max) {
      pending = it.next();
      const r = await Promise.race([
        pending,
        new Promise<typeof NOT_YET>((resolve) => setImmediate(resolve, NOT_YET)),
      ]);
      if (r === NOT_YET) break;
      pending = undefined;
      if (r.done) {
        yield batch;
        return;
      }
      batch.push(r.value);
    }
    yield batch;
  }
}

function toRecorded(resolved: ResolvedEvent): RecordedEvent | undefined {
  const e = resolved.event;
  if (!e || e.streamId.startsWith('$') || e.type.startsWith('$') || e.streamId.startsWith(SNAPSHOTS))
    return undefined;
  return {
    id: e.id,
    type: e.type,
    stream: e.streamId,
    revision: Number(e.revision),
    position: Number(e.position?.prepare ?? 0n),
    data: e.data,
    metadata: (e.metadata ?? {}) as Record<string, unknown>,
    created: e.created instanceof Date ? e.created.getTime() : Number(e.created),
  };
}
