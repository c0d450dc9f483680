// Not yet built.
import { html } from './ui.js';
export const Account = () => html`<h1>Account</h1><p>Coming soon.</p>`;
