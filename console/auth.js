// Signing up, verifying the email, signing in and asking for a password reset: the hub's own flows
// (POST /auth/accounts, its challenge, /auth/verify, /auth/login, /auth/recover); the reset link of
// the email opens the hub's reset page (/auth/reset) as it always did.
import { useEffect, useState } from 'preact/hooks';
import { request, signIn } from './api.js';
import { ErrorNote, Field, html, Note, useAction, useTitle } from './ui.js';

export function SignIn() {
  useTitle('Sign in');
  const [username, setUsername] = useState('');
  const [password, setPassword] = useState('');
  const action = useAction(async () => {
    await signIn(username, password);
    window.location.hash = '#/devices';
  });
  return html`<h1>Sign in</h1>
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      action.run();
    }}>
      <${Field} label="Nick or email" value=${username} onInput=${setUsername} autocomplete="username" required />
      <${Field} label="Password" type="password" value=${password} onInput=${setPassword} autocomplete="current-password" required />
      <div><button disabled=${action.busy}>Sign in</button></div>
      <${ErrorNote} error=${action.error} />
    </form>
    <p>New here? <a href="#/signup">Sign up</a>. Forgot your password? <a href="#/recover">Get a reset link</a>.</p>`;
}

export function SignUp() {
  useTitle('Sign up');
  const [email, setEmail] = useState('');
  const [nick, setNick] = useState('');
  const [password, setPassword] = useState('');
  const [captcha, setCaptcha] = useState('');
  const register = useAction(() =>
    request('POST', '/auth/accounts', { email, nick, password }, { anonymous: true }),
  );
  const challenge = register.done?.['redirect-uri'];
  const send = useAction(() =>
    request('POST', new URL(challenge).pathname, captcha ? { captcha } : {}, { anonymous: true }),
  );
  if (send.done)
    return html`<h1>Check your email</h1>
      <${Note} kind="ok">${send.done.message}</${Note}>
      <p>Open the link of the email, or <a href="#/verify">paste it here</a>; then <a href="#/signin">sign in</a>.</p>`;
  if (challenge)
    return html`<h1>Verify your email</h1>
      <p>Your account <strong>${register.done.nick}</strong> is waiting for its email, ${register.done.email}, to be verified.</p>
      <form class="stack" onSubmit=${(e) => {
        e.preventDefault();
        send.run();
      }}>
        <${Field} label="Captcha answer (only if this hub asks for one)" value=${captcha} onInput=${setCaptcha} />
        <div><button disabled=${send.busy}>Send the verification email</button></div>
        <${ErrorNote} error=${send.error} />
      </form>
      <p class="hint">The hub’s own page for this step: <a href=${new URL(challenge).pathname}>the registration challenge</a>.</p>`;
  return html`<h1>Sign up</h1>
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      register.run();
    }}>
      <${Field} label="Email" type="email" value=${email} onInput=${setEmail} autocomplete="email" required />
      <${Field} label="Nick" value=${nick} onInput=${setNick} autocomplete="username" required hint="Letters, digits, . _ -; you sign in with it." />
      <${Field} label="Password" type="password" value=${password} onInput=${setPassword} autocomplete="new-password" required minlength="8" hint="At least 8 characters." />
      <div><button disabled=${register.busy}>Sign up</button></div>
      <${ErrorNote} error=${register.error} />
    </form>`;
}

/** The token of a verification link, or the token itself. */
const tokenOf = (text) => {
  try {
    return new URL(text.trim()).searchParams.get('token') ?? text.trim();
  } catch {
    return text.trim();
  }
};

export function Verify({ query }) {
  useTitle('Verify your email');
  const [link, setLink] = useState(query.get('token') ?? '');
  const verify = useAction((token) => request('POST', '/auth/verify', { token }, { anonymous: true }));
  // A link to #/verify?token=… verifies at once.
  useEffect(() => {
    if (query.get('token')) verify.run(query.get('token'));
  }, []);
  return html`<h1>Verify your email</h1>
    ${verify.done && html`<${Note} kind="ok">${verify.done.message} <a href="#/signin">Sign in</a>.</${Note}>`}
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      verify.run(tokenOf(link));
    }}>
      <${Field} label="The link of the verification email, or its token" value=${link} onInput=${setLink} required />
      <div><button disabled=${verify.busy}>Verify</button></div>
      <${ErrorNote} error=${verify.error} />
    </form>`;
}

export function Recover() {
  useTitle('Reset your password');
  const [email, setEmail] = useState('');
  const recover = useAction(() => request('POST', '/auth/recover', { email }, { anonymous: true }));
  return html`<h1>Reset your password</h1>
    <p>The hub emails a link to its reset page, where you choose a new password.</p>
    <form class="stack" onSubmit=${(e) => {
      e.preventDefault();
      recover.run();
    }}>
      <${Field} label="Email" type="email" value=${email} onInput=${setEmail} autocomplete="email" required />
      <div><button disabled=${recover.busy}>Email me a reset link</button></div>
      <${ErrorNote} error=${recover.error} />
      ${recover.done && html`<${Note} kind="ok">${recover.done.message}</${Note}>`}
    </form>`;
}
