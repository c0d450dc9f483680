// The delivery attempt records on PostgreSQL, beside the Redis schedule (the distributed profile),
// in the tables of processors/stream/postgres-logs.ts.
import {
  END_OF_TIME,
  type GroupedInserts,
  type LogRows,
  type PostgresLogs,
} from '../stream/postgres-logs.ts';
import type { Attempt, AttemptLog, AttemptRecord, StatusFilter } from './port.ts';
import { recordOf } from './port.ts';

/** An attempt as its row: id, started, subscription_id, event_id, owner, status, its record as the
 * API shows it (JSON) but for its request's body, and that body. */
type AttemptRow = [string, number, string, string, string, string, string, string];

/** What the reads select of a row: its record, and its request's body (null in a row recorded
 * before the body had a column of its own: its record holds it). */
type RecordRow = { body: string; request_body: string | null };

/** A row's record as the API shows it, its request's body put back. */
function recordOfRow(row: RecordRow): AttemptRecord {
  const record = JSON.parse(row.body) as AttemptRecord;
  if (row.request_body !== null) record.request.body = row.request_body;
  return record;
}

/** The key of a subscription's counts, and of its counts of a status filter. */
const attemptKey = (subscription: string, status?: StatusFilter) =>
  status ? `a:${subscription}\t${status}` : `a:${subscription}`;

/** Counted under the subscription, its filter `succeeded` or `failed`, and `dead_lettered` too. */
const ATTEMPT_ROWS: LogRows<AttemptRow> = {
  name: 'hub-attlog-append',
  table: 'hub_attempt_log',
  columns: [
    ['id', 'text'],
    ['started', 'bigint'],
    ['subscription_id', 'text'],
    ['event_id', 'text'],
    ['owner', 'text'],
    ['status', 'text'],
    ['body', 'text'],
    ['request_body', 'text'],
  ],
  keys: ([, , subscription, , , status]) => {
    const keys = [
      attemptKey(subscription),
      attemptKey(subscription, status === 'succeeded' ? 'succeeded' : 'failed'),
    ];
    if (status === 'dead_lettered') keys.push(attemptKey(subscription, 'dead_lettered'));
    return keys;
  },
};

/** Each status filter's condition; `failed` is every attempt that did not succeed. */
const STATUS_WHERE: Record<StatusFilter | 'all', string> = {
  all: '',
  succeeded: " AND status = 'succeeded'",
  failed: " AND status <> 'succeeded'",
  dead_lettered: " AND status = 'dead_lettered'",
};

/** The delivery attempt records on PostgreSQL, beside the Redis schedule (the distributed profile). */
export class PostgresAttemptLog implements AttemptLog<AttemptRow> {
  private readonly logs: PostgresLogs;
  private readonly inserts: GroupedInserts<AttemptRow>;

  constructor(logs: PostgresLogs) {
    this.logs = logs;
    this.inserts = logs.appends(ATTEMPT_ROWS);
  }

  rowOf(a: Attempt): AttemptRow {
    if (!Number.isFinite(a.started)) throw new Error(`attempt ${a.id} has no start time`);
    // The record is made here (recordOf): its request is replaced, not copied again, by one without
    // the body (the attempt's own request is left whole).
    const record: Omit<AttemptRecord, 'request'> & { request: Omit<AttemptRecord['request'], 'body'> } =
      recordOf(a);
    const { body, ...request } = a.request;
    record.request = request;
    return [a.id, a.started, a.subscription_id, a.event_id, a.owner, a.status, JSON.stringify(record), body];
  }

  /** Attempts started before the retention are not stored. */
  append(rows: AttemptRow[]): Promise<void> {
    const horizon = Date.now() - this.logs.retentionMs;
    return this.inserts.add(rows.filter((r) => r[1] >= horizon));
  }

  async attempts(
    subscription: string,
    q: { status?: StatusFilter; limit: number; skip: number },
  ): Promise<{ items: AttemptRecord[]; total: number }> {
    const status = q.status ?? 'all';
    const where = `subscription_id = $1${STATUS_WHERE[status]}`;
    const lo = Date.now() - this.logs.retentionMs;
    const [page, total] = await Promise.all([
      this.logs.read<RecordRow>(
        `hub-attlog-list-${status}`,
        `SELECT body, request_body FROM hub_attempt_log WHERE ${where} AND started >= $2 ORDER BY started DESC, id DESC LIMIT $3 OFFSET $4`,
        [subscription, lo, q.limit, q.skip],
      ),
      this.logs.count(`hub-attlog-count-${status}`, 'hub_attempt_log', 'started', where, [subscription], {
        lo,
        hi: END_OF_TIME,
        key: attemptKey(subscription, q.status),
      }),
    ]);
    return { items: page.map(recordOfRow), total };
  }

  async attempt(id: string): Promise<AttemptRecord | undefined> {
    const [row] = await this.logs.read<RecordRow>(
      'hub-attlog-get',
      'SELECT body, request_body FROM hub_attempt_log WHERE id = $1 AND started >= $2',
      [id, Date.now() - this.logs.retentionMs],
    );
    return row ? recordOfRow(row) : undefined;
  }

  async attemptsOfEvent(owner: string, eventId: string): Promise<AttemptRecord[]> {
    const rows = await this.logs.read<RecordRow>(
      'hub-attlog-event',
      'SELECT body, request_body FROM hub_attempt_log WHERE event_id = $1 AND owner = $2 AND started >= $3 ORDER BY started, id',
      [eventId, owner, Date.now() - this.logs.retentionMs],
    );
    return rows.map(recordOfRow);
  }
}
