// Devices: the account's list (paginated; found by id, PRN or nick; filtered on the page shown), a
// new device, claiming an unowned one, and a device's page: its two metadata maps (user-meta
// editable), its trail's steps with their progress and status, rename, public, secret, delete.
import { useEffect, useState } from 'preact/hooks';
import { ApiError, enc, query, request } from './api.js';
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

export function Devices() {
  useTitle('Devices');
  const [skip, setSkip] = useState(0);
  const [filter, setFilter] = useState('');
  const list = useResource(() => request('GET', `/devices${query({ limit: PAGE, skip })}`), [skip]);
  const needle = filter.trim().toLowerCase();
  const items = (list.data?.items ?? []).filter(
    (d) =>
      !needle ||
      [d.nick, d.id, d.prn, d['owner-nick'], d.owner].some((v) => v?.toLowerCase().includes(needle)),
  );
  return html`<h1>Devices</h1>
    <${NewDevice} onCreated=${list.reload} />
    <${FindDevice} />
    <section class="card" aria-labelledby="list-heading">
      <h2 id="list-heading">Your devices</h2>
      <${Field} label="Filter this page" type="search" value=${filter} onInput=${setFilter} hint="By nick, id, PRN or owner." />
      <${ErrorNote} error=${list.error} />
      ${list.data && items.length === 0 && html`<p>${list.data.total === 0 ? 'No devices yet.' : 'None on this page matches.'}</p>`}
      ${
        items.length > 0 &&
        html`<div class="scroll"><table class="cards">
          <caption class="visually-hidden">Your devices, newest first</caption>
          <thead><tr><th scope="col">Nick</th><th scope="col">Id</th><th scope="col">Owner</th><th scope="col">Public</th><th scope="col">Last change</th></tr></thead>
          <tbody>${items.map(
            (d) => html`<tr>
              <td data-label="Nick"><a href=${`#/devices/${enc(d.id)}`}>${d.nick}</a></td>
              <td data-label="Id"><code>${d.id}</code></td>
              <td data-label="Owner">${d['owner-nick'] ?? d.owner ?? '–'}</td>
              <td data-label="Public">${d.public ? 'Yes' : 'No'}</td>
              <td data-label="Last change"><${Time} value=${d['time-modified']} /></td>
            </tr>`,
          )}</tbody>
        </table></div>`
      }
      <${Pager} page=${list.data} onSkip=${setSkip} label="Devices" />
    </section>
    <${ClaimDevice} onClaimed=${list.reload} />`;
}

function NewDevice({ onCreated }) {
  const [nick, setNick] = useState('');
  const create = useAction(async () => {
    const device = await request('POST', '/devices', nick ? { nick } : {});
    setNick('');
    onCreated();
    return device;
  });
  return html`<section class="card" aria-labelledby="new-heading">
    <h2 id="new-heading">New device</h2>
    <form class="inline" onSubmit=${(e) => {
      e.preventDefault();
      create.run();
    }}>
      <${Field} label="Nick (optional)" value=${nick} onInput=${setNick} hint="Generated when left empty." />
      <button disabled=${create.busy}>Create device</button>
    </form>
    <${ErrorNote} error=${create.error} />
    ${
      create.done &&
      html`<p>Created <a href=${`#/devices/${enc(create.done.id)}`}>${create.done.nick}</a> (<code>${create.done.prn}</code>).
        It logs in with its PRN and this secret.</p>
        <${SecretOnce} label="Device secret" value=${create.done.secret} />`
    }
  </section>`;
}

function FindDevice() {
  const [text, setText] = useState('');
  const find = useAction(async () => {
    try {
      const device = await request('GET', `/devices/${enc(text.trim())}`);
      go(`/devices/${enc(device.id)}`);
    } catch (err) {
      if (err instanceof ApiError && err.status === 404)
        throw new Error(`No device of yours is ${text.trim()}.`);
      throw err;
    }
  });
  return html`<section class="card" aria-labelledby="find-heading">
    <h2 id="find-heading">Find a device</h2>
    <form class="inline" role="search" onSubmit=${(e) => {
      e.preventDefault();
      find.run();
    }}>
      <${Field} label="Id, PRN or nick" value=${text} onInput=${setText} required />
      <button disabled=${find.busy}>Find</button>
    </form>
    <${ErrorNote} error=${find.error} />
  </section>`;
}

function ClaimDevice({ onClaimed }) {
  const [id, setId] = useState('');
  const [challenge, setChallenge] = useState('');
  const [nick, setNick] = useState('');
  const claim = useAction(async () => {
    const device = await request('POST', `/devices/${enc(id.trim())}/claim`, {
      challenge: challenge.trim(),
      ...(nick ? { nick } : {}),
    });
    onClaimed();
    return device;
  });
  return html`<section class="card" aria-labelledby="claim-heading">
    <h2 id="claim-heading">Claim a device</h2>
    <p class="hint">A device that registered itself shows a challenge; with it, the device becomes yours.</p>
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      claim.run();
    }}>
      <${Field} label="Device id or PRN" value=${id} onInput=${setId} required />
      <${Field} label="Challenge" value=${challenge} onInput=${setChallenge} required />
      <${Field} label="Nick (optional)" value=${nick} onInput=${setNick} />
      <div><button disabled=${claim.busy}>Claim</button></div>
      <${ErrorNote} error=${claim.error} />
      ${claim.done && html`<${Note} kind="ok">Claimed <a href=${`#/devices/${enc(claim.done.id)}`}>${claim.done.nick}</a>.</${Note}>`}
    </form>
  </section>`;
}

export function Device({ params: [id], user }) {
  // The device polls: what it reports (device-meta) shows without a reload.
  const device = useResource(() => request('GET', `/devices/${enc(id)}`), [id], 5000);
  const d = device.data;
  useTitle(d ? `Device ${d.nick}` : 'Device');
  if (!d)
    return html`<h1>Device</h1><${ErrorNote} error=${device.error} />${device.loading && html`<p>Loading…</p>`}`;
  const mine = Boolean(d.owner) && d.owner === user?.prn;
  return html`<h1>Device ${d.nick}</h1>
    <${ErrorNote} error=${device.error} />
    <section class="card" aria-labelledby="facts-heading">
      <h2 id="facts-heading">About</h2>
      <dl class="facts">
        <dt>Id</dt><dd><code>${d.id}</code></dd>
        <dt>PRN</dt><dd><code>${d.prn}</code></dd>
        <dt>Owner</dt><dd>${d['owner-nick'] ?? d.owner ?? 'none (unclaimed)'}</dd>
        <dt>Public</dt><dd>${d.public ? 'Yes' : 'No'}</dd>
        <dt>Enrolled</dt><dd>${d.ovmode ? `${d.ovmode.mode}, ${d.ovmode.root_of_trust}, ${d.ovmode.status}` : '–'}</dd>
        <dt>Created</dt><dd><${Time} value=${d['time-created']} /></dd>
        <dt>Last change</dt><dd><${Time} value=${d['time-modified']} /></dd>
      </dl>
    </section>
    <section class="card" aria-labelledby="device-meta-heading">
      <h2 id="device-meta-heading">Device metadata</h2>
      <p class="hint">Reported by the device itself (PATCH /devices/{id}/device-meta); updated here every few seconds.</p>
      <div data-testid="device-meta"><${MapTable} map=${d['device-meta']} caption="Device metadata" empty="The device has reported nothing yet." /></div>
    </section>
    <${UserMeta} device=${d} onSaved=${device.reload} />
    <${Steps} id=${d.id} />
    ${mine && html`<${Manage} device=${d} onChanged=${device.reload} />`}`;
}

function UserMeta({ device, onSaved }) {
  const [rows, setRows] = useState(() => toRows(device['user-meta']));
  const save = useAction(async () => {
    await request('PUT', `/devices/${enc(device.id)}/user-meta`, fromRows(rows));
    onSaved();
    return true;
  });
  return html`<section class="card" aria-labelledby="user-meta-heading">
    <h2 id="user-meta-heading">User metadata</h2>
    <form onSubmit=${(e) => {
      e.preventDefault();
      save.run();
    }}>
      <${MapEditor} legend="Your tags and labels for this device" rows=${rows} setRows=${setRows} />
      <div class="actions">
        <button disabled=${save.busy}>Save user metadata</button>
        <button type="button" class="secondary" onClick=${() => setRows(toRows(device['user-meta']))}>Undo changes</button>
      </div>
      <${ErrorNote} error=${save.error} />
      ${save.done && html`<${Note} kind="ok">Saved.</${Note}>`}
    </form>
  </section>`;
}

const STATUS_BADGE = {
  DONE: 'good',
  UPDATED: 'good',
  ERROR: 'bad',
  WONTGO: 'bad',
  STARTED: 'warn',
  NEW: 'muted',
};

function Steps({ id }) {
  const [skip, setSkip] = useState(0);
  const steps = useResource(
    () => request('GET', `/trails/${enc(id)}/steps${query({ limit: PAGE, skip })}`),
    [id, skip],
    5000,
  );
  const items = steps.data?.items ?? [];
  return html`<section class="card" aria-labelledby="steps-heading">
    <h2 id="steps-heading">Trail steps</h2>
    <${ErrorNote} error=${steps.error} />
    ${steps.data && items.length === 0 && html`<p>No steps yet.</p>`}
    ${
      items.length > 0 &&
      html`<div class="scroll"><table class="cards">
        <caption class="visually-hidden">Steps of this device's trail</caption>
        <thead><tr><th scope="col">Rev</th><th scope="col">Message</th><th scope="col">Progress</th><th scope="col">Status</th><th scope="col">Created</th></tr></thead>
        <tbody>${items.map((s) => {
          const p = s.progress ?? {};
          return html`<tr>
            <td data-label="Rev">${s.rev}</td>
            <td data-label="Message">${s['commit-msg'] || '–'}</td>
            <td data-label="Progress"><progress max="100" value=${p.progress ?? 0} aria-label=${`Step ${s.rev} progress`}></progress> ${p.progress ?? 0} %</td>
            <td data-label="Status"><span class=${`badge ${STATUS_BADGE[p.status] ?? 'muted'}`}>${p.status ?? 'NEW'}</span>${p['status-msg'] ? html` ${p['status-msg']}` : ''}</td>
            <td data-label="Created"><${Time} value=${s['time-created']} /></td>
          </tr>`;
        })}</tbody>
      </table></div>`
    }
    <${Pager} page=${steps.data} onSkip=${setSkip} label="Steps" />
  </section>`;
}

function Manage({ device, onChanged }) {
  const [nick, setNick] = useState(device.nick);
  useEffect(() => setNick(device.nick), [device.nick]);
  const base = `/devices/${enc(device.id)}`;
  const rename = useAction(async () => {
    await request('PATCH', base, { nick });
    onChanged();
  });
  const publicity = useAction(async () => {
    await request(device.public ? 'DELETE' : 'PUT', `${base}/public`);
    onChanged();
  });
  const rotate = useAction(() => request('POST', `${base}/secret`, {}));
  const remove = useAction(async () => {
    await request('DELETE', base);
    go('/devices');
  });
  return html`<section class="card" aria-labelledby="manage-heading">
    <h2 id="manage-heading">Manage</h2>
    <form class="inline" onSubmit=${(e) => {
      e.preventDefault();
      rename.run();
    }}>
      <${Field} label="Nick" value=${nick} onInput=${setNick} required />
      <button disabled=${rename.busy}>Rename</button>
    </form>
    <${ErrorNote} error=${rename.error} />
    <div class="actions">
      <button type="button" class="secondary" disabled=${publicity.busy} onClick=${() => publicity.run()}>${device.public ? 'Make private' : 'Make public'}</button>
      <button type="button" class="secondary" disabled=${rotate.busy} onClick=${() => rotate.run()}>Rotate secret</button>
      <${ConfirmButton} label="Delete device" confirm="Yes, delete this device" busy=${remove.busy} onConfirm=${() => remove.run()} />
    </div>
    <${ErrorNote} error=${publicity.error || rotate.error || remove.error} />
    ${rotate.done && html`<${SecretOnce} label="New device secret" value=${rotate.done.secret} />`}
  </section>`;
}
