// The `hub` command's commands (bin/hub.ts launches them): one command whose roles run together
// (start) or apart, plus the operator commands.
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { VERSION } from '../api/app.ts';
import { dependencyDown } from '../api/errors.ts';
import { runDoctor } from '../hub/doctor.ts';
import { forRoles, lockDataDir, type Role, startNode } from '../hub/node.ts';
import { openStores } from '../hub/stores.ts';
import { type Config, ConfigError, loadConfig } from '../infra/config.ts';
import { newOwnerId } from '../infra/readstore/redis.ts';
import { createLogger } from '../infra/telemetry.ts';
import { projectionNamed, projections } from '../projections/index.ts';
import {
  progressLine,
  projectionStatus,
  ReplayRunningError,
  replayProjection,
} from '../projections/replay.ts';
import { LISTEN_HELP, listenCommand } from './listen.ts';

const HELP: Record<string, string> = {
  '': `Device Hub

Usage: hub <command> [options]

Roles (each scales out by running more copies):
  start                      Every role in one process (the embedded profile's default).
  api                        The HTTP API.
  projector                  The projection runners that keep read models current.
  processor                  The change relay and the stream processor that derives webhook events.
  dispatcher                 Signs and delivers webhooks, schedules retries, dead-letters.

Developers:
  webhooks listen            Forwards your account's events, live and signed, to a receiver on
                             this machine (--forward-to http://localhost:3000/hooks).

Operators:
  doctor                     Checks the configuration and every dependency; says what is wrong.
  projections status         Each projection's version, generation, checkpoint and lag.
  projections replay <name>  Rebuild a projection into a new generation, then switch reads to it.

In the embedded profile the projector, the processor and the dispatcher run in the process whatever
the role named (its read models and queues live there), and a data dir is one process's: run
'hub start'.

Run 'hub <command> --help' for more, 'hub --version' for the version. Configuration comes from
HUB_* environment variables (README.md lists them all).`,
  start:
    'Usage: hub start\n\nRuns every role in this process: the API, the projector, the processor and the dispatcher.',
  dispatcher:
    'Usage: hub dispatcher\n\nRuns the webhook dispatcher, a member of the hub-dispatcher consumer group on the deliveries\ntopic: it stores jobs in the shared schedule and delivers due ones. More copies share the work.',
  processor:
    'Usage: hub processor\n\nRuns the change relay (one at a time holds its lease; others wait as standbys) and the stream\nprocessor, a member of the hub-processor consumer group on the changes topic: more copies share its partitions.',
  api: 'Usage: hub api\n\nRuns the HTTP API only (in the embedded profile the projector runs in the same process).',
  projector:
    'Usage: hub projector\n\nRuns the projection runners only. Each projection is applied by whichever runner holds its checkpoint.',
  doctor: `Usage: hub doctor

Checks the configuration and reaches every dependency of the profile, then prints one line per
check (ok, warn or FAIL) with what it found or what is wrong and how to fix it:
  config      every HUB_* variable parses (all invalid ones are listed); unknown HUB_* names
  listen      HUB_HOST:HUB_PORT can be served on
  data-dir    embedded: HUB_DATA_DIR exists or can be created, and is writable
  sqlite      embedded: the event store file opens; its head position
  postgres    distributed: connects, server version, schema, head position or right to create tables
  esdb        distributed with HUB_EVENT_STORE=esdb: EventStoreDB answers; its head position
  redis       distributed: PING, server version, no read-only replica, no eviction policy
  kafka       distributed: the brokers answer; topics: whether the hub's topics exist yet
  mail        SMTP: the server accepts a connection (and the login); file or log: what happens to mail
  keys        the JWT signing key loads; device-ca: the device CA certificate and key match
  public-url, webhooks, callbacks, captcha: settings that are development-only or incomplete
Each connection gives up after a few seconds. Secrets and passwords are never printed.
Exit status: 0 when no check failed (warnings allowed), 1 otherwise.`,
  projections: `Usage:
  hub projections status
  hub projections replay <name>

status  Lists every projection: its version, active generation, checkpoint, lag in events and seconds,
        and an unfinished replay if there is one.
replay  Rebuilds <name> from position 0 into a new generation while the active one keeps answering
        reads, then switches reads over atomically and drops the old keys. Shows progress with
        events/s and ETA. Ctrl-C interrupts it; running it again resumes. Refuses to run while another
        replay of the same projection runs. Embedded profile: with the hub stopped (its data dir is
        one process's); read models in memory (HUB_EMBEDDED_STATE=memory) cannot be replayed, the hub
        rebuilds them at every start.

Admins do both over HTTP, in any profile and inside a running hub, reads answered all along:
GET /admin/projections, POST /admin/projections/<name>/replay (docs/projections.md).`,
};

const say = (line: string) => process.stdout.write(`${line}\n`);
const fail = (line: string, code = 2) => {
  process.stderr.write(`hub: ${line}\n`);
  return code;
};

