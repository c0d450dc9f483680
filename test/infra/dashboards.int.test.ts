// The Grafana dashboard and the Prometheus alert rules of infra/ use only metrics the hub exposes:
// promtool accepts the rules, the config and every dashboard query; every metric name they use is
// a `# TYPE` of a running hub's /metrics and is documented in docs/metrics.md.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startHub, type TestHub } from '../hub.ts';

const ROOT = join(import.meta.dirname, '..', '..');
const ALERTS = join(ROOT, 'infra/prometheus/alerts.yml');
const PROMETHEUS = join(ROOT, 'infra/prometheus/prometheus.yml');
const DASHBOARDS = join(ROOT, 'infra/grafana/dashboards');
const METRICS_DOC = join(ROOT, 'docs/metrics.md');

/** Runs promtool; fails (never skips) when it is missing: infra/local.sh up installs it. */
function promtool(...args: string[]): string {
  const r = spawnSync('promtool', args, { encoding: 'utf8' });
  if ((r.error as NodeJS.ErrnoException | undefined)?.code === 'ENOENT') {
    assert.fail(
      'promtool is missing: run `bash infra/local.sh up` (it installs the Debian package prometheus, which provides promtool)',
    );
  }
  assert.equal(r.status, 0, `promtool ${args.join(' ')} failed:\n${r.stdout}${r.stderr}`);
  return `${r.stdout}${r.stderr}`;
}

interface Panel {
  type: string;
  title?: string;
  panels?: Panel[];
  targets?: Array<{ expr?: string }>;
}

interface Dashboard {
  title: string;
  panels: Panel[];
  templating?: { list: Array<{ name: string; type: string; query?: unknown; definition?: string }> };
}

function dashboards(): Array<{ file: string; dashboard: Dashboard }> {
  return readdirSync(DASHBOARDS)
    .filter((f) => f.endsWith('.json'))
    .map((file) => ({
      file,
      dashboard: JSON.parse(readFileSync(join(DASHBOARDS, file), 'utf8')) as Dashboard,
    }));
}

/** Every panel, rows' nested panels (collapsed rows keep theirs inside) included. */
const flatten = (panels: Panel[]): Panel[] => panels.flatMap((p) => [p, ...flatten(p.panels ?? [])]);

/** The PromQL of every dashboard target and query variable. */
function dashboardExprs(): string[] {
  return dashboards().flatMap(({ dashboard }) => [
    ...flatten(dashboard.panels).flatMap((p) => (p.targets ?? []).map((t) => t.expr ?? '')),
    ...(dashboard.templating?.list ?? []).filter((v) => v.type === 'query').map((v) => v.definition ?? ''),
  ]);
}

/**
 * The `expr` of every rule in a Prometheus rules file: inline, quoted, or a block scalar (| or >),
 * which is what the rules of this repository use. The count is checked against promtool's.
 */
function ruleExprs(yaml: string): string[] {
  const lines = yaml.split('\n');
  const exprs: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const m = /^(\s*)(?:-\s+)?expr:\s*(.*)$/.exec(lines[i]!);
    if (!m) continue;
    const indent = m[1]!.length;
    const value = m[2]!.replace(/\s+#.*$/, '').trim();
    if (/^[|>][-+]?$/.test(value)) {
      const block: string[] = [];
      while (
        i + 1 < lines.length &&
        (lines[i + 1]!.trim() === '' || /^\s*/.exec(lines[i + 1]!)![0].length > indent)
      )
        block.push(lines[++i]!.trim());
      exprs.push(block.join(' ').trim());
    } else if (/^".*"$/.test(value)) exprs.push(JSON.parse(value));
    else if (/^'.*'$/.test(value)) exprs.push(value.slice(1, -1).replaceAll("''", "'"));
    else exprs.push(value);
  }
  return exprs;
}

const KEYWORDS = new Set(['and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan', 'atan2']);

/** The metric names a PromQL expression selects (Grafana variables allowed). */
function metricNames(expr: string): string[] {
  const names: string[] = [];
  for (const m of expr.matchAll(/label_values\(\s*([a-zA-Z_:][\w:]*)\s*(?:\{[^}]*\})?\s*,/g))
    names.push(m[1]!);
  const bare = expr
    .replace(/label_values\([^)]*\)/g, ' ')
    .replace(/"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*'|`[^`]*`/g, '""') // strings
    .replace(/\{[^}]*\}/g, ' ') // label matchers
    .replace(/\[[^\]]*\]/g, ' ') // ranges and subqueries
    .replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, ' '); // label lists
  for (const m of bare.matchAll(/(?<![\w.$:])([a-zA-Z_:][\w:]*)(?=\s*(\(?))/g)) {
    const [, name, paren] = m;
    if (paren === '(' || KEYWORDS.has(name!.toLowerCase())) continue; // a function or aggregation
    names.push(name!);
  }
  return names;
}

/** Grafana's variables replaced by values PromQL accepts, for promtool. */
const withoutVariables = (expr: string) =>
  expr
    .replace(/\$(?:__rate_interval|__interval|__range)\b|\$\{(?:__rate_interval|__interval|__range)\}/g, '5m')
    .replace(/\$\{\w+\}|\$\w+/g, '.*');

