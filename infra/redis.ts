// The hub's connections to Redis for commands (the read models, the schedule, the actors' states,
// read-your-writes), opened alike wherever they are, and the check of the database they name.
import { Redis } from 'ioredis';

/**
 * A connection for commands. Those issued in one turn of the event loop go out in one write: the
 * processor's partitions and the dispatcher's attempts issue many at once, and a write to a socket
 * cost more than the command (at 1,000 changes/s, the dispatcher's writes to Redis were a sixth of
 * its CPU). It reconnects by itself; meanwhile callers see their commands fail (three retries).
 */
export function commandConnection(url: string): Redis {
  const redis = new Redis(url, { maxRetriesPerRequest: 3, enableAutoPipelining: true });
  redis.on('error', () => {});
  return redis;
}

/**
 * Why the database HUB_REDIS_URL names cannot be used, or undefined. ioredis selects it on
 * connecting but, refused (`/99` where the server has 16), carries on in database 0: a typo would
 * put the hub in a database others share. Asked once at start and by `hub doctor`.
 */
export async function databaseProblem(redis: Redis): Promise<string | undefined> {
  const db = redis.options.db ?? 0;
  if (!db) return undefined;
  try {
    await redis.select(db);
    return undefined;
  } catch (err) {
    if (/DB index/i.test((err as Error).message)) return `it has no database ${db}`;
    throw err;
  }
}
