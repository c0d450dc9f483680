// Not yet built.
import { html } from './ui.js';
export const Webhooks = () => html`<h1>Webhooks</h1><p>Coming soon.</p>`;
export const WebhookForm = () => html`<h1>WebhookForm</h1><p>Coming soon.</p>`;
export const Webhook = () => html`<h1>Webhook</h1><p>Coming soon.</p>`;
export const Attempt = () => html`<h1>Attempt</h1><p>Coming soon.</p>`;
