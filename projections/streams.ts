// The stream catalog: every stream with its last revision, last event type and when it last
// changed, plus totals by event type. It reads every event, so it also tells operators how far
// the projector has come. Version 2 dropped the index of streams by last change: nothing read it,
// and moving a stream in it at each event was a fifth of the derived state's cost on disk under
// device-meta ingestion.
import type { Projection } from './runner.ts';

/** The read model's keys, for the projection and for those who read it. */
export const streamKeys = {
  record: (stream: string) => `stream:${stream}`,
  /** Event totals by type. */
  totals: 'totals',
};

export const streamCatalog: Projection = {
  name: 'streams',
  version: 2,
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
      { op: 'incr', key: streamKeys.totals, field: e.type, by: 1 },
    ];
  },
};
