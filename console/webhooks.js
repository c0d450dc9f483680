// Webhooks: the account's subscriptions with their health, creating and editing one (event types
// with their descriptions, filters, custom headers, retry policy, rate limit, enabled), its signing
// secret shown once with a copy button, a test delivery, rotation, recovery and deletion; the
// delivery log is deliveries.js.
import { useState } from 'preact/hooks';
import { enc, query, request } from './api.js';
import { DeliveryLog, Recover } from './deliveries.js';
import {
  ConfirmButton,
  ErrorNote,
  Field,
  fromRows,
  go,
  html,
  MapEditor,
  MapTable,
  Note,
  PAGE,
  Pager,
  SecretOnce,
  Time,
  toRows,
  useAction,
  useResource,
  useTitle,
} from './ui.js';

/** A subscription's health (the hub's circuit for its endpoint), when the API shows it. */
export function Health({ sub }) {
  const health = sub.health;
  if (!health && !sub.disabled_reason) return html`<span class="hint">–</span>`;
  const circuit = health?.circuit ?? 'unknown';
  const kind = circuit === 'closed' ? 'good' : circuit === 'open' ? 'bad' : 'warn';
  const failures = health?.consecutive_failures ?? 0;
  return html`<span class=${`badge ${kind}`}>${circuit === 'closed' ? 'healthy' : circuit}</span>
    ${failures > 0 && html` ${failures} failed in a row`}
    ${sub.disabled_reason && html` <span class="badge bad">disabled: ${sub.disabled_reason}</span>`}`;
}

