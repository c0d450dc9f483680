// The stream catalog: every stream with its last revision, last event type and when it last
// changed, plus totals by event type. It reads every event, so it also tells operators how far
// the projector has come.
import type { Projection } from './runner.ts';

/** The read model's keys, for the projection and for those who read it. */
export const streamKeys = {
  record: (stream: string) => `stream:${stream}`,
  /** Every stream, by its last change. */
  byUpdate: 'streams-by-update',
  /** Event totals by type. */
  totals: 'totals',
};

export const streamCatalog: Projection = {
  name: 'streams',
  version: 1,
  description: 'Every stream with its last revision and event type; event totals by type.',
  project(e) {
    return [
      {
        op: 'patch',
        key: streamKeys.record(e.stream),
        doc: {
          stream: e.stream,
          revision: e.revision,
          last_type: e.type,
          last_position: e.position,
          updated: e.created,
        },
      },
      { op: 'zadd', key: streamKeys.byUpdate, member: e.stream, score: e.created },
      { op: 'incr', key: streamKeys.totals, field: e.type, by: 1 },
    ];
  },
};
