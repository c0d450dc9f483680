// Logs and metrics shared by every role: one pino logger, one prom-client registry per process.
import { type Logger, pino } from 'pino';
import { collectDefaultMetrics, Histogram, Registry } from 'prom-client';

export type { Logger };

/** Field names whose values never reach a log line, wherever they appear. */
const SECRET_FIELDS = [
  'password',
  'password_bcrypt',
  'password_scrypt',
  'secret',
  'token',
  'access-code',
  'refresh_token',
  'csr',
  'authorization',
  'cookie',
];

export function createLogger(level: string, destination?: pino.DestinationStream): Logger {
  const paths = SECRET_FIELDS.flatMap((f) => [`${quote(f)}`, `*.${quote(f)}`, `*.*.${quote(f)}`]);
  return pino(
    {
      level,
      base: { service: 'device-hub' },
      redact: { paths, censor: '[redacted]' },
      timestamp: pino.stdTimeFunctions.isoTime,
      formatters: { level: (label) => ({ level: label }) },
    },
    destination,
  );
}

const quote = (field: string) => (/^[a-z_]+$/i.test(field) ? field : `["${field}"]`);

export interface Metrics {
  registry: Registry;
  httpDuration: Histogram<'method' | 'route' | 'status'>;
}

/** `processMetrics`: Node's own (CPU, memory, event loop), once per process: not on API threads. */
export function createMetrics(o: { processMetrics?: boolean } = {}): Metrics {
  const registry = new Registry();
  if (o.processMetrics !== false) collectDefaultMetrics({ register: registry, prefix: 'hub_' });
  const httpDuration = new Histogram({
    name: 'hub_http_request_duration_seconds',
    help: 'HTTP request duration by method, route template and status code.',
    labelNames: ['method', 'route', 'status'] as const,
    buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
    registers: [registry],
  });
  return { registry, httpDuration };
}
