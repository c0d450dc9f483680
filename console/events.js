// The account's event log (every derived event, matched by a subscription or not) with its
// filters, and one event: its payload, its deliveries across subscriptions, and a redelivery.
import { useState } from 'preact/hooks';
import { enc, query, request } from './api.js';
import { Attempts, isoOf } from './deliveries.js';
import {
  ErrorNote,
  Field,
  html,
  Json,
  Note,
  PAGE,
  Pager,
  SelectField,
  Time,
  useAction,
  useResource,
  useTitle,
} from './ui.js';

const EMPTY = { type: '', resource_prn: '', since: '', until: '' };

export function Events() {
  useTitle('Event log');
  const types = useResource(() => request('GET', '/webhooks/event-types'), []);
  const [draft, setDraft] = useState(EMPTY);
  const [filters, setFilters] = useState(EMPTY);
  const [skip, setSkip] = useState(0);
  const log = useResource(
    () =>
      request(
        'GET',
        `/webhooks/events${query({
          type: filters.type,
          resource_prn: filters.resource_prn.trim(),
          since: isoOf(filters.since),
          until: isoOf(filters.until),
          limit: PAGE,
          skip,
        })}`,
      ),
    [filters, skip],
  );
  const set = (field) => (value) => setDraft((d) => ({ ...d, [field]: value }));
  const items = log.data?.items ?? [];
  return html`<h1>Event log</h1>
    <p class="hint">Every event derived for your account, whether a subscription matched it or not, newest first.</p>
    <form class="stack" aria-label="Filters" onSubmit=${(e) => {
      e.preventDefault();
      setSkip(0);
      setFilters(draft);
    }}>
      <${SelectField} label="Type" value=${draft.type} onInput=${set('type')} options=${[
        ['', 'Any type'],
        ...(types.data?.items ?? []).map((t) => [t.type, t.type]),
      ]} />
      <${Field} label="Device PRN" value=${draft.resource_prn} onInput=${set('resource_prn')} placeholder="prn:::devices:/…" />
      <div class="row">
        <${Field} label="Since" type="datetime-local" value=${draft.since} onInput=${set('since')} />
        <${Field} label="Until" type="datetime-local" value=${draft.until} onInput=${set('until')} />
      </div>
      <div class="actions">
        <button>Apply filters</button>
        <button type="button" class="secondary" onClick=${() => {
          setDraft(EMPTY);
          setFilters(EMPTY);
          setSkip(0);
        }}>Clear</button>
        <button type="button" class="secondary" onClick=${log.reload}>Refresh</button>
      </div>
    </form>
    <${ErrorNote} error=${log.error || types.error} />
    ${log.data && items.length === 0 && html`<p>No events.</p>`}
    ${
      items.length > 0 &&
      html`<div class="scroll"><table class="cards">
        <caption class="visually-hidden">Events, newest first</caption>
        <thead><tr><th scope="col">Event</th><th scope="col">Type</th><th scope="col">Device</th><th scope="col">Created</th></tr></thead>
        <tbody>${items.map(
          (e) => html`<tr>
            <td data-label="Event"><a href=${`#/events/${enc(e.id)}`}>${e.id}</a></td>
            <td data-label="Type">${e.type}${e.livemode ? '' : ' (test)'}</td>
            <td data-label="Device"><code>${e.resource_prn}</code></td>
            <td data-label="Created"><${Time} value=${e.created} /></td>
          </tr>`,
        )}</tbody>
      </table></div>`
    }
    <${Pager} page=${log.data} onSkip=${setSkip} label="Events" />`;
}

export function Event({ params: [eid] }) {
  useTitle(`Event ${eid}`);
  const event = useResource(() => request('GET', `/webhooks/events/${enc(eid)}`), [eid]);
  const redeliver = useAction(() => request('POST', `/webhooks/events/${enc(eid)}/redeliver`));
  const deliveries = useResource(
    () => request('GET', `/webhooks/events/${enc(eid)}/deliveries`),
    [eid, redeliver.done],
    3000,
  );
  const e = event.data;
  const attempts = deliveries.data?.items ?? [];
  return html`<h1>Event ${eid}</h1>
    <p><a href="#/events">Back to the event log</a></p>
    <${ErrorNote} error=${event.error} />
    ${
      e &&
      html`<section class="card" aria-labelledby="event-heading">
        <h2 id="event-heading">${e.type}</h2>
        <dl class="facts">
          <dt>Device</dt><dd><code>${e.resource_prn}</code></dd>
          <dt>Created</dt><dd><${Time} value=${e.created} /></dd>
          <dt>API version</dt><dd>${e.api_version}</dd>
          <dt>Live</dt><dd>${e.livemode ? 'Yes' : 'No (a test)'}</dd>
        </dl>
        <h3>Payload</h3>
        <${Json} value=${e} label="Event payload" />
        <div class="actions"><button type="button" disabled=${redeliver.busy} onClick=${() => redeliver.run()}>Redeliver to every matching subscription</button></div>
        <${ErrorNote} error=${redeliver.error} />
        ${redeliver.done && html`<${Note} kind="ok">${redeliver.done.jobs.length} ${redeliver.done.jobs.length === 1 ? 'delivery' : 'deliveries'} queued.</${Note}>`}
      </section>`
    }
    <section class="card" aria-labelledby="deliveries-heading">
      <h2 id="deliveries-heading">Deliveries</h2>
      <${ErrorNote} error=${deliveries.error} />
      ${deliveries.data && attempts.length === 0 && html`<p>No subscription received it.</p>`}
      ${attempts.length > 0 && html`<${Attempts} items=${attempts} caption="Deliveries of this event, oldest first" />`}
    </section>`;
}
