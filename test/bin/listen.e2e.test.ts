// `hub webhooks listen` as a developer runs it: a child process that logs in, opens the live event
// stream and forwards a device-meta event to a receiver on this machine, signed as the dispatcher
// signs, with the secret it printed; the hub restarted under it, it reconnects and goes on from
// the last event forwarded, sending none twice.
import assert from 'node:assert/strict';
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { freePort } from '../faults/cluster.ts';
import { createDevice, endProcess, signup, startHub, type TestHub } from '../hub.ts';
import { type Received, Receiver } from '../webhooks/receiver.ts';

const ROOT = new URL('../..', import.meta.url).pathname;

/**
 * The receiver's check of one delivery, given the secret `hub webhooks listen` printed, by the
 * Python receiver library (receivers/python, standard library only): the body, headers and secret
 * go in on stdin, the verified event comes out, or the process fails with the refusal's reason.
 */
const VERIFY_PY = `
import json, sys
from device_hub_webhooks import verify
given = json.load(sys.stdin)
event = verify(body=given["body"].encode("utf-8"), headers=given["headers"], secrets=[given["secret"]])
json.dump(event, sys.stdout)
`;
function verifyDelivery(received: Received, secret: string): { id: string; type: string; data: unknown } {
  const out = execFileSync('python3', ['-c', VERIFY_PY], {
    input: JSON.stringify({ body: received.body, headers: received.headers, secret }),
    stdio: 'pipe', // a refusal's traceback goes in the thrown error, not on the test's output
    env: { ...process.env, PYTHONPATH: join(ROOT, 'receivers/python'), PYTHONDONTWRITEBYTECODE: '1' },
  });
  return JSON.parse(out.toString()) as { id: string; type: string; data: unknown };
}

describe('hub webhooks listen (e2e)', function () {
  this.timeout(120_000);
  let hub: TestHub | undefined;
  let rx: Receiver;
  let child: ChildProcess | undefined;

  before(async () => {
    rx = await new Receiver().start();
  });
  after(async () => {
    if (child) await endProcess(child, 'SIGKILL');
    await hub?.stop();
    await rx.stop();
  });

  it('forwards a device-meta event, signed with the secret it printed, and goes on after the hub restarts', async () => {
    const port = String(await freePort());
    const env = { HUB_PORT: port, HUB_DATA_DIR: mkdtempSync(join(tmpdir(), 'hub-listen-')) };
    hub = await startHub(env, ['api', 'projector', 'processor']);
    const alice = await signup(hub, `alice${randomBytes(3).toString('hex')}`);
    const device = await createDevice(hub, alice);
    const other = await createDevice(hub, alice);

    child = spawn(
      process.execPath,
      [
        'bin/hub.ts',
        'webhooks',
        'listen',
        '--hub',
        hub.url,
        '--username',
        alice.nick,
        '--forward-to',
        `${rx.url}/hooks`,
        '--events',
        'device.device_meta.updated',
        '--device',
        device.id,
      ],
      { cwd: ROOT, env: { ...process.env, HUB_PASSWORD: alice.password }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    let err = '';
    child.stdout!.on('data', (d) => {
      out += d;
    });
    child.stderr!.on('data', (d) => {
      err += d;
    });
    const printed = async (re: RegExp) => {
      const deadline = Date.now() + 20_000;
      while (!re.test(out)) {
        if (Date.now() > deadline || child!.exitCode !== null) throw new Error(`no ${re} in: ${out}\n${err}`);
        await new Promise((r) => setTimeout(r, 25));
      }
      return re.exec(out)!;
    };
    const secret = (await printed(/Webhook signing secret: (whsec_[A-Za-z0-9_-]+)/))[1]!;
    await printed(/Ready/);

    const patch = async (d: typeof device, body: Record<string, unknown>) => {
      const r = await hub!.call('PATCH', `/devices/${d.id}/device-meta`, { token: d.token, body });
      assert.equal(r.status, 200, JSON.stringify(r.body));
    };
    await patch(other, { temp: '1' }); // another device: not forwarded
    await patch(device, { temp: '21' });
    const [first] = await rx.waitFor('/hooks', 1);
    const event = verifyDelivery(first!, secret);
    assert.equal(event.type, 'device.device_meta.updated');
    assert.deepEqual((event.data as { keys: string[] }).keys, ['temp']);
    // The request as the dispatcher makes it: its headers, and the payload of the specification.
    assert.equal(first!.headers['content-type'], 'application/json');
    assert.match(String(first!.headers['user-agent']), /^Hub-Webhooks\//);
    assert.equal(JSON.parse(first!.body).request_id, first!.headers['webhook-id']);
    assert.deepEqual(Object.keys(JSON.parse(first!.body)).sort(), [
      'api_version',
      'created',
      'data',
      'id',
      'livemode',
      'owner',
      'request_id',
      'type',
    ]);
    // The same event as the hub's log has it.
    const logged = await hub.call('GET', `/webhooks/events/${event.id}`, { token: alice.token });
    assert.deepEqual(logged.body.data, event.data);
    // One line per event: type, id, the receiver's status and time.
    await printed(new RegExp(`device\\.device_meta\\.updated\\s+${event.id}\\s+-> 200 in \\d+ ms`));
    assert.throws(() => verifyDelivery(first!, 'whsec_other'), /no_matching_signature/);

    // The hub stops and starts again on its port and data: the stream drops, the listener
    // reconnects from the last event it forwarded.
    await hub.stop();
    hub = undefined;
    hub = await startHub(env, ['api', 'projector', 'processor']);
    await patch(device, { temp: '22' });
    const [, second] = await rx.waitFor('/hooks', 2, 30_000);
    const next = verifyDelivery(second!, secret);
    assert.notEqual(next.id, event.id);
    assert.deepEqual(
      rx.at('/hooks').map((r) => JSON.parse(r.body).data.device_meta.temp),
      ['21', '22'],
    );
    await new Promise((r) => setTimeout(r, 1000));
    assert.equal(rx.at('/hooks').length, 2, 'nothing forwarded twice');

    const { code } = await endProcess(child, 'SIGINT');
    child = undefined;
    assert.equal(code, 0, err);
  });
});
