// The Kafka broker the suite runs on, and what kafkajs says to it. kafkajs picks each request's
// version as the lower of its own highest and the broker's highest (its lookupRequest), and never
// looks at the broker's lowest: a broker that raised an API's lowest version past kafkajs's highest
// (Kafka 4 did so for several, and left none to spare for DeleteTopics and the ACL APIs) answers
// that request with UNSUPPORTED_VERSION, whenever the hub first sends it. Here every API kafkajs
// implements is negotiated with the broker by kafkajs's own code, and must land in the range the
// broker advertises (ApiVersions), so a broker that drops one fails here, by the API's name.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
// kafkajs as the bus runs it: its request queue patched (stopIdleRequestQueueLoop), without the
// 1-ms timer that warns TimeoutNegativeWarning here.
import '../../infra/bus/kafka.ts';

const BROKERS = (process.env.HUB_KAFKA_BROKERS ?? '127.0.0.1:9092').split(',');

type VersionRange = { minVersion: number; maxVersion: number };
interface RequestDefinition {
  versions: string[];
  protocol(o: { version: number }): unknown;
}
/** kafkajs's broker connection, as far as it is read here (src/broker/index.js). */
interface KafkajsBroker {
  connect(): Promise<void>;
  disconnect(): Promise<void>;
  /** The broker's advertised range per API key, from kafkajs's ApiVersions request. */
  versions: Record<number, VersionRange>;
  lookupRequest(apiKey: number, definition: RequestDefinition): unknown;
}

const kafkajs = createRequire(import.meta.url);
const { requests } = kafkajs('kafkajs/src/protocol/requests/index.js') as {
  requests: Record<string, RequestDefinition>;
};
const apiKeys = kafkajs('kafkajs/src/protocol/requests/apiKeys.js') as Record<string, number>;
const Broker = kafkajs('kafkajs/src/broker/index.js') as new (o: Record<string, unknown>) => KafkajsBroker;
const connectionPoolBuilder = kafkajs('kafkajs/src/cluster/connectionPoolBuilder.js') as (
  o: Record<string, unknown>,
) => { build(): Promise<unknown> };
const socketFactory = kafkajs('kafkajs/src/network/socketFactory.js') as () => unknown;
const { createLogger, LEVELS } = kafkajs('kafkajs/src/loggers/index.js') as {
  createLogger(o: { level: number; logCreator: () => () => void }): unknown;
  LEVELS: { NOTHING: number };
};

/** The APIs kafkajs can send (the others are listed with no versions, and it never sends them). */
const implemented = Object.entries(requests).filter(([, definition]) => definition.versions.length > 0);

describe('Kafka broker: every request kafkajs sends is within the versions the broker takes (int)', function () {
  this.timeout(30_000);
  let broker: KafkajsBroker;

  before(async () => {
    const logger = createLogger({ level: LEVELS.NOTHING, logCreator: () => () => {} });
    const pools = connectionPoolBuilder({
      brokers: BROKERS,
      clientId: 'protocol-test',
      socketFactory: socketFactory(),
      connectionTimeout: 5_000,
      requestTimeout: 10_000,
      logger,
    });
    // What kafkajs's cluster does with its seed broker: connect, asking ApiVersions (the highest
    // version of it the broker answers), then look each request up against the answer.
    broker = new Broker({ connectionPool: await pools.build(), logger });
    await broker.connect();
  });
  after(() => broker?.disconnect());

  it('kafkajs implements the APIs it is known to (the list below is not empty or cut short)', () => {
    const names = implemented.map(([name]) => name);
    for (const name of [
      'Produce',
      'Fetch',
      'Metadata',
      'JoinGroup',
      'OffsetCommit',
      'CreateTopics',
      'DeleteTopics',
    ])
      assert.ok(names.includes(name), `kafkajs no longer implements ${name}`);
  });

  for (const [name, definition] of implemented) {
    it(`${name}: the version kafkajs picks is one the broker advertises`, () => {
      const apiKey = apiKeys[name];
      assert.equal(typeof apiKey, 'number', `no API key for ${name} in kafkajs`);
      const range = broker.versions[apiKey!];
      assert.ok(
        range,
        `the broker does not advertise ${name} (API key ${apiKey}) at all: kafkajs cannot send it`,
      );
      // kafkajs's own lookup, with a protocol that hands back the version it settled on.
      const picked = broker.lookupRequest(apiKey!, {
        versions: definition.versions,
        protocol: ({ version }) => version,
      }) as number;
      const highest = Math.max(...definition.versions.map(Number));
      assert.ok(
        picked >= range.minVersion && picked <= range.maxVersion,
        `${name} (API key ${apiKey}): kafkajs sends v${picked} (it implements up to v${highest}), ` +
          `the broker takes v${range.minVersion} to v${range.maxVersion}`,
      );
    });
  }
});

describe('Kafka broker version: one setting', () => {
  const read = (path: string) => readFileSync(new URL(`../../infra/${path}`, import.meta.url), 'utf8');

  it("infra/compose.yaml's Kafka image is of infra/kafka/pom.xml's kafka.version, which local.sh runs", () => {
    const pom = /<kafka\.version>([^<]+)<\/kafka\.version>/.exec(read('kafka/pom.xml'))?.[1];
    assert.match(pom ?? '', /^\d+\.\d+\.\d+$/, 'no kafka.version in infra/kafka/pom.xml');
    const image = /image: apache\/kafka:\$\{HUB_KAFKA_VERSION:-([^}]+)\}/.exec(read('compose.yaml'))?.[1];
    assert.equal(image, pom, 'infra/compose.yaml runs another Kafka than infra/kafka/pom.xml');
    assert.doesNotMatch(read('local.sh'), /KAFKA_VERSION="?\d/, 'infra/local.sh pins a version of its own');
  });
});
