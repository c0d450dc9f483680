// The account: its profile, the signed-in token's claims, a password change, its third-party apps
// (scopes, redirect URIs, the secret shown once), and granting a service access on its behalf.
import { useState } from 'preact/hooks';
import { enc, query, request } from './api.js';
import {
  ConfirmButton,
  ErrorNote,
  Field,
  html,
  Note,
  PAGE,
  Pager,
  SecretOnce,
  SelectField,
  Time,
  useAction,
  useResource,
  useTitle,
} from './ui.js';

const PROFILE_FIELDS = [
  ['fullName', 'Full name'],
  ['company', 'Company'],
  ['location', 'Location'],
  ['website', 'Website'],
  ['github', 'GitHub'],
  ['gitlab', 'GitLab'],
  ['twitter', 'Twitter'],
  ['picture', 'Picture URL'],
  ['bio', 'Bio'],
];

export function Account() {
  useTitle('Account');
  return html`<h1>Account</h1>
    <${Profile} />
    <${Token} />
    <${Password} />
    <${Apps} />
    <${Delegate} />`;
}

function Profile() {
  const profile = useResource(() => request('GET', '/profiles/'), []);
  if (!profile.data)
    return html`<section class="card"><h2>Profile</h2><${ErrorNote} error=${profile.error} /></section>`;
  return html`<${ProfileForm} profile=${profile.data} />`;
}

function ProfileForm({ profile }) {
  const [f, setForm] = useState(profile);
  const save = useAction(async () => {
    const body = { meta: f.meta ?? {} };
    for (const [k] of PROFILE_FIELDS) body[k] = f[k] ?? '';
    return request('PUT', '/profiles/', body);
  });
  return html`<section class="card" aria-labelledby="profile-heading">
    <h2 id="profile-heading">Profile</h2>
    <dl class="facts"><dt>Nick</dt><dd>${profile.nick}</dd><dt>Email</dt><dd>${profile.email}</dd></dl>
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      save.run();
    }}>
      ${PROFILE_FIELDS.map(
        ([k, label]) =>
          html`<${Field} label=${label} value=${f[k] ?? ''} maxlength="1024" onInput=${(v) => setForm((o) => ({ ...o, [k]: v }))} />`,
      )}
      <div><button disabled=${save.busy}>Save profile</button></div>
      <${ErrorNote} error=${save.error} />
      ${save.done && html`<${Note} kind="ok">Profile saved.</${Note}>`}
    </form>
  </section>`;
}

function Token() {
  const claims = useResource(() => request('GET', '/auth/auth_status'), []);
  const c = claims.data;
  return html`<section class="card" aria-labelledby="token-heading">
    <h2 id="token-heading">This sign-in</h2>
    <${ErrorNote} error=${claims.error} />
    ${
      c &&
      html`<dl class="facts">
        <dt>Account</dt><dd><code>${c.prn}</code> (${c.type})</dd>
        <dt>Scopes</dt><dd>${[c.scopes].flat().filter(Boolean).join(' ') || '–'}</dd>
        <dt>Expires</dt><dd><${Time} value=${c.exp} /></dd>
        ${c.act && html`<dt>Acting admin</dt><dd>${JSON.stringify(c.act)}</dd>`}
      </dl>`
    }
  </section>`;
}

function Password() {
  const [current, setCurrent] = useState('');
  const [next, setNext] = useState('');
  const change = useAction(async () => {
    const r = await request('POST', '/auth/password', { current_password: current, password: next });
    setCurrent('');
    setNext('');
    return r;
  });
  return html`<section class="card" aria-labelledby="password-heading">
    <h2 id="password-heading">Password</h2>
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      change.run();
    }}>
      <${Field} label="Current password" type="password" value=${current} onInput=${setCurrent} autocomplete="current-password" required />
      <${Field} label="New password" type="password" value=${next} onInput=${setNext} autocomplete="new-password" minlength="8" required />
      <div><button disabled=${change.busy}>Change password</button></div>
      <${ErrorNote} error=${change.error} />
      ${change.done && html`<${Note} kind="ok">${change.done.message}</${Note}>`}
    </form>
  </section>`;
}

const splitList = (text) =>
  text
    .split(/[\s,]+/)
    .map((s) => s.trim())
    .filter(Boolean);

