// Scale-out: the distributed profile with one and then two instances of each role (api, processor,
// dispatcher; one projector), each its own process on this machine, at a fixed offered load below
// saturation. Shows that each partition of the changes and deliveries topics has one owner at a
// time (the broker's consumer group assignments, sampled), that every accepted write's webhook
// event reaches the receiver (duplicates counted, by event id, and told apart by attempt id), and
// the hub's CPU per event and end-to-end latency at each instance count, the counts alternated;
// then a rebalance under load: a third dispatcher joins, then one leaves (SIGTERM).
//
//   node bench/scale.ts                (needs `npm run infra:up`)
//   HUB_BENCH_SCALE_RATE=250           writes/s offered
//   HUB_BENCH_SCALE_SECONDS=30         each measured window
//   HUB_BENCH_PRINT_ONLY=1             printed, docs untouched
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { AssignerProtocol, Kafka, logLevel } from 'kafkajs';
import pg from 'pg';
import { Agent, request } from 'undici';
import { TOPICS } from '../infra/bus/port.ts';
import { loadConfig } from '../infra/config.ts';
import { LEASE_MS } from '../processors/delivery/dispatcher.ts';
import { endProcess, remoteHub, signup } from '../test/hub.ts';
import {
  benchDevices,
  callHub,
  fmt,
  hubArgs,
  isolatedDistributed,
  kafkaVersion,
  machine,
  percentile,
  recordFigures,
  releaseDistributed,
  startListening,
  writeSection,
} from './report.ts';
import { type Arrival, deliveries, type GroupSample, longestGap, ownership } from './scale-audit.ts';

const RATE = Number(process.env.HUB_BENCH_SCALE_RATE ?? 250);
const MEASURE_S = Number(process.env.HUB_BENCH_SCALE_SECONDS ?? 30);
/** Before the first window: four fresh processes warm up (their first seconds run slow). */
const WARMUP_S = 10;
/** After instances join or leave, before a window: the groups rebalance and the new code warms up. */
const SETTLE_S = 15;
/** Each half of the rebalance: a third dispatcher joins, and this long later one leaves. */
const REBALANCE_S = 15;
/** Rounds of one then two instances, alternated: the machine's speed drifts over minutes. */
const ROUNDS = 2;
/** Accounts, each with one subscription and its devices: the deliveries topic is keyed by
 * subscription, so one subscription would put every job on one partition, one dispatcher's. */
const USERS = 16;
const DEVICES_PER_USER = 12;
const REDIS_DB = 15;
const SAMPLE_MS = 500;
/** Before the load: each role's CPU with nothing to do. */
const IDLE_S = 10;
/** CPU time is counted in clock ticks (/proc/<pid>/stat). */
const TICKS = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout) || 100;

/** A receiver in its own process: answers 200 and records each POST's arrival, event id, the
 * write it came from and the attempt's id; a GET takes what it recorded. */
const RECEIVER = `
  const http = require('node:http');
  let arrivals = [];
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      if (req.method === 'GET') { res.end(JSON.stringify(arrivals)); arrivals = []; return; }
      const at = Date.now();
      try {
        const body = JSON.parse(Buffer.concat(chunks));
        arrivals.push([at, body.id, String(body.data?.changed?.n ?? ''), String(req.headers['webhook-id'] ?? '')]);
      } catch {}
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.end('ok');
    });
  });
  server.keepAliveTimeout = 60000;
  server.listen(0, '127.0.0.1', () => console.log('listening on http://127.0.0.1:' + server.address().port));
`;

type Role = 'api' | 'projector' | 'processor' | 'dispatcher';
interface Instance {
  role: Role;
  /** `dispatcher 2`: the role and the how-manieth of it started. */
  name: string;
  child: import('node:child_process').ChildProcess;
  url: string;
  pid: number;
}

/** CPU time of a process so far, in ms (every thread of it: user and system). */
function cpuMs(pid: number): number {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' '); // from field 3, the state
    return ((Number(fields[11]) + Number(fields[12])) * 1000) / TICKS; // utime, stime
  } catch {
    return Number.NaN;
  }
}

const sleep = (s: number) => new Promise((r) => setTimeout(r, s * 1000));
const log = (line: string) => process.stderr.write(`scale: ${line}\n`);

