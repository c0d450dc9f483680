// The upgrade of the distributed profile's logs from Redis, where versions before PostgreSQL kept
// them, to their tables in PostgreSQL (postgres-logs.ts).
import { randomBytes } from 'node:crypto';
import type { Redis } from 'ioredis';
import type { Logger } from '../../infra/telemetry.ts';
import { type AttemptRecord, attemptOfRecord } from '../delivery/port.ts';
import type { PostgresAttemptLog } from '../delivery/postgres.ts';
import type { WebhookEvent } from './derive.ts';
import type { PostgresEventLog } from './eventlog-postgres.ts';

/** Set once the logs an earlier version kept in Redis are in PostgreSQL (its value: when). */
export const MOVED_KEY = 'hub:logs:moved';
/** Held (with an expiry, renewed) by the process moving them. */
const MOVING_KEY = 'hub:logs:moving';
const MOVING_LEASE_MS = 60_000;
/** How often a process that does not hold it looks whether the move is done (or its mover died). */
const MOVE_LOOK_MS = 5000;
const PROGRESS_EVERY_MS = 10_000;
/** Renews the lease if it is still this process's. */
const RENEW_MOVING = `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`;

/**
 * The upgrade from versions that kept the event log and the attempt records in Redis: they are
 * copied to PostgreSQL once, by one process at a time (a lease in Redis; the others look again
 * every few seconds, in case it dies), in batches of a SCAN; each batch's keys are removed from Redis
 * once its rows are committed, so a move cut short resumes where it stopped (appends are
 * idempotent). Then the old indexes go, and `hub:logs:moved` is set. Records past the retention
 * are not copied; a record that cannot be read is left to expire with its retention. Until the
 * move says it is done, the logs lack what is not moved yet. Processes of the earlier version must
 * be stopped first: what they write in Redis afterwards is not moved (it expires unseen).
 */
export async function moveLogsFromRedis(o: LogMove): Promise<void> {
  const { redis, logger, signal } = o;
  const token = randomBytes(8).toString('hex');
  while (!signal.aborted) {
    try {
      if (await redis.exists(MOVED_KEY)) return;
      // Held: moved, then the key above is set (or stopped, and the loop ends).
      if (await redis.set(MOVING_KEY, token, 'PX', MOVING_LEASE_MS, 'NX')) {
        await moveHeld(o, token);
        continue;
      }
    } catch (err) {
      logger.warn(
        { err: (err as Error).message },
        'moving the logs from Redis to PostgreSQL failed; tried again in a few seconds',
      );
    }
    await new Promise<void>((resolve) => {
      const timer = setTimeout(resolve, MOVE_LOOK_MS);
      signal.addEventListener(
        'abort',
        () => {
          clearTimeout(timer);
          resolve();
        },
        { once: true },
      );
    });
  }
}

interface LogMove {
  redis: Redis;
  events: PostgresEventLog;
  attempts: PostgresAttemptLog;
  logger: Logger;
  signal: AbortSignal;
}

/** The move, by the holder of its lease (`token`); gives the lease back when it ends. */
async function moveHeld(o: LogMove, token: string): Promise<void> {
  const { redis, logger, signal } = o;
  const renewal = setInterval(() => {
    redis.eval(RENEW_MOVING, 1, MOVING_KEY, token, MOVING_LEASE_MS).catch(() => {});
  }, MOVING_LEASE_MS / 3);
  renewal.unref();
  const started = Date.now();
  const counts = { events: 0, attempts: 0, unreadable: 0 };
  let told = started;
  const progress = () => {
    if (Date.now() - told < PROGRESS_EVERY_MS) return;
    told = Date.now();
    logger.info(counts, 'moving the logs from Redis to PostgreSQL: so far');
  };
  /** Moves the records of the keys matching `pattern`, as `parse` reads them (one it cannot read
   * is counted and left); answers whether it went through them all. */
  const move = async <Row>(
    pattern: string,
    kind: 'events' | 'attempts',
    parse: (body: string) => Row,
    write: (rows: Row[]) => Promise<void>,
  ) => {
    let cursor = '0';
    do {
      if (signal.aborted) return false;
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      if (keys.length === 0) continue;
      const bodies = await redis.mget(keys);
      const rows: Row[] = [];
      const moved: string[] = [];
      keys.forEach((key, i) => {
        const body = bodies[i];
        if (body === null || body === undefined) return; // expired meanwhile
        try {
          rows.push(parse(body));
          moved.push(key);
        } catch {
          counts.unreadable++;
        }
      });
      await write(rows);
      if (moved.length > 0) await redis.unlink(...moved);
      counts[kind] += moved.length;
      progress();
    } while (cursor !== '0');
    return true;
  };
  /** Removes the keys matching `pattern` (the old indexes). */
  const remove = async (pattern: string) => {
    let cursor = '0';
    do {
      const [next, keys] = await redis.scan(cursor, 'MATCH', pattern, 'COUNT', 1000);
      cursor = next;
      if (keys.length > 0) await redis.unlink(...keys);
    } while (cursor !== '0' && !signal.aborted);
  };
  try {
    logger.info(
      'moving the event log and the delivery attempt records an earlier version kept in Redis to PostgreSQL; until it is done they lack what is not moved yet',
    );
    const done =
      (await move(
        'hub:evt:*',
        'events',
        (body) => {
          const e = JSON.parse(body) as WebhookEvent;
          if (typeof e.id !== 'string' || !Number.isFinite(e.created)) throw new Error('not an event');
          return e;
        },
        (events) => o.events.append(events),
      )) &&
      (await move(
        'hub:att:*',
        'attempts',
        (body) => o.attempts.rowOf(attemptOfRecord(JSON.parse(body) as AttemptRecord)),
        (rows) => o.attempts.append(rows),
      ));
    if (!done) return;
    for (const pattern of ['hub:evlog:*', 'hub:atts:*', 'hub:atts-evt:*']) await remove(pattern);
    if (signal.aborted) return;
    await redis.set(MOVED_KEY, new Date().toISOString());
    logger.info(
      { ...counts, seconds: Math.round((Date.now() - started) / 1000) },
      'moved the logs from Redis to PostgreSQL: done',
    );
  } finally {
    clearInterval(renewal);
    await redis
      .eval(
        `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`,
        1,
        MOVING_KEY,
        token,
      )
      .catch(() => {});
  }
}
