// Not yet built.
import { html } from './ui.js';
export const Operators = () => html`<h1>Operators</h1><p>Coming soon.</p>`;
