// The console's shell: the routes of its pages (in the address's hash, so that /console/ is the one
// page the hub serves), the navigation, and where focus goes when a page changes.
import { render } from 'preact';
import { useEffect, useRef, useState } from 'preact/hooks';
import { Account } from './account.js';
import { session, signOut } from './api.js';
import { Recover, SignIn, SignUp, Verify } from './auth.js';
import { Device, Devices } from './devices.js';
import { Event, Events } from './events.js';
import { Operators } from './operators.js';
import { html } from './ui.js';
import { Attempt, Webhook, WebhookForm, Webhooks } from './webhooks.js';

/** Path pattern → page, and whether it needs a session. */
const PAGES = [
  [/^\/signin$/, SignIn, false],
  [/^\/signup$/, SignUp, false],
  [/^\/verify$/, Verify, false],
  [/^\/recover$/, Recover, false],
  [/^\/devices$/, Devices, true],
  [/^\/devices\/([^/]+)$/, Device, true],
  [/^\/webhooks$/, Webhooks, true],
  [/^\/webhooks\/new$/, WebhookForm, true],
  [/^\/webhooks\/([^/]+)\/edit$/, WebhookForm, true],
  [/^\/webhooks\/([^/]+)\/deliveries\/([^/]+)$/, Attempt, true],
  [/^\/webhooks\/([^/]+)$/, Webhook, true],
  [/^\/events$/, Events, true],
  [/^\/events\/([^/]+)$/, Event, true],
  [/^\/account$/, Account, true],
  [/^\/operators$/, Operators, true],
];

function location() {
  const [path, search = ''] = window.location.hash.replace(/^#/, '').split('?');
  return { path: path || '/', query: new URLSearchParams(search) };
}

function useLocation() {
  const [where, setWhere] = useState(location);
  useEffect(() => {
    const changed = () => setWhere(location());
    window.addEventListener('hashchange', changed);
    return () => window.removeEventListener('hashchange', changed);
  }, []);
  return where;
}

function useSession() {
  const [current, setCurrent] = useState(session.get);
  useEffect(() => {
    const changed = () => setCurrent(session.get());
    window.addEventListener('hub-session', changed);
    return () => window.removeEventListener('hub-session', changed);
  }, []);
  return current;
}

function Nav({ user, path }) {
  const link = (href, text) =>
    html`<li><a href=${`#${href}`} aria-current=${path === href || path.startsWith(`${href}/`) ? 'page' : undefined}>${text}</a></li>`;
  return html`<nav aria-label="Console">
    <ul>
      ${
        user
          ? [
              link('/devices', 'Devices'),
              link('/webhooks', 'Webhooks'),
              link('/events', 'Event log'),
              link('/account', 'Account'),
              user.admin && link('/operators', 'Operators'),
              html`<li><button class="link" onClick=${() => {
                signOut();
                window.location.hash = '#/signin';
              }}>Sign out ${user.nick}</button></li>`,
            ]
          : [link('/signin', 'Sign in'), link('/signup', 'Sign up'), link('/recover', 'Forgot password')]
      }
    </ul>
  </nav>`;
}

function App() {
  const { path, query } = useLocation();
  const user = useSession();
  const main = useRef();
  let match = null;
  let page = null;
  for (const [pattern, component, needsSession] of PAGES) {
    match = pattern.exec(path);
    if (match) {
      page = { component, needsSession };
      break;
    }
  }
  const redirect = !page ? (user ? '/devices' : '/signin') : page.needsSession && !user ? '/signin' : null;
  useEffect(() => {
    if (redirect) window.location.replace(`#${redirect}`);
  }, [redirect]);
  // A new page takes focus at its heading, as a page load would; so screen readers announce it.
  useEffect(() => {
    const heading = main.current?.querySelector('h1');
    if (heading) {
      heading.setAttribute('tabindex', '-1');
      heading.focus({ preventScroll: false });
    }
  }, [path]);
  const Page = redirect ? null : page.component;
  return html`<a class="skip" href="#main" onClick=${(e) => {
    e.preventDefault();
    main.current?.focus();
  }}>Skip to content</a>
    <header class="top">
      <a class="brand" href="#/devices">Device Hub</a>
      <${Nav} user=${user} path=${path} />
    </header>
    <main id="main" ref=${main} tabindex="-1">
      ${Page && html`<${Page} params=${match.slice(1).map(decodeURIComponent)} query=${query} user=${user} />`}
    </main>`;
}

// The page's placeholder goes: Preact adds to what the container holds.
const root = document.getElementById('app');
root.textContent = '';
render(html`<${App} />`, root);