describe('dashboards and alerts (int)', () => {
  let hub: TestHub;
  const exposition = async (): Promise<string> => {
    const res = await fetch(`${hub.url}/metrics`);
    assert.equal(res.status, 200);
    return res.text();
  };
  before(async () => {
    hub = await startHub();
  });
  after(() => hub?.stop());

  it('promtool accepts the alert rules and the Prometheus config', () => {
    assert.match(promtool('check', 'rules', ALERTS), /SUCCESS: \d+ rules found/);
    assert.match(promtool('check', 'config', PROMETHEUS), /SUCCESS: .* is valid prometheus config file/);
  });

  it('every dashboard parses and has panels whose targets all have a query promtool accepts', () => {
    const all = dashboards();
    assert.ok(all.length > 0, 'no dashboard in infra/grafana/dashboards');
    for (const { file, dashboard } of all) {
      const panels = flatten(dashboard.panels ?? []).filter((p) => p.type !== 'row');
      assert.ok(panels.length > 0, `${file}: no panels`);
      for (const p of panels) {
        assert.ok((p.targets ?? []).length > 0, `${file}: panel "${p.title}" has no targets`);
        for (const t of p.targets!)
          assert.ok(t.expr?.trim(), `${file}: panel "${p.title}" has an empty query`);
      }
      const variable = dashboard.templating?.list.find((v) => v.type === 'datasource');
      assert.equal(variable?.query, 'prometheus', `${file}: no Prometheus data source variable`);
    }
    // promtool parses every query, as the expression of a recording rule.
    const rules = dashboardExprs()
      .filter((e) => !e.startsWith('label_values('))
      .map(
        (e, i) =>
          `      - record: dashboard:query_${i}\n        expr: ${JSON.stringify(withoutVariables(e))}`,
      );
    const file = join(mkdtempSync(join(tmpdir(), 'hub-dashboards-')), 'queries.yml');
    writeFileSync(file, `groups:\n  - name: dashboard\n    rules:\n${rules.join('\n')}\n`);
    assert.match(promtool('check', 'rules', file), new RegExp(`SUCCESS: ${rules.length} rules found`));
  });

  it('every metric of the dashboards and the alerts is in the /metrics of a running hub and in docs/metrics.md', async () => {
    const types = new Map(
      [...(await exposition()).matchAll(/^# TYPE (\S+) (\S+)$/gm)].map(
        (m) => [m[1]!, m[2]!] as [string, string],
      ),
    );
    const alertExprs = ruleExprs(readFileSync(ALERTS, 'utf8'));
    const found = /SUCCESS: (\d+) rules found/.exec(promtool('check', 'rules', ALERTS));
    assert.equal(alertExprs.length, Number(found?.[1]), 'an alert rule expression was not extracted');
    const used = new Set([...dashboardExprs(), ...alertExprs].flatMap(metricNames));
    // The extraction finds what the dashboards and alerts are known to use.
    for (const name of [
      'hub_processor_consumer_lag',
      'hub_webhook_dead_lettered_total',
      'hub_projection_lag_seconds',
    ])
      assert.ok(used.has(name), `${name} was not extracted`);

    const exposed = (name: string): string | undefined => {
      if (types.has(name)) return name;
      const base = name.replace(/_(?:bucket|sum|count)$/, '');
      return base !== name && types.get(base) === 'histogram' ? base : undefined;
    };
    const missing = [...used].filter((n) => !exposed(n));
    assert.deepEqual(missing, [], 'metrics used by a dashboard or an alert that the hub does not expose');

    assert.ok(existsSync(METRICS_DOC), 'docs/metrics.md does not exist');
    const doc = readFileSync(METRICS_DOC, 'utf8');
    const undocumented = [...used].map((n) => exposed(n)!).filter((n) => !doc.includes(`\`${n}\``));
    assert.deepEqual(
      [...new Set(undocumented)],
      [],
      'metrics used by a dashboard or an alert missing from docs/metrics.md',
    );
  });

  it('every route a dashboard selects is a route label the hub records', async () => {
    const selectors = dashboardExprs().flatMap((e) =>
      [...e.matchAll(/\{([^}]*\broute="[^"]+"[^}]*)\}/g)].map((m) => ({
        route: /\broute="([^"]+)"/.exec(m[1]!)![1]!,
        method: /\bmethod="([^"]+)"/.exec(m[1]!)?.[1] ?? 'GET',
      })),
    );
    assert.ok(selectors.length > 0, 'no dashboard query selects a route');
    // One request each (unauthenticated: a 401 records the route as well as a 200 does).
    for (const { route, method } of selectors)
      await hub.call(method, route.replace(/:\w+/g, 'any'), { body: {} });
    const recorded = [
      ...(await exposition()).matchAll(/^hub_http_request_duration_seconds_count\{([^}]*)\}/gm),
    ].map((m) => m[1]!);
    for (const { route, method } of selectors) {
      assert.ok(
        recorded.some(
          (labels) => labels.includes(`route="${route}"`) && labels.includes(`method="${method}"`),
        ),
        `the hub recorded no ${method} ${route}: is the route label spelt as the router records it?`,
      );
    }
  });
});