interface Window {
  label: string;
  instances: 1 | 2;
  from: number;
  to: number;
  /** The hub processes' CPU over the window, in ms, by role. */
  cpu: Record<Role, number>;
}

async function main() {
  const config = loadConfig();
  const rx = await startListening(['-e', RECEIVER], {});
  const isolated = await isolatedDistributed(REDIS_DB);
  const partitions = loadConfig(isolated).kafkaPartitions;
  const prefix = isolated.HUB_KAFKA_PREFIX!;
  const dataDir = mkdtempSync(join(tmpdir(), 'hub-bench-scale-'));
  const env: Record<string, string> = {
    ...isolated,
    HUB_PORT: '0',
    HUB_LOG_LEVEL: 'warn',
    HUB_DATA_DIR: dataDir,
    // All load comes from one address: the per-address limits would measure themselves.
    HUB_RATE_LIMIT_PER_SECOND: '0',
    HUB_LOGIN_LIMIT_PER_MINUTE: '1000000',
    HUB_DEVICE_REGISTER_LIMIT_PER_MINUTE: '1000000',
    // The receiver is on the loopback, which the egress rules refuse unless told.
    HUB_WEBHOOK_ALLOW_HTTP: 'true',
    HUB_WEBHOOK_ALLOW_NETWORKS: '127.0.0.0/8',
    // Both counts on one path: an only processor would otherwise be handed the changes by its
    // relay in memory, and the comparison would be of two paths rather than of one scaled out.
    HUB_RELAY_HANDOFF: 'topic',
  };
  const instances: Instance[] = [];
  const started: Record<Role, number> = { api: 0, projector: 0, processor: 0, dispatcher: 0 };
  const start = async (role: Role, extra: Record<string, string> = {}): Promise<Instance> => {
    const { child, url } = await startListening(hubArgs(env, [role]), { ...env, ...extra });
    const instance = { role, name: `${role} ${++started[role]}`, child, url, pid: child.pid! };
    instances.push(instance);
    log(`${instance.name} started (pid ${instance.pid})`);
    return instance;
  };
  const stop = async (instance: Instance) => {
    const ended = await endProcess(instance.child, 'SIGTERM');
    instances.splice(instances.indexOf(instance), 1);
    log(`${instance.name} stopped (SIGTERM, exit ${ended.code} after ${fmt(ended.ms)} ms)`);
    return ended;
  };
  const byPid = new Map<string, string>(); // `hub-<pid>` (a Kafka client id) → the instance's name
  const name = (client: string) => byPid.get(client) ?? client;

  const admin = new Kafka({ brokers: config.kafkaBrokers, logLevel: logLevel.NOTHING }).admin();
  const samples: GroupSample[] = [];
  /** When a sample found the broker silent: a window with one is marked (a broker restart by other
   * work on this machine stalls the pipeline, and that window measures the stall). */
  const brokerSilent: number[] = [];
  const topicOf: Record<string, string> = {
    [`${prefix}hub-processor`]: `${prefix}${TOPICS.changes}`,
    [`${prefix}hub-dispatcher`]: `${prefix}${TOPICS.deliveries}`,
  };
  let sampling = false;
  let sampler: Promise<void> | undefined;
  const arrivals: Arrival[] = [];
  const collect = async () => {
    const res = await request(rx.url);
    for (const [at, event, n, attempt] of (await res.body.json()) as [number, string, string, string][])
      if (!n.startsWith('probe')) arrivals.push({ at, event, n, attempt });
  };

  try {
    const api1 = await start('api');
    // The mailer runs with the projector: its links point at the API.
    env.HUB_PUBLIC_URL = api1.url;
    await start('projector');
    await start('processor');
    await start('dispatcher');
    for (const i of instances) byPid.set(`hub-${i.pid}`, i.name);

    // The fleet: accounts with a subscription each to a path of the receiver, and their devices.
    const hub = remoteHub(api1.url, dataDir);
    const tag = Date.now().toString(36);
    const fleet: { id: string; token: string }[] = [];
    for (let u = 0; u < USERS; u++) {
      const user = await signup(hub, `scale${tag}u${u}`);
      await callHub(
        api1.url,
        'POST',
        '/webhooks/',
        {
          nick: `scale${u}`,
          url: `${rx.url}/u${u}`,
          event_types: ['device.device_meta.updated'],
          enabled: true,
        },
        user.token,
      );
      fleet.push(...(await benchDevices(api1.url, user.token, DEVICES_PER_USER)));
    }
    log(`${USERS} accounts, ${fleet.length} devices; probing each subscription`);
    // A write per account, until each one's delivery comes: the subscriptions are projected and the
    // pipeline runs end to end before the load starts (the probes are left out of the figures).
    const probed = new Set<string>();
    for (let tries = 0; probed.size < USERS && tries < 60; tries++) {
      for (let u = 0; u < USERS; u++) {
        if (probed.has(`probe-${u}`)) continue;
        const d = fleet[u * DEVICES_PER_USER]!;
        await callHub(
          api1.url,
          'PATCH',
          `/devices/${d.id}/device-meta`,
          { n: `probe-${u}-${tries}` },
          d.token,
        );
      }
      await sleep(1);
      const res = await request(rx.url);
      for (const [, , n] of (await res.body.json()) as [number, string, string][])
        probed.add(n.split('-').slice(0, 2).join('-'));
    }
    if (probed.size < USERS)
      throw new Error(`only ${probed.size} of ${USERS} subscriptions delivered a probe`);
    await sleep(2); // the probes' retries, if any, arrive before the load
    await request(rx.url).then((r) => r.body.dump());

    // What each role spends with nothing to do: the fixed cost another instance adds.
    const idleBefore = instances.map((i) => ({ i, ms: cpuMs(i.pid) }));
    const idleFrom = Date.now();
    await sleep(IDLE_S);
    const idle = Object.fromEntries(
      idleBefore.map(({ i, ms }) => [i.role, (cpuMs(i.pid) - ms) / ((Date.now() - idleFrom) / 1000)]),
    ) as Record<Role, number>; // ms of CPU a second

    // The load: RATE writes a second, round-robin over the devices and the API instances running.
    await admin.connect();
    const apis = [api1.url];
    const accepted = new Map<string, number>(); // n → when its 200 came
    const sentAt = new Map<string, number>();
    const roundTrips = new Map<string, number>(); // n → ms to its 200
    const refusals = new Map<string, number>(); // status and error code → count
    const refusedAt: number[] = [];
    const refuse = (why: string) => {
      refusedAt.push(Date.now());
      refusals.set(why, (refusals.get(why) ?? 0) + 1);
    };
    const sender = new Agent({ connections: 256 });
    let loading = true;
    const load = (async () => {
      const t0 = performance.now();
      const inflight = new Set<Promise<void>>();
      let sent = 0;
      while (loading) {
        const due = Math.floor(((performance.now() - t0) / 1000) * RATE);
        for (; sent < due; sent++) {
          const n = String(sent);
          const d = fleet[sent % fleet.length]!;
          const at = Date.now();
          sentAt.set(n, at);
          const p = request(`${apis[sent % apis.length]}/devices/${d.id}/device-meta`, {
            method: 'PATCH',
            dispatcher: sender,
            body: JSON.stringify({ n }),
            headers: { 'content-type': 'application/json', authorization: `Bearer ${d.token}` },
          }).then(
            async (res) => {
              if (res.statusCode === 200) {
                await res.body.dump();
                const now = Date.now();
                accepted.set(n, now);
                roundTrips.set(n, now - at);
              } else {
                const answer = (await res.body.json().catch(() => ({}))) as { error?: string };
                refuse(`${res.statusCode} ${answer.error ?? ''}`.trim());
              }
            },
            (err: Error & { code?: string }) => refuse(err.code ?? 'error'),
          );
          inflight.add(p);
          void p.finally(() => inflight.delete(p));
        }
        await new Promise((r) => setTimeout(r, 1));
      }
      await Promise.allSettled([...inflight]);
    })();
    sampling = true;
    sampler = (async () => {
      while (sampling) {
        try {
          const at = Date.now();
          const { groups } = await admin.describeGroups(Object.keys(topicOf));
          for (const g of groups)
            samples.push({
              at,
              group: g.groupId.slice(prefix.length),
              state: g.state,
              members: g.members.map((m) => ({
                client: m.clientId,
                partitions:
                  (m.memberAssignment.length > 0
                    ? AssignerProtocol.MemberAssignment.decode(m.memberAssignment)?.assignment[
                        topicOf[g.groupId]!
                      ]
                    : undefined) ?? [],
              })),
            });
        } catch (err) {
          brokerSilent.push(Date.now());
          log(`a group sample failed: ${(err as Error).message}`);
        }
        await new Promise((r) => setTimeout(r, SAMPLE_MS));
      }
    })();
    const collector = setInterval(() => void collect().catch(() => undefined), 1000);

    const windows: Window[] = [];
    /** The run's stretches, to say when refusals and duplicates came. */
    const phases: { name: string; from: number }[] = [{ name: 'warm-up', from: Date.now() }];
    const phase = (name: string) => phases.push({ name, from: Date.now() });
    const measure = async (instancesNow: 1 | 2) => {
      const label = `${instancesNow} of each`;
      phase(`window ${windows.length + 1} (${label})`);
      const before = instances.map((i) => ({ i, ms: cpuMs(i.pid) }));
      const from = Date.now();
      log(`measuring ${label} for ${MEASURE_S} s`);
      await sleep(MEASURE_S);
      const to = Date.now();
      const cpu: Record<Role, number> = { api: 0, projector: 0, processor: 0, dispatcher: 0 };
      for (const { i, ms } of before) cpu[i.role] += cpuMs(i.pid) - ms;
      windows.push({ label, instances: instancesNow, from, to, cpu });
    };
    let second: Instance[] = [];
    const scaleUp = async () => {
      phase('second instances joining, and settling');
      second = await Promise.all((['api', 'processor', 'dispatcher'] as const).map((role) => start(role)));
      for (const i of second) byPid.set(`hub-${i.pid}`, i.name);
      apis.push(second[0]!.url);
      await sleep(SETTLE_S);
    };
    const scaleDown = async () => {
      phase('second instances leaving (SIGTERM), and settling');
      apis.splice(apis.indexOf(second[0]!.url), 1);
      await sleep(1); // its writes in flight are answered
      await Promise.all(second.map(stop));
      await sleep(SETTLE_S);
    };
    log(`load at ${RATE} writes/s; warming up ${WARMUP_S} s`);
    await sleep(WARMUP_S);
    for (let round = 0; round < ROUNDS; round++) {
      await measure(1);
      await scaleUp();
      await measure(2);
      if (round < ROUNDS - 1) await scaleDown();
    }
    // The rebalance under load: a third dispatcher joins; then the first leaves.
    phase('third dispatcher joining');
    const joined = Date.now();
    const third = await start('dispatcher');
    byPid.set(`hub-${third.pid}`, third.name);
    await sleep(REBALANCE_S);
    phase('first dispatcher leaving (SIGTERM)');
    const leaving = Date.now();
    const first = instances.find((i) => i.name === 'dispatcher 1')!;
    const left = await stop(first);
    await sleep(REBALANCE_S);
    const rebalanceEnd = Date.now();

    phase('after the load');
    loading = false;
    await load;
    const lastWrite = Date.now();
    log(`load stopped: ${fmt(sentAt.size)} sent, ${fmt(accepted.size)} accepted; waiting for the deliveries`);
    for (let waited = 0; waited < 60; waited++) {
      await collect();
      const got = new Set(arrivals.map((a) => a.n));
      if ([...accepted.keys()].every((n) => got.has(n))) break;
      await sleep(1);
    }
    await sleep(2); // late duplicates, if any
    await collect();
    clearInterval(collector);
    sampling = false;
    await sampler;
    await sender.close();

    // The attempts as the dispatchers recorded them (PostgreSQL's attempt log), by outcome.
    const schema = /[?&]schema=(\w+)/.exec(env.HUB_POSTGRES_URL!)![1]!;
    const db = new pg.Client({ connectionString: config.postgresUrl });
    await db.connect();
    const outcomes = await db
      .query<{ status: string; count: string }>(
        `SELECT status, count(*) FROM ${schema}.hub_attempt_log GROUP BY status ORDER BY count(*) DESC`,
      )
      .then((r) => r.rows.map((row) => `${fmt(Number(row.count))} ${row.status}`).join(', '))
      .catch((err: Error) => `not read (${err.message})`)
      .finally(() => db.end());

    // The figures.
    const audit = deliveries(accepted, arrivals);
    const firstArrival = new Map<string, number>();
    for (const a of arrivals)
      if (!firstArrival.has(a.event) || a.at < firstArrival.get(a.event)!) firstArrival.set(a.event, a.at);
    const firstTimes = [...firstArrival.values()];
    const seen = new Set<string>();
    const duplicateTimes: number[] = [];
    for (const a of [...arrivals].sort((x, y) => x.at - y.at)) {
      if (seen.has(a.event)) duplicateTimes.push(a.at);
      seen.add(a.event);
    }
    const latencyOf = (from: number, to: number) => {
      const ms = [...accepted]
        .filter(([, at]) => at >= from && at < to)
        .map(([n]) => audit.latencies.get(n))
        .filter((x): x is number => x !== undefined)
        .sort((a, b) => a - b);
      return {
        p50: percentile(ms, 50),
        p99: percentile(ms, 99),
        max: ms[ms.length - 1] ?? Number.NaN,
        count: ms.length,
      };
    };
    const roundTripP99 = (from: number, to: number) =>
      percentile(
        [...roundTrips]
          .filter(([n]) => sentAt.get(n)! >= from && sentAt.get(n)! < to)
          .map(([, ms]) => ms)
          .sort((a, b) => a - b),
        99,
      );
    const rows = windows.map((w) => {
      const events = firstTimes.filter((t) => t >= w.from && t < w.to).length;
      const cpu = Object.values(w.cpu).reduce((a, b) => a + b, 0);
      return {
        ...w,
        events,
        rate: events / ((w.to - w.from) / 1000),
        cpuPerEvent: (1000 * cpu) / events, // µs
        perRole: Object.fromEntries(
          Object.entries(w.cpu).map(([r, ms]) => [r, (1000 * ms) / events]),
        ) as Record<Role, number>,
        cores: cpu / (w.to - w.from),
        latency: latencyOf(w.from, w.to),
        patchP99: roundTripP99(w.from, w.to),
        brokerSilent: brokerSilent.some((t) => t >= w.from - SETTLE_S * 1000 && t < w.to),
      };
    });
    /** A window counts when the hub kept up: delivering the offered rate (within 10 %), not
     * catching up a backlog (larger batches, less CPU an event) nor falling behind; and the broker
     * answered throughout. */
    const counted = rows.map((r) => ({
      ...r,
      excluded: r.brokerSilent
        ? 'the broker did not answer'
        : Math.abs(r.rate / RATE - 1) > 0.1
          ? 'not at the offered rate'
          : undefined,
    }));
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
    const one = counted.filter((r) => r.instances === 1 && !r.excluded);
    const two = counted.filter((r) => r.instances === 2 && !r.excluded);
    const cpuOne = mean(one.map((r) => r.cpuPerEvent));
    const cpuTwo = mean(two.map((r) => r.cpuPerEvent));
    const cpuRatio = cpuTwo / cpuOne;
    const p99One = Math.max(...one.map((r) => r.latency.p99));
    const p99Two = Math.max(...two.map((r) => r.latency.p99));
    const groups = ['hub-processor', 'hub-dispatcher'].map((group) => ({
      group,
      ...ownership(
        samples.filter((s) => s.group === group),
        partitions,
      ),
      final: samples.filter((s) => s.group === group).at(-1),
    }));
    const ownedOnce = groups.every(
      (g) => g.overlaps.length === 0 && g.uncovered.length === 0 && g.stable > 0,
    );
    const steady = rows.filter((r) => r.instances === 2).at(-1)!;
    const steadyGap = longestGap(firstTimes, steady.from, steady.to);
    const joinGap = longestGap(firstTimes, joined, leaving);
    const leaveGap = longestGap(firstTimes, leaving, rebalanceEnd);
    const joinLatency = latencyOf(joined, leaving);
    const leaveLatency = latencyOf(leaving, rebalanceEnd);
    const dupsIn = (from: number, to: number) => duplicateTimes.filter((t) => t >= from && t < to).length;
    /** `times` counted by the phase they fell in: "3 in window 2 (2 of each), 1 after the load". */
    const byPhase = (times: number[]) =>
      phases
        .map((p, i) => ({
          p,
          n: times.filter((t) => t >= p.from && t < (phases[i + 1]?.from ?? Infinity)).length,
        }))
        .filter(({ n }) => n > 0)
        .map(({ p, n }) => `${fmt(n)} during ${p.name}`)
        .join(', ');
    const idleExtra = (idle.api + idle.processor + idle.dispatcher) / RATE; // ms a second / events a second
    const refused = [...refusals].map(([s, n]) => `${fmt(n)} × ${s}`).join(', ') || 'none';
    const lostOk = audit.lost.length === 0;
    const cpuOk = Math.abs(cpuRatio - 1) <= 0.2;
    const at = (t: number) => `${fmt((t - windows[0]!.from) / 1000, 1)} s`;

    const windowTable = [
      '| Window | Instances (api, processor, dispatcher) | Events delivered/s | Hub CPU, cores | CPU per event µs | api | projector | processor | dispatcher | PATCH p99 ms | End-to-end p50 ms | p99 ms | max ms |',
      '|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|',
      ...counted.map(
        (r, i) =>
          `| ${i + 1}${r.excluded ? ` (${r.excluded}: left out)` : ''} | ${r.instances} of each | ${fmt(r.rate)} | ${fmt(r.cores, 2)} | ${fmt(r.cpuPerEvent)} | ${fmt(r.perRole.api)} | ${fmt(r.perRole.projector)} | ${fmt(r.perRole.processor)} | ${fmt(r.perRole.dispatcher)} | ${fmt(r.patchP99)} | ${fmt(r.latency.p50)} | ${fmt(r.latency.p99)} | ${fmt(r.latency.max)} |`,
      ),
    ];
    const ownerTable = [
      '| Group (topic) | Samples | Stable | Most members | Partitions with two owners | Stable samples missing a partition | Handovers seen | Last assignment |',
      '|---|---:|---:|---:|---:|---:|---:|---|',
      ...groups.map(
        (g) =>
          `| ${g.group} (${g.group === 'hub-processor' ? TOPICS.changes : TOPICS.deliveries}, ${partitions} partitions) | ${fmt(g.samples)} | ${fmt(g.stable)} | ${g.mostMembers} | ${g.overlaps.length} | ${g.uncovered.length} | ${g.handovers} | ${(
            g.final?.members ?? []
          )
            .map((m) => `${name(m.client)}: ${[...m.partitions].sort((a, b) => a - b).join(', ') || 'none'}`)
            .join('; ')} |`,
      ),
    ];
    const duplicatesLine =
      audit.duplicates === 0
        ? 'No event was delivered twice.'
        : `${fmt(audit.duplicates)} deliveries repeated an event already delivered: ${fmt(audit.sameAttempt)} under an attempt id already seen, ${fmt(audit.newAttempt)} under a new one (${byPhase(duplicateTimes)}). The dispatchers recorded ${outcomes} attempts.`;
    const body = `## Scale-out

\`node bench/scale.ts\` on ${machine()}; Kafka ${kafkaVersion()}. The distributed profile (PostgreSQL event store, Redis, Kafka; a schema, topic prefix and Redis database of its own) with each role a process of its own: one projector, and one and then two instances each of the API, the processor and the dispatcher, started with \`hub <role>\` as deployed, the changes always through their topic (\`HUB_RELAY_HANDOFF=topic\`: with one processor the relay would otherwise hand them to it in memory, see [End-to-end latency, distributed](#end-to-end-latency-distributed), and the two counts would compare two paths). ${USERS} accounts each subscribe a path of one receiver (a keep-alive \`node:http\` server in its own process, answering 200) to their devices' metadata changes; the deliveries topic is keyed by subscription, so the jobs spread over its partitions. The bench sends \`PATCH /devices/{id}/device-meta\` at a fixed ${fmt(RATE)} writes/s (below saturation here), round-robin over ${fmt(USERS * DEVICES_PER_USER)} devices and over the API instances running, each write a new value \`n\`, so each makes one event and one delivery. The load runs without a break from a ${WARMUP_S}-s warm-up to the end: windows of ${MEASURE_S} s with one instance of each role, then two (the second instances started ${SETTLE_S} s before), alternated ${ROUNDS} times (the second instances stopped with SIGTERM, ${SETTLE_S} s before a one-instance window); then the rebalance: a third dispatcher joins, and ${REBALANCE_S} s later the first leaves (SIGTERM), ${REBALANCE_S} s more under load.

Measured: the broker's assignment of each consumer group (kafkajs \`describeGroups\`, every ${SAMPLE_MS} ms for the whole run, members named by their client id \`hub-<pid>\`); every accepted write (answered 200) against the receiver's POSTs, matched by the written value and the event id (the body's \`id\`), with each POST's attempt id (\`Webhook-Id\`); CPU as the sum of every hub process's user and system time from \`/proc/<pid>/stat\` over the window (the projector's too; not PostgreSQL, Redis or Kafka, which other work on this machine shares), divided by the events first delivered in the window; latency from the write's 200 to the event's first arrival, for the writes accepted in the window. Offered ${fmt(sentAt.size)} writes in all, ${fmt(accepted.size)} accepted, refused: ${refused}${refusedAt.length ? ` (${byPhase(refusedAt)})` : ''}.${brokerSilent.length > 0 ? ` The broker did not answer ${brokerSilent.length} of the group samples, from ${at(brokerSilent[0]!)} to ${at(brokerSilent.at(-1)!)} (restarted by other work on this machine): the windows it touched are marked and left out of the means (as are windows not delivering the offered rate within 10 %: a backlog caught up, or falling behind), and the deliveries below count through it.` : ''}

Target (issue 45): partitions owned once, 0 lost, duplicates counted and explained, CPU per event within 20 % between one and two instances.

${windowTable.join('\n')}

CPU per event, the mean of the windows: ${fmt(cpuOne)} µs with one instance of each role, ${fmt(cpuTwo)} µs with two: ${fmt(cpuRatio, 2)} ×. ${cpuOk ? 'Within' : 'Not within'} 20 % in this run; windows of the same count ranged ${fmt(Math.min(...one.map((r) => r.cpuPerEvent)))}–${fmt(Math.max(...one.map((r) => r.cpuPerEvent)))} µs (one) and ${fmt(Math.min(...two.map((r) => r.cpuPerEvent)))}–${fmt(Math.max(...two.map((r) => r.cpuPerEvent)))} µs (two) while other work shared the machine (load average ${loadavg()[0]!.toFixed(1)} at the end, on ${cpus().length} cores), so a difference smaller than that spread is not shown by one run. With nothing to do (${IDLE_S} s before the load, one instance of each), the roles spent ${fmt(idle.api, 1)} (api), ${fmt(idle.projector, 1)} (projector), ${fmt(idle.processor, 1)} (processor) and ${fmt(idle.dispatcher, 1)} (dispatcher) ms of CPU a second: the second api, processor and dispatcher add about ${fmt(1000 * idleExtra)} µs an event at ${fmt(RATE)} events/s before they handle any.

Ownership, over the whole run (every change of instance count and the rebalance):

${ownerTable.join('\n')}

${ownedOnce ? 'No sample showed a partition with two owners, and every stable sample had each partition owned.' : 'Not met: a sample showed a partition with two owners, or a stable sample left one unowned (see the table).'} The samples are the broker's view (one assignment per generation, made by the group's leader); a member whose partitions were revoked stops fetching them and finishes its running batch before it rejoins (kafkajs's eager protocol), so two members do not handle one partition at once unless one of them lost the group without knowing it, which would show here as duplicates.

Delivery: ${fmt(audit.accepted)} writes accepted, ${fmt(audit.delivered)} delivered at least once, **${fmt(audit.lost.length)} lost**${audit.lost.length ? ` (${audit.lost.slice(0, 10).join(', ')}…)` : ''}; ${fmt(audit.derivedTwice.length)} writes delivered under two event ids; ${fmt(audit.unaccepted)} events delivered for writes not answered 200. ${duplicatesLine} Why so few: a job's id is made from its event and subscription, and the Redis schedule keeps a key for every job it holds or finished (a job delivered before it was ever stored is marked done there as it finishes; the key kept for the retention); a dispatcher leaves out of each chunk it takes from the topic the jobs the schedule knows (one look-up a chunk), so a job taken again, from a partition that moved before its offset was committed (offsets are committed once a second) or a processor batch derived again, is dropped there; an event is attempted again only when its attempt was not recorded as finished: a dispatcher killed mid-attempt (its lease of ${LEASE_MS / 1000} s runs out and another claims the job) or an attempt that timed out though the receiver got it. SIGTERM lets the leaving dispatcher finish its attempts and commit before it leaves the group.

Rebalance under load (the receiver's longest time without a new event; the steady two-instance window before, for comparison: ${fmt(steadyGap.ms)} ms):

| Phase | Longest gap ms | At | End-to-end p50 ms | p99 ms | max ms | Duplicates |
|---|---:|---:|---:|---:|---:|---:|
| third dispatcher joins (${REBALANCE_S} s) | ${fmt(joinGap.ms)} | ${at(joinGap.at)} | ${fmt(joinLatency.p50)} | ${fmt(joinLatency.p99)} | ${fmt(joinLatency.max)} | ${fmt(dupsIn(joined, leaving))} |
| the first leaves, SIGTERM (${REBALANCE_S} s; it exited in ${fmt(left.ms)} ms) | ${fmt(leaveGap.ms)} | ${at(leaveGap.at)} | ${fmt(leaveLatency.p50)} | ${fmt(leaveLatency.p99)} | ${fmt(leaveLatency.max)} | ${fmt(dupsIn(leaving, rebalanceEnd))} |

Times are from the first window's start; the last write was sent at ${at(lastWrite)}.

What a larger machine should expect. Here two cores carry the hub's processes (seven at most), PostgreSQL, Redis, Kafka, the receiver and the load, so a second instance cannot add capacity: what this run shows is that the work is split (each partition one owner: the assignments above) without costing more per event, and that nothing is lost while members come and go. With cores to spare, processors and dispatchers scale with their partitions: ${partitions} per topic (\`HUB_KAFKA_PARTITIONS\`, fixed when the topics are created) bound each group at ${partitions} busy members, and a device's changes stay in one partition and a subscription's jobs in one, so one very busy device or subscription stays one member's work whatever the count (and a few subscriptions spread unevenly: here ${USERS} over ${partitions} partitions). API instances share nothing but the stores. What does not scale out is then the limit: every append, from every API instance, takes one PostgreSQL advisory lock while it picks its global positions (\`infra/eventstore/postgres.ts\`); one relay at a time (a lease) moves every stored event to the changes topic; one projector keeps the read models; and every dispatcher's schedule is one Redis (a few calls a delivery). So expect throughput to grow near-linearly with processor and dispatcher instances up to the partition count and to the cores given them, until the relay, the append lock or Redis reaches its own ceiling (\`bench/eventstore.ts\`, \`bench/derivation.ts\` and redis-benchmark in the summary give those on this machine); and CPU per event flat, as here, once each process is busy enough that its fixed costs (heartbeats, fetch waits, timers) are small beside its share of the events: at a low rate per instance those fixed costs are what grows with the instance count. Each join or leave pauses the whole group (kafkajs's eager protocol: every member gives up its partitions and rejoins) for about as long as its slowest member takes to finish its running batch and rejoin, the pauses measured above; more members do not lengthen it, but each change of membership costs one, so instances are best added or removed together rather than one after another.
`;
    writeSection('scale', body);
    recordFigures('scale', [
      {
        benchmark: `scale-out at ${fmt(RATE)} writes/s: CPU per event, 2 instances of each role against 1 (${fmt(audit.lost.length)} lost, partitions owned once: ${ownedOnce ? 'yes' : 'no'})`,
        profile: 'distributed',
        value: cpuTwo,
        unit: 'µs of CPU per event',
        ceiling: cpuOne,
        ceilingName: '1 instance of each role',
        target: 'within 20 %, 0 lost, partitions owned once',
        met: cpuOk && lostOk && ownedOnce,
      },
      {
        benchmark: `scale-out at ${fmt(RATE)} writes/s: end-to-end p99, 2 instances of each role`,
        profile: 'distributed',
        value: p99Two,
        unit: 'ms',
        ceiling: p99One,
        ceilingName: 'p99 with 1 instance of each role',
      },
      {
        benchmark: `scale-out rebalance (a dispatcher joins, one leaves): longest delivery pause (${fmt(dupsIn(joined, rebalanceEnd))} duplicates)`,
        profile: 'distributed',
        value: Math.max(joinGap.ms, leaveGap.ms),
        unit: 'ms',
        ceiling: steadyGap.ms,
        ceilingName: 'longest gap, steady 2 instances',
      },
    ]);
    console.log(body);
  } finally {
    sampling = false;
    await sampler;
    await admin.disconnect().catch(() => undefined);
    await Promise.all(instances.map((i) => endProcess(i.child, 'SIGTERM')));
    rx.child.kill();
    await releaseDistributed(isolated, REDIS_DB);
  }
}

await main();