function Apps() {
  const [skip, setSkip] = useState(0);
  const [editing, setEditing] = useState(null); // an app, or {} for a new one
  const list = useResource(() => request('GET', `/apps${query({ limit: PAGE, skip })}`), [skip]);
  const items = list.data?.items ?? [];
  return html`<section class="card" aria-labelledby="apps-heading">
    <h2 id="apps-heading">Apps</h2>
    <p class="hint">Third-party applications that act on behalf of users, with the scopes they ask for and where they may redirect.</p>
    <${ErrorNote} error=${list.error} />
    ${list.data && items.length === 0 && html`<p>No apps.</p>`}
    ${
      items.length > 0 &&
      html`<div class="scroll"><table class="cards">
        <caption class="visually-hidden">Your apps</caption>
        <thead><tr><th scope="col">Name</th><th scope="col">Type</th><th scope="col">Scopes</th><th scope="col">Redirect URIs</th><th scope="col">Actions</th></tr></thead>
        <tbody>${items.map(
          (a) => html`<tr>
            <td data-label="Name">${a.name} (<code>${a.nick}</code>)</td>
            <td data-label="Type">${a.type}</td>
            <td data-label="Scopes">${(a.scopes ?? []).map((s) => html`<code title=${s.description ?? ''}>${s.id}</code> `)}</td>
            <td data-label="Redirect URIs">${(a.redirect_uris ?? []).map((u) => html`<code>${u}</code> `)}</td>
            <td data-label="Actions"><button type="button" class="secondary" onClick=${() => setEditing(a)}>Edit ${a.nick}</button>
              <${DeleteApp} app=${a} onDeleted=${list.reload} /></td>
          </tr>`,
        )}</tbody>
      </table></div>`
    }
    <${Pager} page=${list.data} onSkip=${setSkip} label="Apps" />
    ${
      editing
        ? html`<${AppForm} key=${editing.id ?? 'new'} app=${editing} onSaved=${list.reload} onClose=${() => setEditing(null)} />`
        : html`<div class="actions"><button type="button" onClick=${() => setEditing({})}>New app</button></div>`
    }
  </section>`;
}

function DeleteApp({ app, onDeleted }) {
  const remove = useAction(async () => {
    await request('DELETE', `/apps/${enc(app.id)}`);
    onDeleted();
  });
  return html`<${ConfirmButton} label=${`Delete ${app.nick}`} confirm="Yes, delete" busy=${remove.busy} onConfirm=${() => remove.run()} /><${ErrorNote} error=${remove.error} />`;
}

function AppForm({ app, onSaved, onClose }) {
  const [f, setForm] = useState({
    nick: app.nick ?? '',
    name: app.name ?? '',
    type: app.type ?? 'public',
    logo: app.logo ?? '',
    redirect_uris: (app.redirect_uris ?? []).join('\n'),
    scopes: (app.scopes ?? []).map((s) => s.id).join(' '),
  });
  const set = (k) => (v) => setForm((o) => ({ ...o, [k]: v }));
  const save = useAction(async () => {
    const body = {
      nick: f.nick,
      name: f.name,
      type: f.type,
      ...(f.logo ? { logo: f.logo } : {}),
      redirect_uris: splitList(f.redirect_uris),
      // Scopes already there keep their descriptions; new ones are ids alone.
      scopes: splitList(f.scopes).map((id) => (app.scopes ?? []).find((s) => s.id === id) ?? { id }),
    };
    const saved = await request(app.id ? 'PUT' : 'POST', app.id ? `/apps/${enc(app.id)}` : '/apps', body);
    onSaved();
    return saved;
  });
  return html`<form class="stack" aria-label=${app.id ? `Edit app ${app.nick}` : 'New app'} onSubmit=${(
    e,
  ) => {
    e.preventDefault();
    save.run();
  }}>
    <h3>${app.id ? `Edit ${app.nick}` : 'New app'}</h3>
    <${Field} label="App nick" value=${f.nick} onInput=${set('nick')} required />
    <${Field} label="App name" value=${f.name} onInput=${set('name')} required />
    ${!app.id && html`<${SelectField} label="App type" value=${f.type} onInput=${set('type')} options=${[['public', 'Public'], ['confidential', 'Confidential (gets a secret)']]} />`}
    <${Field} label="Logo URL" value=${f.logo} onInput=${set('logo')} />
    <div class="field">
      <label for="app-redirects">Redirect URIs (one a line)</label>
      <textarea id="app-redirects" value=${f.redirect_uris} onInput=${(e) => set('redirect_uris')(e.currentTarget.value)}></textarea>
    </div>
    <${Field} label="Scopes" value=${f.scopes} onInput=${set('scopes')} hint="Scope ids, separated by spaces." />
    <div class="actions">
      <button disabled=${save.busy}>${app.id ? 'Save app' : 'Create app'}</button>
      <button type="button" class="secondary" onClick=${onClose}>Close</button>
    </div>
    <${ErrorNote} error=${save.error} />
    ${save.done?.secret && html`<${SecretOnce} label="App secret" value=${save.done.secret} />`}
    ${save.done && !save.done.secret && html`<${Note} kind="ok">Saved.</${Note}>`}
  </form>`;
}

/** POST /auth/code: the first step of a service's delegated token. The API does not list the
 * tokens delegated so far, so neither does the console. */
function Delegate() {
  const [service, setService] = useState('');
  const [scopes, setScopes] = useState('');
  const grant = useAction(() =>
    request('POST', '/auth/code', { service: service.trim(), scopes: scopes.trim() }),
  );
  return html`<section class="card" aria-labelledby="delegate-heading">
    <h2 id="delegate-heading">Grant a service access</h2>
    <p class="hint">The service swaps this short-lived code for a long-lived token that acts as you, limited to these scopes. The hub does not list the tokens delegated so far.</p>
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      grant.run();
    }}>
      <${Field} label="Service PRN" value=${service} onInput=${setService} placeholder="prn:example.com:auth:/billing" required />
      <${Field} label="Scopes to grant" value=${scopes} onInput=${setScopes} hint="Space-separated; * grants every scope." required />
      <div><button disabled=${grant.busy}>Get an access code</button></div>
      <${ErrorNote} error=${grant.error} />
      ${grant.done && html`<${SecretOnce} label="Access code" value=${grant.done.code} />`}
    </form>
  </section>`;
}
