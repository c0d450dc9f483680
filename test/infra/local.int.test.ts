// infra/local.sh stops only the servers it started from this checkout (found by the pid files under
// its data directory): a server on the same port that another checkout started is left running, and
// the script says so. Every run here has a data directory and ports of its own, so the machine's
// shared servers are never touched. Kafka is left out of the foreign servers: the script before this
// test stopped any broker on the machine (pgrep), and running this test against it must be safe.
import assert from 'node:assert/strict';
import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import { once } from 'node:events';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../faults/cluster.ts';

const LOCAL = new URL('../../infra/local.sh', import.meta.url).pathname;

/** `infra/local.sh <args>` with these ports and data directory only (none of the caller's HUB_*). */
function local(env: Record<string, string>, ...args: string[]): { status: number | null; out: string } {
  const r = spawnSync('bash', [LOCAL, ...args], {
    env: { PATH: process.env.PATH!, HOME: process.env.HOME ?? '/', ...env },
    encoding: 'utf8',
    timeout: 60_000,
  });
  return { status: r.status, out: `${r.stdout}${r.stderr}` };
}

const answers = (port: number) =>
  new Promise<boolean>((resolve) => {
    const socket = connect(port, '127.0.0.1')
      .once('connect', () => resolve(true))
      .once('error', () => resolve(false));
    socket.unref();
    socket.once('connect', () => socket.destroy());
  });

async function untilAnswers(port: number): Promise<void> {
  for (let i = 0; i < 100 && !(await answers(port)); i++) await new Promise((r) => setTimeout(r, 100));
  assert.ok(await answers(port), `nothing answers on ${port}`);
}

const redisPing = (port: number) =>
  spawnSync('redis-cli', ['-p', String(port), 'ping'], { encoding: 'utf8', timeout: 10_000 }).stdout.trim();

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('infra/local.sh: only the servers this checkout started (int)', function () {
  this.timeout(120_000);
  const foreign: ChildProcess[] = [];
  let redisPort: number;
  let pgPort: number;
  let env: Record<string, string>;

  before(async () => {
    // Another checkout's Redis, and something else holding the PostgreSQL port.
    redisPort = await freePort();
    pgPort = await freePort();
    const dir = mkdtempSync(join(tmpdir(), 'hub-foreign-'));
    foreign.push(
      spawn(
        'redis-server',
        ['--port', String(redisPort), '--bind', '127.0.0.1', '--dir', dir, '--save', ''],
        {
          stdio: 'ignore',
        },
      ),
      spawn(
        process.execPath,
        ['-e', `require('node:net').createServer((s) => s.destroy()).listen(${pgPort}, '127.0.0.1')`],
        { stdio: 'ignore' },
      ),
    );
    await untilAnswers(redisPort);
    await untilAnswers(pgPort);
    env = {
      HUB_INFRA_DIR: mkdtempSync(join(tmpdir(), 'hub-infra-')),
      HUB_INFRA_REDIS_PORT: String(redisPort),
      HUB_INFRA_PG_PORT: String(pgPort),
    };
  });
  after(async () => {
    for (const child of foreign) child.kill();
    await Promise.all(foreign.map((child) => child.exitCode ?? once(child, 'exit')));
  });

  it('down leaves a server it did not start running, says so, and exits 1', async () => {
    const r = local(env, 'down', 'redis', 'postgres');
    assert.equal(redisPing(redisPort), 'PONG', r.out);
    assert.ok(await answers(pgPort), r.out);
    assert.ok(foreign.every((child) => child.exitCode === null && child.signalCode === null));
    assert.match(r.out, new RegExp(`redis on 127.0.0.1:${redisPort} was not started from this checkout`));
    assert.match(r.out, new RegExp(`postgres on 127.0.0.1:${pgPort} was not started from this checkout`));
    assert.equal(r.status, 1, r.out);
  });

  it('up uses a server already on the port without claiming it: reset then deletes nothing', () => {
    const up = local(env, 'up', 'redis');
    assert.equal(up.status, 0, up.out);
    assert.match(
      up.out,
      new RegExp(`using the redis on 127.0.0.1:${redisPort}, which this checkout did not start`),
    );
    const kept = join(env.HUB_INFRA_DIR!, 'redis', 'kept');
    mkdirSync(join(env.HUB_INFRA_DIR!, 'redis'), { recursive: true });
    writeFileSync(kept, 'data of this checkout');
    const reset = local(env, 'reset', 'redis');
    assert.equal(reset.status, 1, reset.out);
    assert.match(reset.out, /redis: nothing deleted/);
    assert.ok(existsSync(kept), reset.out);
    assert.equal(redisPing(redisPort), 'PONG', reset.out);
  });

  it('HUB_KAFKA_BROKERS elsewhere than on loopback: up starts no Kafka, down and reset leave it alone', () => {
    const elsewhere = { ...env, HUB_KAFKA_BROKERS: 'kafka.invalid:9092' };
    const up = local(elsewhere, 'up', 'kafka');
    assert.equal(up.status, 0, up.out);
    assert.match(up.out, /using the kafka at kafka\.invalid:9092 \(HUB_KAFKA_BROKERS\): none started here/);
    assert.equal(existsSync(join(env.HUB_INFRA_DIR!, 'kafka')), false, 'nothing fetched or formatted');
    const reset = local(elsewhere, 'reset', 'kafka');
    assert.equal(reset.status, 1, reset.out);
    assert.match(reset.out, /kafka\.invalid:9092 \(HUB_KAFKA_BROKERS\) is not this checkout's: left alone/);
    assert.match(reset.out, /kafka: nothing deleted/);
  });

  it('down stops, by its pid, a server it started (on the port of HUB_REDIS_URL)', async () => {
    const port = await freePort();
    const own = {
      HUB_INFRA_DIR: mkdtempSync(join(tmpdir(), 'hub-infra-')),
      HUB_REDIS_URL: `redis://127.0.0.1:${port}/4`,
    };
    let pid = 0;
    try {
      const up = local(own, 'up', 'redis');
      assert.equal(up.status, 0, up.out);
      pid = Number(readFileSync(join(own.HUB_INFRA_DIR, 'redis', 'redis.pid'), 'utf8'));
      assert.equal(redisPing(port), 'PONG');
      assert.match(local(own, 'status').out, new RegExp(`redis up on 127.0.0.1:${port}\\n`));
      const down = local(own, 'down', 'redis');
      assert.equal(down.status, 0, down.out);
      assert.match(down.out, /redis down/);
      assert.equal(alive(pid), false, 'the Redis this checkout started has ended');
      assert.equal(await answers(port), false);
    } finally {
      if (pid && alive(pid)) process.kill(pid, 'SIGKILL');
    }
  });
});