async function main(argv: string[]): Promise<number> {
  // A client of a hub, not a hub: its own options, and no HUB_* configuration to load.
  if (argv[0] === 'webhooks') return webhooksCommand(argv.slice(1));
  let parsed: { positionals: string[]; values: { help?: boolean; version?: boolean } };
  try {
    // Strict: an option no command takes (`--port 9000`) is refused, not silently ignored.
    parsed = parseArgs({
      args: argv,
      allowPositionals: true,
      strict: true,
      options: { help: { type: 'boolean', short: 'h' }, version: { type: 'boolean' } },
    });
  } catch (err) {
    return fail(`${(err as Error).message} (see hub --help; configuration comes from HUB_* variables)`);
  }
  const { positionals, values } = parsed;
  if (values.version) {
    say(VERSION);
    return 0;
  }
  const [command = '', ...rest] = positionals;
  if (command === 'help' || command === '' || values.help) {
    const topic = command === 'help' ? (rest[0] ?? '') : command;
    if (!(topic in HELP)) return fail(`unknown command '${topic}' (see hub --help)`);
    say(HELP[topic]!);
    return 0;
  }
  // The doctor loads the configuration itself: a bad one is what it is there to report.
  if (command === 'doctor') return doctorCommand(rest);
  let config: Config;
  try {
    config = loadConfig();
  } catch (err) {
    if (err instanceof ConfigError) return fail(`invalid configuration: ${err.message}`);
    throw err;
  }
  switch (command) {
    case 'start':
    case 'api':
    case 'projector':
    case 'processor':
    case 'dispatcher':
      if (rest.length > 0) return fail(`'hub ${command}' takes no arguments (got '${rest.join(' ')}')`);
      return runRoles(
        config,
        command === 'start' ? ['api', 'projector', 'processor', 'dispatcher'] : [command],
      );
    case 'projections':
      return projectionsCommand(config, rest);
    default:
      return fail(`unknown command '${command}' (see hub --help)`);
  }
}

async function runRoles(config: Config, roles: Role[]): Promise<number> {
  const node = await startNode(config, roles);
  // Printed whatever the log level: scripts and people look for this line.
  process.stdout.write(`Device Hub (${config.profile}) ${roles.join(', ')}: listening on ${node.url}\n`);
  // Drain: stop taking work, finish or hand back what is in flight, commit offsets, exit 0; past
  // the bound, exit 1 (what was not finished is redone by another process: at least once).
  const stop = async (signal: string) => {
    const started = Date.now();
    node.logger.info({ signal, boundMs: config.shutdownTimeoutMs }, 'draining');
    setTimeout(() => {
      node.logger.error({ boundMs: config.shutdownTimeoutMs }, 'drain unfinished within the bound; exiting');
      process.exit(1);
    }, config.shutdownTimeoutMs).unref();
    await node.stop();
    node.logger.info({ ms: Date.now() - started }, 'drained; exiting');
    process.exit(0);
  };
  process.once('SIGTERM', () => void stop('SIGTERM'));
  process.once('SIGINT', () => void stop('SIGINT'));
  return -1; // keep running
}

async function webhooksCommand(args: string[]): Promise<number> {
  const [sub, ...rest] = args;
  if (sub === 'listen') return listenCommand(rest);
  if (sub === undefined || sub === '--help' || sub === '-h' || sub === 'help') {
    say(LISTEN_HELP);
    return sub === undefined ? 2 : 0;
  }
  return fail(`unknown command 'webhooks ${sub}' (see hub webhooks listen --help)`);
}

async function doctorCommand(args: string[]): Promise<number> {
  if (args.length > 0) return fail('usage: hub doctor');
  const results = await runDoctor(process.env);
  const label = { ok: 'ok', warn: 'warn', fail: 'FAIL' } as const;
  for (const r of results) say(`${label[r.level].padEnd(6)}${r.name.padEnd(13)}${r.detail}`);
  const count = (level: string) => results.filter((r) => r.level === level).length;
  const failed = count('fail');
  say(
    `${results.length} checks: ${count('ok')} ok, ${count('warn')} warning${count('warn') === 1 ? '' : 's'}, ${failed} failed${failed > 0 ? ' (see the FAIL lines)' : ''}`,
  );
  return failed > 0 ? 1 : 0;
}

