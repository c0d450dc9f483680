// The relay: moves every stored event, in store order, to the `changes` topic, keyed by its
// aggregate (the device, for device and trail streams) so one device's changes stay in order in
// one partition. Avro-encoded, the schema named in a header. At least once: the checkpoint moves
// only after the broker acknowledged, so a crash of the relay, the store or the broker resends
// (consumers skip what they applied, by position). While the stream processor of this process
// holds every partition, the relay hands it the changes in memory instead (`handOff`), and the
// checkpoint moves once the processor has made them durable. One relay runs at a time: a lease in
// the read store, renewed as it goes, keeps a second one waiting.
import { Counter, Gauge, type Registry } from 'prom-client';
import type { Bus } from '../../infra/bus/port.ts';
import { SCHEMA_HEADER, TOPICS } from '../../infra/bus/port.ts';
import type { CheckpointStore } from '../../infra/checkpoints.ts';
import type { EventStore } from '../../infra/eventstore/port.ts';
import type { ReadStore } from '../../infra/readstore/port.ts';
import { newOwnerId } from '../../infra/readstore/redis.ts';
import type { Logger } from '../../infra/telemetry.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import { aggregateKey, type Change } from '../stream/derive.ts';
import type { StreamProcessor } from '../stream/processor.ts';
import { EventFollower } from './follower.ts';

const SCHEMA = 'ChangeRecord';

/** Fields that never leave the event store: password and token hashes, sealed secrets, challenges. */
const SECRET_FIELD = /(secret|password|hash|challenge|sealed)/i;
export function redacted(data: unknown): unknown {
  if (data === null || typeof data !== 'object' || Array.isArray(data)) return data;
  // Most events (device metadata) have nothing to leave out: no copy for them.
  if (!Object.keys(data).some((k) => SECRET_FIELD.test(k))) return data;
  return Object.fromEntries(Object.entries(data).filter(([k]) => !SECRET_FIELD.test(k)));
}
const LEASE_MS = 10_000;

export function relay(o: {
  store: EventStore;
  bus: Bus;
  registry: SchemaRegistry;
  checkpoints: CheckpointStore;
  logger: Logger;
  metrics: Registry;
  /** Distributed profile: the read store whose lease makes this the only running relay. */
  lease?: ReadStore;
  /** Names the checkpoint and the lease: one relay per set of topics (HUB_KAFKA_PREFIX). */
  name?: string;
  /** Distributed (HUB_RELAY_HANDOFF): the stream processor of this process, which takes the
   * changes in memory while it holds every partition of the topic (StreamProcessor.takesChanges). */
  handOff?: Pick<StreamProcessor, 'takesChanges' | 'take' | 'takesDropped' | 'rereading'>;
}): EventFollower {
  const name = o.name ?? 'relay';
  const relayed = new Counter({
    name: 'hub_relay_events_total',
    help: 'Stored events relayed: put on the changes topic, or handed to the stream processor of this process.',
    registers: [o.metrics],
  });
  const position = new Gauge({
    name: 'hub_relay_position',
    help: 'Store position of the last event the relay put on the changes topic or handed off.',
    registers: [o.metrics],
  });
  const handedOff = new Counter({
    name: 'hub_relay_events_handed_off_total',
    help: 'Of those, the stored events handed to the stream processor of this process in memory (HUB_RELAY_HANDOFF).',
    registers: [o.metrics],
  });
  const header = { [SCHEMA_HEADER]: `${SCHEMA}.v${o.registry.currentVersion(SCHEMA)}` };
  const owner = newOwnerId();
  let renewed = 0;
  const holdLease = async (): Promise<boolean> => {
    if (!o.lease) return true;
    if (Date.now() - renewed < LEASE_MS / 3) return true;
    const held = await o.lease.lock(name, owner, LEASE_MS);
    renewed = held ? Date.now() : 0;
    return held;
  };
  return new EventFollower({
    name,
    store: o.store,
    checkpoints: o.checkpoints,
    logger: o.logger,
    ready: async () => {
      // Reading (again) from the last batch made durable: what the processor dropped comes again.
      o.handOff?.rereading();
      return holdLease();
    },
    handle: async (batch) => {
      if (!(await holdLease())) throw new Error('the relay lease went to another process');
      const inMemory = o.handOff ? await o.handOff.takesChanges() : false;
      // Checked just before either path, in the same turn: nothing sent overtakes a change the
      // processor dropped (the follower reads again from its last durable batch).
      if (o.handOff?.takesDropped) throw new Error('changes handed off were dropped; reading them again');
      if (inMemory) {
        // Straight to the processor: what the topic's consumer would decode (secrets left out).
        const taken = await o.handOff!.take(
          batch.map(
            (e) =>
              ({
                id: e.id,
                type: e.type,
                stream: e.stream,
                position: e.position,
                created: e.created,
                data: redacted(e.data),
              }) as Change,
          ),
        );
        relayed.inc(batch.length);
        handedOff.inc(batch.length);
        position.set(batch[batch.length - 1]!.position);
        return taken;
      }
      await o.bus.send(
        TOPICS.changes,
        batch.map((e) => ({
          key: aggregateKey(e.stream),
          value: o.registry.encode(SCHEMA, {
            id: e.id,
            type: e.type,
            stream: e.stream,
            revision: e.revision,
            position: e.position,
            created: e.created,
            schema_version: o.registry.has(e.type) ? o.registry.currentVersion(e.type) : 1,
            data: JSON.stringify(redacted(e.data)),
            metadata: JSON.stringify(e.metadata ?? {}),
          }),
          headers: header,
        })),
      );
      relayed.inc(batch.length);
      position.set(batch[batch.length - 1]!.position);
    },
    stopped: async () => {
      if (o.lease && renewed) await o.lease.unlock(name, owner).catch(() => {});
    },
  });
}
