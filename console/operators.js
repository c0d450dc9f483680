// Operators (admins): every account, and the read models' projection status (version,
// generation, checkpoint, lag) with a replay started here and its progress shown live.
import { useState } from 'preact/hooks';
import { listAccounts, listProjections, projection, replay } from './ops-api.js';
import { ErrorNote, html, Note, Pager, Time, useAction, useResource, useTitle } from './ui.js';

const PAGE = 25;

export function Operators({ user }) {
  useTitle('Operators');
  if (!user?.admin)
    return html`<h1>Operators</h1><${Note}>This page is for the hub’s admins (HUB_ADMINS).</${Note}>`;
  return html`<h1>Operators</h1>
    <${Projections} />
    <${Accounts} />`;
}

function Accounts() {
  const [skip, setSkip] = useState(0);
  const list = useResource(() => listAccounts(skip, PAGE), [skip]);
  const items = list.data?.items ?? [];
  return html`<section class="card" aria-labelledby="accounts-heading">
    <h2 id="accounts-heading">Accounts</h2>
    <${ErrorNote} error=${list.error} />
    ${
      items.length > 0 &&
      html`<div class="scroll"><table class="cards">
        <caption class="visually-hidden">Every account</caption>
        <thead><tr><th scope="col">Nick</th><th scope="col">Email</th><th scope="col">Type</th><th scope="col">Status</th><th scope="col">Created</th></tr></thead>
        <tbody>${items.map(
          (a) => html`<tr>
            <td data-label="Nick">${a.nick}</td>
            <td data-label="Email">${a.email}</td>
            <td data-label="Type">${a.type}</td>
            <td data-label="Status">${a.status}</td>
            <td data-label="Created"><${Time} value=${a['time-created']} /></td>
          </tr>`,
        )}</tbody>
      </table></div>`
    }
    <${Pager} page=${list.data} onSkip=${setSkip} label="Accounts" />
  </section>`;
}

const fmt = (n) => (n === undefined || n === null ? '–' : Number(n).toLocaleString());

function Projections() {
  const [watching, setWatching] = useState(null);
  const list = useResource(listProjections, [], watching ? 0 : 5000);
  return html`<section class="card" aria-labelledby="projections-heading">
    <h2 id="projections-heading">Projections</h2>
    <p class="hint">The read models, how far each has applied the event store, and a replay that rebuilds one beside the live one, then switches reads.</p>
    <${ErrorNote} error=${list.error} />
    ${
      list.data &&
      html`<div class="scroll"><table class="cards">
        <caption class="visually-hidden">Projection status</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Version</th><th scope="col">Generation</th><th scope="col">Checkpoint</th><th scope="col">Lag</th><th scope="col">Replay</th></tr></thead>
        <tbody>${list.data.map(
          (p) => html`<tr>
            <td data-label="Name">${p.name}</td>
            <td data-label="Version">${p.version}</td>
            <td data-label="Generation">${p.generation}</td>
            <td data-label="Checkpoint">${fmt(p.checkpoint)}</td>
            <td data-label="Lag">${fmt(p.lagEvents)} events${p.lagSeconds ? `, ${p.lagSeconds.toFixed(1)} s` : ''}</td>
            <td data-label="Replay">${
              p.replay?.status === 'running' || p.replay?.status === 'switched'
                ? html`${p.replay.status} (generation ${p.replay.generation})`
                : html`<button type="button" class="secondary" onClick=${() => setWatching({ name: p.name, generation: p.generation })}>Replay ${p.name}</button>`
            }</td>
          </tr>`,
        )}</tbody>
      </table></div>`
    }
    ${
      watching &&
      html`<${ReplayProgress} key=${watching.name} name=${watching.name} generation=${watching.generation} onDone=${() => {
        setWatching(null);
        list.reload();
      }} />`
    }
  </section>`;
}

/** Starts the replay of `name` (now reading `generation`), then shows its progress until it is
 * done: until the status shows no replay running and a generation other than the one it started
 * from. */
function ReplayProgress({ name, generation, onDone }) {
  const [started, setStarted] = useState(false);
  const begin = useAction(async () => {
    await replay(name);
    setStarted(true);
  });
  const status = useResource(
    () => (started ? projection(name) : Promise.resolve(null)),
    [started],
    started ? 500 : 0,
  );
  const p = status.data;
  const r = p?.replay;
  const running = r && r.status === 'running';
  const finished = started && p && !running && p.generation !== generation;
  const stopped = started && r && (r.status === 'failed' || r.status === 'interrupted');
  return html`<div class="card" role="region" aria-label=${`Replay of ${name}`}>
    <h3>Replay of ${name}</h3>
    ${
      !started &&
      html`<p>Rebuilds ${name} from the whole event store beside the live one; reads switch when it has caught up.</p>
      <div class="actions">
        <button type="button" disabled=${begin.busy} onClick=${() => begin.run()}>Start the replay</button>
        <button type="button" class="secondary" onClick=${onDone}>Cancel</button>
      </div>`
    }
    <${ErrorNote} error=${begin.error || status.error} />
    <div aria-live="polite">
      ${
        running &&
        html`<p><progress max=${r.head || 1} value=${r.checkpoint} aria-label=${`Replay of ${name}`}></progress>
          ${fmt(r.checkpoint)} of ${fmt(r.head)} events${r.rate ? `, ${fmt(Math.round(r.rate))}/s` : ''}</p>`
      }
      ${stopped && html`<${Note} kind="error">The replay ${r.status === 'failed' ? 'failed' : 'was interrupted'}${r.error ? `: ${r.error}` : ''}. Start it again to resume.</${Note}>`}
      ${finished && html`<${Note} kind="ok">Replayed: ${name} now reads from generation ${p.generation}.</${Note}>`}
    </div>
    ${finished && html`<div class="actions"><button type="button" class="secondary" onClick=${onDone}>Close</button></div>`}
  </div>`;
}
