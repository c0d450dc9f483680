// A delivery job as the `deliveries` topic carries it: Avro, the schema named in a header.
import { type InMessage, type OutMessage, SCHEMA_HEADER } from '../../infra/bus/port.ts';
import type { SchemaRegistry } from '../../schemas/registry.ts';
import type { WebhookEvent } from '../stream/derive.ts';
import type { Job } from './port.ts';

const JOB_SCHEMA = 'DeliveryJob';

/** A job as the `deliveries` topic carries it (Avro, the schema named in a header). */
export function encodeJob(registry: SchemaRegistry, j: Job): OutMessage {
  return {
    key: j.subscription_id,
    value: registry.encode(JOB_SCHEMA, {
      job_id: j.job_id,
      subscription_id: j.subscription_id,
      owner: j.owner,
      kind: j.kind,
      attempt: 1,
      not_before: 0,
      event: { ...j.event, data: JSON.stringify(j.event.data) },
    }),
    headers: { [SCHEMA_HEADER]: `${JOB_SCHEMA}.v${registry.currentVersion(JOB_SCHEMA)}` },
  };
}

export function decodeJob(registry: SchemaRegistry, m: InMessage): Job {
  const version = Number(/\.v(\d+)$/.exec(m.headers[SCHEMA_HEADER] ?? '')?.[1] ?? 1);
  const j = registry.decode(JOB_SCHEMA, version, m.value) as Omit<Job, 'event'> & {
    event: Omit<WebhookEvent, 'data'> & { data: string };
  };
  return {
    job_id: j.job_id,
    subscription_id: j.subscription_id,
    owner: j.owner,
    kind: j.kind,
    event: {
      ...j.event,
      created: Number(j.event.created),
      source_position: Number(j.event.source_position),
      created_ms: Number(j.event.created_ms),
      data: JSON.parse(j.event.data),
    },
    attempt: 0,
    enqueued: Date.now(),
  };
}
