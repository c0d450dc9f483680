// A subscription's delivery log (status filter, pages, polled), one attempt with the request as
// sent and the answer as received, its replay, and the recovery of a window's failed deliveries
// with its progress.
import { useState } from 'preact/hooks';
import { enc, query, request } from './api.js';
import {
  ErrorNote,
  Field,
  html,
  Json,
  MapTable,
  Note,
  PAGE,
  Pager,
  SelectField,
  Time,
  useAction,
  useResource,
  useTitle,
} from './ui.js';

const STATUS_BADGE = { succeeded: 'good', failed: 'warn', dead_lettered: 'bad' };

export const StatusBadge = ({ status }) =>
  html`<span class=${`badge ${STATUS_BADGE[status] ?? 'muted'}`}>${status?.replace('_', '-') ?? '–'}</span>`;

/** Attempts as a table: each links to its own page. */
export function Attempts({ items, caption }) {
  return html`<div class="scroll"><table class="cards">
    <caption class="visually-hidden">${caption}</caption>
    <thead><tr><th scope="col">Attempt</th><th scope="col">Event</th><th scope="col">Kind</th><th scope="col">Status</th><th scope="col">Answer</th><th scope="col">Duration</th><th scope="col">Started</th></tr></thead>
    <tbody>${items.map(
      (a) => html`<tr>
        <td data-label="Attempt"><a href=${`#/webhooks/${enc(a.subscription_id)}/deliveries/${enc(a.id)}`}>${a.id}</a> (#${a.attempt})</td>
        <td data-label="Event">${a.event_type}</td>
        <td data-label="Kind">${a.kind}</td>
        <td data-label="Status"><${StatusBadge} status=${a.status} /></td>
        <td data-label="Answer">${a.response_code ?? a.outcome ?? '–'}</td>
        <td data-label="Duration">${a.duration_ms} ms</td>
        <td data-label="Started"><${Time} value=${a.started_at} /></td>
      </tr>`,
    )}</tbody>
  </table></div>`;
}

export function DeliveryLog({ id, refreshKey }) {
  const [status, setStatus] = useState('');
  const [skip, setSkip] = useState(0);
  const log = useResource(
    () => request('GET', `/webhooks/${enc(id)}/deliveries${query({ status, limit: PAGE, skip })}`),
    [id, status, skip, refreshKey],
    3000,
  );
  const items = log.data?.items ?? [];
  return html`<section class="card" aria-labelledby="log-heading">
    <h2 id="log-heading">Delivery log</h2>
    <${SelectField} label="Status" value=${status} onInput=${(v) => {
      setStatus(v);
      setSkip(0);
    }} options=${[
      ['', 'Every attempt'],
      ['succeeded', 'Succeeded'],
      ['failed', 'Failed (dead-lettered included)'],
      ['dead_lettered', 'Dead-lettered'],
    ]} />
    <${ErrorNote} error=${log.error} />
    ${log.data && items.length === 0 && html`<p>No attempts${status ? ' of this status' : ''} yet.</p>`}
    ${items.length > 0 && html`<${Attempts} items=${items} caption="Delivery attempts, newest first" />`}
    <${Pager} page=${log.data} onSkip=${setSkip} label="Attempts" />
  </section>`;
}

export function Attempt({ params: [id, did] }) {
  useTitle(`Attempt ${did}`);
  const attempt = useResource(() => request('GET', `/webhooks/${enc(id)}/deliveries/${enc(did)}`), [id, did]);
  const replay = useAction(() => request('POST', `/webhooks/${enc(id)}/deliveries/${enc(did)}/replay`));
  const a = attempt.data;
  if (!a)
    return html`<h1>Attempt ${did}</h1><${ErrorNote} error=${attempt.error} />${attempt.loading && html`<p>Loading…</p>`}`;
  return html`<h1>Attempt ${a.id}</h1>
    <p><a href=${`#/webhooks/${enc(id)}`}>Back to the subscription</a> · <a href=${`#/events/${enc(a.event_id)}`}>Its event</a></p>
    <section class="card" aria-labelledby="attempt-heading">
      <h2 id="attempt-heading">Outcome</h2>
      <dl class="facts">
        <dt>Status</dt><dd><${StatusBadge} status=${a.status} /> ${a.outcome}</dd>
        <dt>Event</dt><dd><code>${a.event_id}</code> (${a.event_type})</dd>
        <dt>Kind</dt><dd>${a.kind}, attempt ${a.attempt}</dd>
        <dt>Duration</dt><dd>${a.duration_ms} ms</dd>
        <dt>Scheduled</dt><dd><${Time} value=${a.scheduled_at} /></dd>
        <dt>Started</dt><dd><${Time} value=${a.started_at} /></dd>
        <dt>Finished</dt><dd><${Time} value=${a.finished_at} /></dd>
        ${a.next_attempt_at && html`<dt>Next attempt</dt><dd><${Time} value=${a.next_attempt_at} /></dd>`}
        ${a.error && html`<dt>Error</dt><dd>${a.error}</dd>`}
      </dl>
      <div class="actions"><button type="button" disabled=${replay.busy} onClick=${() => replay.run()}>Replay</button></div>
      <${ErrorNote} error=${replay.error} />
      ${replay.done && html`<${Note} kind="ok">Replayed as a new job (${replay.done.jobs.map((j) => j.job_id).join(', ')}): its attempt shows in the <a href=${`#/webhooks/${enc(id)}`}>delivery log</a>.</${Note}>`}
    </section>
    <section class="card" aria-labelledby="request-heading">
      <h2 id="request-heading">Request</h2>
      <p>POST <code>${a.request?.url}</code></p>
      <h3>Headers</h3>
      <${MapTable} map=${a.request?.headers} caption="Request headers" />
      <h3>Body</h3>
      <${Json} value=${a.request?.body ?? ''} label="Request body" />
    </section>
    <section class="card" aria-labelledby="response-heading" data-testid="response">
      <h2 id="response-heading">Response</h2>
      ${
        a.response
          ? html`<p>Status <strong>${a.response.status}</strong>${a.response.truncated ? ' (body cut at 4 KiB)' : ''}</p>
            <h3>Headers</h3>
            <${MapTable} map=${a.response.headers} caption="Response headers" />
            <h3>Body</h3>
            <${Json} value=${a.response.body} label="Response body" />`
          : html`<p>No answer came: ${a.error ?? a.outcome}.</p>`
      }
    </section>`;
}

/** RFC 3339 of a datetime-local input (the reader's zone), or ''. */
export const isoOf = (local) => (local ? new Date(local).toISOString() : '');

export function Recover({ id }) {
  const [since, setSince] = useState('');
  const [until, setUntil] = useState('');
  const [recovery, setRecovery] = useState(null);
  const start = useAction(async () => {
    const r = await request('POST', `/webhooks/${enc(id)}/recover`, {
      since: isoOf(since),
      ...(until ? { until: isoOf(until) } : {}),
    });
    setRecovery(r.id);
    return r;
  });
  const progress = useResource(
    () =>
      recovery ? request('GET', `/webhooks/${enc(id)}/recoveries/${enc(recovery)}`) : Promise.resolve(null),
    [recovery],
    recovery ? 1000 : 0,
  );
  const p = progress.data ?? start.done;
  return html`<section class="card" aria-labelledby="recover-heading">
    <h2 id="recover-heading">Recover failed deliveries</h2>
    <p class="hint">Sends again every delivery that failed in the window and has not succeeded since.</p>
    <form class="inline" onSubmit=${(e) => {
      e.preventDefault();
      start.run();
    }}>
      <${Field} label="Failed since" type="datetime-local" value=${since} onInput=${setSince} required />
      <${Field} label="Until (empty: now)" type="datetime-local" value=${until} onInput=${setUntil} />
      <button disabled=${start.busy}>Recover</button>
    </form>
    <${ErrorNote} error=${start.error || progress.error} />
    ${
      p &&
      html`<div role="status">
        <p>Recovery <code>${p.id}</code>: ${p.status}${p.total === null ? '' : `, ${p.succeeded} of ${p.total} succeeded, ${p.dead_lettered} dead-lettered, ${p.pending} pending`}.</p>
        ${p.total ? html`<progress max=${p.total} value=${p.succeeded + p.dead_lettered} aria-label="Recovery progress"></progress>` : ''}
      </div>`
    }
  </section>`;
}