export function Webhooks() {
  useTitle('Webhooks');
  const [skip, setSkip] = useState(0);
  const list = useResource(() => request('GET', `/webhooks/${query({ limit: PAGE, skip })}`), [skip]);
  const items = list.data?.items ?? [];
  return html`<h1>Webhooks</h1>
    <div class="actions"><a href="#/webhooks/new">New subscription</a> <a href="#/events">The account’s event log</a></div>
    <${ErrorNote} error=${list.error} />
    ${list.data && items.length === 0 && html`<p>No subscriptions yet.</p>`}
    ${
      items.length > 0 &&
      html`<div class="scroll"><table class="cards">
        <caption class="visually-hidden">Your webhook subscriptions, newest first</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">URL</th><th scope="col">Events</th><th scope="col">Enabled</th><th scope="col">Health</th></tr></thead>
        <tbody>${items.map(
          (s) => html`<tr>
            <td data-label="Name"><a href=${`#/webhooks/${enc(s.id)}`}>${s.nick}</a></td>
            <td data-label="URL"><code>${s.url}</code></td>
            <td data-label="Events">${s.event_types.length === 1 ? s.event_types[0] : `${s.event_types.length} types`}</td>
            <td data-label="Enabled">${s.enabled ? 'Yes' : 'Paused'}</td>
            <td data-label="Health"><${Health} sub=${s} /></td>
          </tr>`,
        )}</tbody>
      </table></div>`
    }
    <${Pager} page=${list.data} onSkip=${setSkip} label="Subscriptions" />`;
}

const lines = (text) =>
  text
    .split(/[\n,]/)
    .map((s) => s.trim())
    .filter(Boolean);

function formOf(sub) {
  return {
    nick: sub?.nick ?? '',
    url: sub?.url ?? '',
    description: sub?.description ?? '',
    event_types: sub?.event_types ?? [],
    enabled: sub?.enabled ?? true,
    devices: (sub?.devices ?? []).join('\n'),
    user_meta_keys: (sub?.user_meta_keys ?? []).join(', '),
    device_meta_keys: (sub?.device_meta_keys ?? []).join(', '),
    headers: toRows(sub?.custom_headers),
    retry: Boolean(sub?.retry_policy),
    max_attempts: String(sub?.retry_policy?.max_attempts ?? 8),
    delays: (sub?.retry_policy?.delays_s ?? [60, 120, 240, 480, 960, 1920, 3840]).join(', '),
    rate_limit: sub?.rate_limit ? String(sub.rate_limit) : '',
  };
}

function bodyOf(f) {
  return {
    nick: f.nick,
    url: f.url,
    description: f.description,
    event_types: f.event_types,
    enabled: f.enabled,
    devices: lines(f.devices),
    user_meta_keys: lines(f.user_meta_keys),
    device_meta_keys: lines(f.device_meta_keys),
    custom_headers: fromRows(f.headers),
    retry_policy: f.retry
      ? { max_attempts: Number(f.max_attempts), delays_s: lines(f.delays).map(Number) }
      : null,
    rate_limit: f.rate_limit ? Number(f.rate_limit) : null,
  };
}

/** Create (no id) or edit a subscription. */
export function WebhookForm({ params: [id] }) {
  useTitle(id ? 'Edit subscription' : 'New subscription');
  const types = useResource(() => request('GET', '/webhooks/event-types'), []);
  const existing = useResource(
    () => (id ? request('GET', `/webhooks/${enc(id)}`) : Promise.resolve(null)),
    [id],
  );
  if (id && !existing.data)
    return html`<h1>Edit subscription</h1><${ErrorNote} error=${existing.error} />${existing.loading && html`<p>Loading…</p>`}`;
  return html`<${SubscriptionForm} key=${id ?? 'new'} id=${id} sub=${existing.data} types=${types} />`;
}

function SubscriptionForm({ id, sub, types }) {
  const [f, setForm] = useState(() => formOf(sub));
  const set = (field) => (value) => setForm((old) => ({ ...old, [field]: value }));
  const save = useAction(async () => {
    const saved = await request(id ? 'PUT' : 'POST', id ? `/webhooks/${enc(id)}` : '/webhooks/', bodyOf(f));
    if (id) go(`/webhooks/${enc(id)}`);
    return saved;
  });
  if (save.done?.secret)
    return html`<h1>Subscription ${save.done.nick} created</h1>
      <${SecretOnce} label="Signing secret" value=${save.done.secret} />
      <p>Receivers verify each delivery’s <code>Webhook-Signature</code> with it (docs/webhooks.md).</p>
      <p><a href=${`#/webhooks/${enc(save.done.id)}`}>Go to the subscription</a></p>`;
  const toggle = (type, on) =>
    setForm((old) => ({
      ...old,
      event_types: on ? [...old.event_types, type] : old.event_types.filter((t) => t !== type),
    }));
  return html`<h1>${id ? `Edit ${sub.nick}` : 'New subscription'}</h1>
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      save.run();
    }}>
      <${Field} label="Name" value=${f.nick} onInput=${set('nick')} required maxlength="128" />
      <${Field} label="URL" type="url" value=${f.url} onInput=${set('url')} required hint="HTTPS, publicly reachable." />
      <${Field} label="Description" value=${f.description} onInput=${set('description')} />
      <fieldset>
        <legend>Event types</legend>
        <${ErrorNote} error=${types.error} />
        <div class="checks">
          ${(types.data?.items ?? []).map(
            (t) => html`<label>
              <input type="checkbox" checked=${f.event_types.includes(t.type)} onChange=${(e) => toggle(t.type, e.currentTarget.checked)} />
              <span><code>${t.type}</code><span class="hint">${t.description}</span></span>
            </label>`,
          )}
        </div>
      </fieldset>
      <div class="checks"><label><input type="checkbox" checked=${f.enabled} onChange=${(e) => set('enabled')(e.currentTarget.checked)} /> Enabled (unticked: paused, nothing is sent)</label></div>
      <fieldset>
        <legend>Filters</legend>
        <div class="field">
          <label for="devices">Devices (PRNs, one a line; none: every device)</label>
          <textarea id="devices" value=${f.devices} onInput=${(e) => set('devices')(e.currentTarget.value)}></textarea>
        </div>
        <${Field} label="User metadata keys" value=${f.user_meta_keys} onInput=${set('user_meta_keys')} hint="Comma-separated; only user-meta changes touching them." />
        <${Field} label="Device metadata keys" value=${f.device_meta_keys} onInput=${set('device_meta_keys')} hint="Comma-separated; only device-meta changes touching them." />
      </fieldset>
      <${MapEditor} legend="Custom headers" keyLabel="Header" valueLabel="Header value" rows=${f.headers} setRows=${set('headers')} />
      <fieldset>
        <legend>Delivery</legend>
        <div class="checks"><label><input type="checkbox" checked=${f.retry} onChange=${(e) => set('retry')(e.currentTarget.checked)} /> A retry policy of its own (unticked: 8 attempts, retries after 60 s doubling)</label></div>
        ${
          f.retry &&
          html`<${Field} label="Attempts in all" type="number" min="1" max="20" value=${f.max_attempts} onInput=${set('max_attempts')} />
          <${Field} label="Delays before each retry (seconds, comma-separated)" value=${f.delays} onInput=${set('delays')} hint="The last repeats when there are fewer than attempts - 1." />`
        }
        <${Field} label="Rate limit (deliveries per second)" type="number" min="1" max="10000" value=${f.rate_limit} onInput=${set('rate_limit')} hint="Empty: unlimited." />
      </fieldset>
      <div class="actions">
        <button disabled=${save.busy}>${id ? 'Save subscription' : 'Create subscription'}</button>
        ${id && html`<a href=${`#/webhooks/${enc(id)}`}>Cancel</a>`}
      </div>
      <${ErrorNote} error=${save.error} />
    </form>`;
}

export function Webhook({ params: [id] }) {
  const sub = useResource(() => request('GET', `/webhooks/${enc(id)}`), [id]);
  const s = sub.data;
  useTitle(s ? `Webhook ${s.nick}` : 'Webhook');
  const base = `/webhooks/${enc(id)}`;
  const test = useAction(() => request('POST', `${base}/test`));
  const rotate = useAction(() => request('POST', `${base}/rotate-secret`));
  const pause = useAction(async () => {
    await request('PATCH', base, { enabled: !s.enabled });
    sub.reload();
  });
  const remove = useAction(async () => {
    await request('DELETE', base);
    go('/webhooks');
  });
  if (!s)
    return html`<h1>Webhook</h1><${ErrorNote} error=${sub.error} />${sub.loading && html`<p>Loading…</p>`}`;
  return html`<h1>Webhook ${s.nick}</h1>
    <section class="card" aria-labelledby="sub-heading">
      <h2 id="sub-heading">Subscription</h2>
      <dl class="facts">
        <dt>URL</dt><dd><code>${s.url}</code></dd>
        ${s.description && html`<dt>Description</dt><dd>${s.description}</dd>`}
        <dt>Enabled</dt><dd>${s.enabled ? 'Yes' : 'Paused'}</dd>
        <dt>Health</dt><dd><${Health} sub=${s} />${
          s.health &&
          html`<br /><span class="hint">last success <${Time} value=${s.health.last_success_at} />, last failure <${Time} value=${s.health.last_failure_at} />${s.health.next_probe_at ? html`, next probe <${Time} value=${s.health.next_probe_at} />` : ''}</span>`
        }</dd>
        <dt>Event types</dt><dd>${s.event_types.map((t) => html`<code>${t}</code> `)}</dd>
        <dt>Devices</dt><dd>${s.devices?.length ? s.devices.map((d) => html`<code>${d}</code> `) : 'every device'}</dd>
        <dt>User metadata keys</dt><dd>${s.user_meta_keys?.join(', ') || 'any'}</dd>
        <dt>Device metadata keys</dt><dd>${s.device_meta_keys?.join(', ') || 'any'}</dd>
        <dt>Retry policy</dt><dd>${s.retry_policy ? `${s.retry_policy.max_attempts} attempts; retries after ${s.retry_policy.delays_s.join(', ')} s` : 'the default (8 attempts)'}</dd>
        <dt>Rate limit</dt><dd>${s.rate_limit ? `${s.rate_limit} a second` : 'none'}</dd>
        <dt>Created</dt><dd><${Time} value=${s['time-created']} /></dd>
      </dl>
      <h3>Custom headers</h3>
      <${MapTable} map=${s.custom_headers} caption="Custom headers" />
      <div class="actions">
        <a href=${`#/webhooks/${enc(id)}/edit`}>Edit</a>
        <button type="button" disabled=${test.busy} onClick=${() => test.run()}>Send a test</button>
        <button type="button" class="secondary" disabled=${pause.busy} onClick=${() => pause.run()}>${s.enabled ? 'Pause' : 'Enable'}</button>
        <button type="button" class="secondary" disabled=${rotate.busy} onClick=${() => rotate.run()}>Rotate signing secret</button>
        <${ConfirmButton} label="Delete subscription" confirm="Yes, delete this subscription" busy=${remove.busy} onConfirm=${() => remove.run()} />
      </div>
      <${ErrorNote} error=${test.error || rotate.error || pause.error || remove.error} />
      ${test.done && html`<${Note} kind="ok">Test sent: it shows in the delivery log below.</${Note}>`}
      ${rotate.done && html`<${SecretOnce} label="New signing secret" value=${rotate.done.secret} /><p class="hint">The previous secret signs beside it until the next rotation.</p>`}
    </section>
    <${DeliveryLog} id=${id} refreshKey=${test.done} />
    <${Recover} id=${id} />`;
}

export { Attempt } from './deliveries.js';
