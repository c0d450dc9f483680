// EventStoreDB event store, through @eventstore/db-client. A thin mapping: expected revisions,
// stream reads, $all reads and the $all subscription are the server's own. Global positions are
// the events' $all prepare positions: unique per event and increasing in $all order (events of one
// append may share a commit position), but not contiguous. Reading from {commit: p, prepare: p}
// and keeping prepare > p resumes exactly after the event at p, since an event's commit position
// is never below its prepare position.
import {
  ANY,
  type AppendExpectedRevision,
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
  type SubscribeOptions,
  type Subscription,
  WrongExpectedRevisionError,
} from './port.ts';

export class EsdbEventStore implements EventStore {
  readonly kind = 'esdb';
  private readonly client: EventStoreDBClient;

  constructor(connectionString: string) {
    this.client = EventStoreDBClient.connectionString(connectionString);
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
  if (!e || e.streamId.startsWith('$') || e.type.startsWith('$')) return undefined;
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
