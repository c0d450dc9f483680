// Not yet built.
import { html } from './ui.js';
export const Events = () => html`<h1>Events</h1><p>Coming soon.</p>`;
export const Event = () => html`<h1>Event</h1><p>Coming soon.</p>`;