async function projectionsCommand(config: Config, args: string[]): Promise<number> {
  const [sub, name] = args;
  if (!((sub === 'status' && args.length === 1) || (sub === 'replay' && args.length <= 2)))
    return fail(`usage: hub projections status | hub projections replay <name>`);

  const embedded = config.profile === 'embedded';
  const inMemory = embedded && config.embeddedState === 'memory';
  if (sub === 'replay' && inMemory) {
    return fail(
      'replay needs the read models on disk (HUB_EMBEDDED_STATE=sqlite) or the distributed profile: embedded read models in memory live in the hub process and are rebuilt at every start',
    );
  }
  // A status asks; it does not make a store where there was none (a mistyped HUB_DATA_DIR).
  if (
    config.profile === 'embedded' &&
    config.eventStoreKind === 'sqlite' &&
    !existsSync(join(config.dataDir, 'events.sqlite'))
  )
    return fail(`HUB_DATA_DIR ${config.dataDir} holds no hub data (no events.sqlite)`);
  const logger = createLogger(config.logLevel === 'info' ? 'warn' : config.logLevel);
  // An embedded replay writes the data dir's files, which are one process's: the hub's, while it
  // runs (a ConfigError says so), else this command's.
  const release = sub === 'replay' && embedded ? lockDataDir(config.dataDir) : undefined;
  const stores = await openStores(forRoles(config, [])).catch(async (err) => {
    await release?.();
    throw err;
  }); // no API: no threads share the store
  try {
    if (sub === 'status') {
      const rows = await projectionStatus(stores.store, stores.readStore, projections);
      say(
        ['projection', 'version', 'generation', 'checkpoint', 'head', 'lag events', 'lag s', 'replay'].join(
          '\t',
        ),
      );
      // Embedded read models in memory live in the hub process, out of this one's sight: no
      // checkpoint or lag to show but its own (its /metrics: hub_projection_lag_events).
      const hidden = inMemory;
      for (const r of rows) {
        const replay = r.replay ? `generation ${r.replay.generation} at ${r.replay.checkpoint}` : '-';
        say(
          [
            r.name,
            r.version,
            hidden ? '-' : r.generation,
            hidden ? '-' : r.checkpoint,
            r.head,
            hidden ? '-' : r.lagEvents,
            hidden ? '-' : r.lagSeconds.toFixed(1),
            replay,
          ].join('\t'),
        );
      }
      if (hidden)
        say(
          "(embedded: read models live in the running hub's process, rebuilt at its start; its /metrics shows their lag: hub_projection_lag_events)",
        );
      return 0;
    }
    const projection = name ? projectionNamed(name) : undefined;
    if (!projection)
      return fail(`unknown projection '${name ?? ''}'; known: ${projections.map((p) => p.name).join(', ')}`);
    const controller = new AbortController();
    process.once('SIGINT', () => controller.abort());
    const tty = process.stderr.isTTY;
    let lastPrint = 0;
    let last: Parameters<typeof progressLine>[0] | undefined;
    try {
      const result = await replayProjection({
        store: stores.store,
        readStore: stores.readStore,
        projection,
        logger,
        owner: newOwnerId(),
        signal: controller.signal,
        dropGraceMs: config.replayDropGraceMs,
        onProgress: (p) => {
          last = p;
          const now = Date.now();
          if (tty ? now - lastPrint < 100 : now - lastPrint < 2000) return;
          lastPrint = now;
          process.stderr.write(tty ? `\r${progressLine(p)}` : `${progressLine(p)}\n`);
        },
      });
      if (last) process.stderr.write(tty ? `\r${progressLine(last)}\n` : `${progressLine(last)}\n`);
      if (result.outcome === 'interrupted') {
        say(
          `interrupted at position ${result.checkpoint} (generation ${result.generation}); run the same command to resume`,
        );
        return 130;
      }
      say(
        `replayed ${projection.name} into generation ${result.generation} (${result.applied} events in ${result.seconds.toFixed(1)} s); reads switched from generation ${result.previous}, ${result.droppedKeys} old keys dropped`,
      );
      return 0;
    } catch (err) {
      if (err instanceof ReplayRunningError) return fail(err.message, 1);
      throw err;
    }
  } finally {
    await stores.close();
    await release?.();
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    if (code >= 0) process.exit(code);
  },
  (err) => {
    // A problem of the configuration found at start (a data dir in use, a port taken): one line.
    if (err instanceof ConfigError) {
      process.stderr.write(`hub: cannot start: ${err.message}\n`);
      process.exit(2);
    }
    process.stderr.write(`hub: ${(err as Error).stack ?? err}\n`);
    // The libraries' words name neither the knob nor the address: point at what does.
    const e = err as { name?: string; message?: string };
    const hint =
      typeof (err as { errcode?: unknown }).errcode === 'number'
        ? "the embedded store's files cannot be used (HUB_DATA_DIR: its permissions, its disk's space)."
        : e.name === 'MaxRetriesPerRequestError'
          ? 'Redis does not answer (HUB_REDIS_URL).'
          : e.name?.startsWith('KafkaJS')
            ? 'Kafka does not answer (HUB_KAFKA_BROKERS).'
            : dependencyDown(err)
              ? 'a dependency does not answer (HUB_POSTGRES_URL, HUB_REDIS_URL, HUB_KAFKA_BROKERS).'
              : undefined;
    if (hint)
      process.stderr.write(`hub: ${hint} \`hub doctor\` checks the configuration and every dependency.\n`);
    process.exit(1);
  },
);
