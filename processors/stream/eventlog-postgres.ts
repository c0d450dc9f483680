// The account event log on PostgreSQL (what the distributed profile runs), in the tables of
// postgres-logs.ts.
//
// Its tail reads in the order of the appending transactions (`logged`, then the event id within
// one), and only rows of transactions older than any still running (the snapshot's xmin): those
// are all committed or gone, and every later append has a larger transaction number. So a tail
// neither skips an append that commits late nor reads one twice, whichever process appended it.
// A transaction left open anywhere on the server holds the tail back until it ends.
import type { WebhookEvent } from './derive.ts';
import type { EventLog, EventQuery, LogPosition, Tail } from './eventlog.ts';
import { END_OF_TIME, type GroupedInserts, type LogRows, type PostgresLogs } from './postgres-logs.ts';

/** The log's time of an event: its `created`, in ms (whole seconds). */
const timeOf = (e: WebhookEvent) => e.created * 1000;

/** An event as its row: id, at, owner, type, resource_prn, source_position, sequence, body. */
type EventRow = [string, number, string, string, string, number, number, string];

/** The key of an account's counts, and of its counts of a type. */
const eventKey = (owner: string, type?: string) => (type ? `e:${owner}\t${type}` : `e:${owner}`);

const EVENT_ROWS: LogRows<EventRow> = {
  name: 'hub-evlog-append',
  table: 'hub_event_log',
  columns: [
    ['id', 'text'],
    ['at', 'bigint'],
    ['owner', 'text'],
    ['type', 'text'],
    ['resource_prn', 'text'],
    ['source_position', 'bigint'],
    ['sequence', 'int'],
    ['body', 'text'],
  ],
  keys: (row) => [eventKey(row[2]), eventKey(row[2], row[3])],
};

/** Newest first: by time, then the store order of the changes, then the order of derivation. */
const EVENT_ORDER = 'ORDER BY at DESC, source_position DESC, sequence DESC';

/** The event log on PostgreSQL (what the distributed profile runs). */
export class PostgresEventLog implements EventLog {
  private readonly logs: PostgresLogs;
  private readonly inserts: GroupedInserts<EventRow>;

  constructor(logs: PostgresLogs) {
    this.logs = logs;
    this.inserts = logs.appends(EVENT_ROWS);
  }

  /** Events older than the retention are not stored. */
  append(events: WebhookEvent[]): Promise<void> {
    const horizon = Date.now() - this.logs.retentionMs;
    const rows: EventRow[] = [];
    for (const e of events) {
      const at = timeOf(e);
      if (at >= horizon)
        rows.push([
          e.id,
          at,
          e.owner,
          e.type,
          e.resource_prn,
          e.source_position,
          e.sequence,
          JSON.stringify(e),
        ]);
    }
    return this.inserts.add(rows);
  }

  async list(owner: string, q: EventQuery): Promise<{ items: WebhookEvent[]; total: number }> {
    const lo = Math.max(q.since ?? 0, Date.now() - this.logs.retentionMs);
    const hi = q.until ?? END_OF_TIME;
    const values: unknown[] = [owner];
    let where = 'owner = $1';
    if (q.type) where += ` AND type = $${values.push(q.type)}`;
    if (q.resource_prn) where += ` AND resource_prn = $${values.push(q.resource_prn)}`;
    const variant = `${q.type ? 't' : ''}${q.resource_prn ? 'r' : ''}`;
    const n = values.length;
    const [page, total] = await Promise.all([
      this.logs.read<{ body: string }>(
        `hub-evlog-list-${variant}`,
        `SELECT body FROM hub_event_log WHERE ${where} AND at >= $${n + 1} AND at < $${n + 2} ${EVENT_ORDER} LIMIT $${n + 3} OFFSET $${n + 4}`,
        [...values, lo, hi, q.limit, q.skip],
      ),
      this.logs.count(`hub-evlog-count-${variant}`, 'hub_event_log', 'at', where, values, {
        lo,
        hi,
        key: q.resource_prn ? undefined : eventKey(owner, q.type),
      }),
    ]);
    return { items: page.map((r) => JSON.parse(r.body) as WebhookEvent), total };
  }

  async get(owner: string, id: string): Promise<WebhookEvent | undefined> {
    const [row] = await this.logs.read<{ body: string }>(
      'hub-evlog-get',
      'SELECT body FROM hub_event_log WHERE id = $1 AND at >= $2 AND owner = $3',
      [id, Date.now() - this.logs.retentionMs, owner],
    );
    return row ? (JSON.parse(row.body) as WebhookEvent) : undefined;
  }

  /** `<xmax>.`: after every row committed or being appended now, before those of transactions to
   * come. (The oldest running transaction, xmin, would take in rows already committed after it
   * began: any session's open transaction, an operator's psql, holds it back.) */
  async head(): Promise<LogPosition> {
    const [row] = await this.logs.read<{ xmax: string }>(
      'hub-evlog-head',
      'SELECT pg_snapshot_xmax(pg_current_snapshot())::text AS xmax',
      [],
    );
    return `${row!.xmax}.`;
  }

  async tail(owner: string, after: LogPosition, limit: number): Promise<Tail> {
    // `<logged>.<source_position>.<sequence>.<id>`, or `<xid>.` (a head): every row logged from it on.
    const [xid, sourcePosition = '-1', sequence = '-1', id = ''] = after.split('.');
    // The text forms go by names of their own: ORDER BY takes an output column before a table's,
    // and '100000' sorts before '99999' (a read in that order sent events twice, or skipped one).
    const rows = await this.logs.read<{
      logged_text: string;
      source_position_text: string;
      sequence: number;
      id: string;
      body: string;
    }>(
      'hub-evlog-tail',
      `SELECT logged::text AS logged_text, source_position::text AS source_position_text, sequence, id, body FROM hub_event_log
       WHERE owner = $1 AND (logged, source_position, sequence, id) > ($2::xid8, $3::bigint, $4::int, $5)
         AND logged < pg_snapshot_xmin(pg_current_snapshot()) AND at >= $6
       ORDER BY logged, source_position, sequence, id LIMIT $7`,
      [
        owner,
        xid,
        sourcePosition || '-1',
        Number(sequence || -1),
        id,
        Date.now() - this.logs.retentionMs,
        limit + 1,
      ],
    );
    const more = rows.length > limit;
    const items = rows.slice(0, limit).map((r) => ({
      event: JSON.parse(r.body) as WebhookEvent,
      position: `${r.logged_text}.${r.source_position_text}.${r.sequence}.${r.id}`,
    }));
    // Nothing new: on from where the last item was (an empty read says nothing of the xmin's rows).
    return { items, position: items.at(-1)?.position ?? after, more };
  }
}
