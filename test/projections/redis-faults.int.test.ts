// Redis-specific: the checkpoint and the writes it covers land together, so a projector killed
// at any moment resumes without applying an event twice or skipping one; and a runner survives
// Redis and PostgreSQL restarting under it.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PostgresEventStore } from '../../infra/eventstore/postgres.ts';
import { SqliteEventStore } from '../../infra/eventstore/sqlite.ts';
import { RedisReadStore } from '../../infra/readstore/redis.ts';
import { waitForPosition } from '../../projections/consistency.ts';
import { ProjectionRunner } from '../../projections/runner.ts';
import { dropSchema, memoryLogger, testConfig } from '../harness.ts';
import { appendEvents, catalogNamed, freshBuild } from './contract.ts';

const CHILD = new URL('./projector-child.ts', import.meta.url).pathname;
const LOCAL = new URL('../../infra/local.sh', import.meta.url).pathname;
/** infra/local.sh: it stops only the servers this checkout started, and its error says why not. */
const infra = (...args: string[]) => execFileSync('bash', [LOCAL, ...args], { stdio: 'pipe' });
const { redisUrl, postgresUrl } = testConfig();
const logger = memoryLogger('silent').logger;

describe('Redis read store under faults (int)', function () {
  this.timeout(120_000);

  it('a projector SIGKILLed mid-stream resumes to a model identical to a fresh build', async () => {
    const file = join(mkdtempSync(join(tmpdir(), 'hub-kill-')), 'events.sqlite');
    const store = new SqliteEventStore(file);
    const head = await appendEvents(store, 20_000, 300);
    const projection = catalogNamed(`kill${randomUUID().slice(0, 8)}`);
    const readStore = new RedisReadStore(redisUrl);
    try {
      for (const killAt of [3_000, 11_000]) {
        const child = spawn(process.execPath, [CHILD, file, redisUrl, projection.name], {
          stdio: ['ignore', 'pipe', 'inherit'],
        });
        await new Promise<void>((resolve) => {
          child.stdout.on('data', (chunk: Buffer) => {
            const last = Number(chunk.toString().trim().split('\n').pop());
            if (last >= killAt && !child.killed) child.kill('SIGKILL');
          });
          child.once('exit', () => resolve());
        });
        const at = (await readStore.checkpoint(projection.name, 1)).position;
        assert.ok(at >= killAt && at < head, `killed at ${at}`);
      }
      const runner = new ProjectionRunner({ store, readStore, projection, logger, batchSize: 100 });
      await runner.catchUpOnce();
      assert.equal((await readStore.checkpoint(projection.name, 1)).position, head);
      const resumed = await readStore.dump(projection.name, 1);
      const reference = await freshBuild(store, readStore, projection, 7);
      assert.deepEqual(resumed, reference);
      const totals = resumed.totals as Record<string, number>;
      assert.equal(
        Object.values(totals).reduce((a, b) => a + b, 0),
        20_000,
        'every event applied exactly once',
      );
    } finally {
      await readStore.drop(projection.name, 1);
      await readStore.drop(projection.name, 7);
      await readStore.close();
      await store.close();
    }
  });

  it('a PostgreSQL store opened while the database is down works once it is up', async () => {
    const schema = `test_${randomBytes(6).toString('hex')}`;
    infra('down', 'postgres');
    const store = new PostgresEventStore({ url: postgresUrl, schema });
    try {
      await assert.rejects(store.append('s', [{ id: randomUUID(), type: 'Tested', data: {} }]));
      infra('up', 'postgres');
      const r = await store.append('s', [{ id: randomUUID(), type: 'Tested', data: {} }]);
      assert.equal(r.nextRevision, 0);
    } finally {
      infra('up', 'postgres');
      await store.close();
      await dropSchema(postgresUrl, schema);
    }
  });

  it('a runner survives Redis and then PostgreSQL restarting, and catches up with what was appended meanwhile', async () => {
    const schema = `test_${randomBytes(6).toString('hex')}`;
    const store = new PostgresEventStore({ url: postgresUrl, schema });
    const readStore = new RedisReadStore(redisUrl);
    const projection = catalogNamed(`outage${randomUUID().slice(0, 8)}`);
    const runner = new ProjectionRunner({ store, readStore, projection, logger });
    try {
      await appendEvents(store, 200);
      runner.start();
      await runner.caughtUp();

      infra('down', 'redis'); // as SHUTDOWN: the append-only file keeps what was written
      const duringRedisOutage = await appendEvents(store, 300);
      await new Promise((r) => setTimeout(r, 1000));
      infra('up', 'redis');
      await waitForPosition(readStore, [projection.name], duringRedisOutage, 20_000);

      infra('down', 'postgres');
      await new Promise((r) => setTimeout(r, 1000));
      infra('up', 'postgres');
      const afterPostgresOutage = await appendEvents(store, 300);
      await waitForPosition(readStore, [projection.name], afterPostgresOutage, 20_000);

      const totals = (await readStore.get(projection.name, 1, 'totals')) as Record<string, number>;
      assert.equal(
        Object.values(totals).reduce((a, b) => a + b, 0),
        800,
      );
    } finally {
      await runner.stop();
      await readStore.drop(projection.name, 1);
      await readStore.close();
      await store.close();
      await dropSchema(postgresUrl, schema);
    }
  });
});
