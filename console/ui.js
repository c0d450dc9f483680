// What the console's pages share: htm bound to Preact, loading a resource, the error note, the
// pager, labelled fields, a key/value editor, a secret shown once with its copy button, times.
import htm from 'htm';
import { h } from 'preact';
import { useCallback, useEffect, useId, useRef, useState } from 'preact/hooks';

export const html = htm.bind(h);

/** Loads `load()` again whenever `deps` change (and on `reload()`); `every` ms: polls while shown. */
export function useResource(load, deps, every = 0) {
  const [state, setState] = useState({ data: undefined, error: null, loading: true });
  const [tick, setTick] = useState(0);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  useEffect(() => {
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    load().then(
      (data) => live && setState({ data, error: null, loading: false }),
      (error) => live && setState((s) => ({ data: s.data, error, loading: false })),
    );
    return () => {
      live = false;
    };
  }, [...deps, tick]);
  useEffect(() => {
    if (!every) return;
    const timer = setInterval(() => document.visibilityState === 'visible' && reload(), every);
    return () => clearInterval(timer);
  }, [every, reload]);
  return { ...state, reload };
}

/** Runs an action of a form or button: `busy` meanwhile, `error` when it fails, `done` its result. */
export function useAction(act) {
  const [state, setState] = useState({ busy: false, error: null, done: undefined });
  const run = async (...args) => {
    setState({ busy: true, error: null, done: undefined });
    try {
      const done = await act(...args);
      setState({ busy: false, error: null, done });
      return done;
    } catch (error) {
      setState({ busy: false, error, done: undefined });
    }
  };
  return { ...state, run };
}

/** What went wrong, in words: the API's message and the fields it names. */
export function ErrorNote({ error }) {
  if (!error) return null;
  const details = error.body?.details ?? [];
  return html`<div class="note error" role="alert">
    <p>${error.message}</p>
    ${details.length > 0 && html`<ul>${details.map((d) => html`<li><code>${d.field || '(body)'}</code> ${d.problem}</li>`)}</ul>`}
  </div>`;
}

export function Note({ kind = '', children }) {
  return html`<div class=${`note ${kind}`} role="status">${children}</div>`;
}

/** A labelled input; the other props go to the input. */
export function Field({ label, hint, value, onInput, type = 'text', ...props }) {
  const id = useId();
  return html`<div class="field">
    <label for=${id}>${label}</label>
    <input id=${id} type=${type} value=${value} onInput=${(e) => onInput(e.currentTarget.value)} aria-describedby=${hint ? `${id}-hint` : undefined} ...${props} />
    ${hint && html`<span class="hint" id=${`${id}-hint`}>${hint}</span>`}
  </div>`;
}

export function SelectField({ label, value, onInput, options }) {
  const id = useId();
  return html`<div class="field">
    <label for=${id}>${label}</label>
    <select id=${id} value=${value} onChange=${(e) => onInput(e.currentTarget.value)}>
      ${options.map(([v, text]) => html`<option value=${v}>${text}</option>`)}
    </select>
  </div>`;
}

/** Previous / next over a list envelope (`total`, `limit`, `skip`). */
/** Items a list page asks for: one size for every list, so their pagers read alike. */
export const PAGE = 20;

export function Pager({ page, onSkip, label }) {
  if (!page || page.total <= page.limit) return page ? html`<p class="hint">${page.total} in all.</p>` : null;
  const last = Math.min(page.skip + page.items.length, page.total);
  return html`<nav class="pager" aria-label=${`${label} pages`}>
    <button class="secondary" disabled=${page.skip === 0} onClick=${() => onSkip(Math.max(0, page.skip - page.limit))}>Previous</button>
    <span>${page.total === 0 ? 0 : page.skip + 1}–${last} of ${page.total}</span>
    <button class="secondary" disabled=${last >= page.total} onClick=${() => onSkip(page.skip + page.limit)}>Next</button>
  </nav>`;
}

/** A secret the hub shows once: the value, a copy button, and a word that it will not be shown again. */
export function SecretOnce({ label, value }) {
  const [copied, setCopied] = useState(false);
  const copy = async () => {
    try {
      await navigator.clipboard.writeText(value);
      setCopied(true);
    } catch {
      setCopied(false);
    }
  };
  return html`<div class="note ok" role="status">
    <p><strong>${label}</strong>: shown this once; copy it now.</p>
    <div class="secret"><code data-secret>${value}</code>
      <button type="button" class="secondary" onClick=${copy}>Copy ${label.toLowerCase()}</button>
      <span aria-live="polite">${copied ? 'Copied.' : ''}</span></div>
  </div>`;
}

/** Edits a map of string to string as rows of key and value; `onChange(map)` on every edit. */
export function MapEditor({ legend, rows, setRows, keyLabel = 'Key', valueLabel = 'Value' }) {
  const set = (i, field, v) => setRows(rows.map((r, j) => (j === i ? { ...r, [field]: v } : r)));
  return html`<fieldset>
    <legend>${legend}</legend>
    ${rows.length === 0 && html`<p class="hint">None.</p>`}
    ${rows.map(
      (r, i) => html`<div class="row">
        <${Field} label=${`${keyLabel} ${i + 1}`} value=${r.key} onInput=${(v) => set(i, 'key', v)} />
        <${Field} label=${`${valueLabel} ${i + 1}`} value=${r.value} onInput=${(v) => set(i, 'value', v)} />
        <button type="button" class="secondary" onClick=${() => setRows(rows.filter((_, j) => j !== i))}>Remove ${keyLabel.toLowerCase()} ${i + 1}</button>
      </div>`,
    )}
    <div class="actions"><button type="button" class="secondary" onClick=${() => setRows([...rows, { key: '', value: '' }])}>Add ${keyLabel.toLowerCase()}</button></div>
  </fieldset>`;
}

export const toRows = (map) => Object.entries(map ?? {}).map(([key, value]) => ({ key, value }));
export const fromRows = (rows) =>
  Object.fromEntries(rows.filter((r) => r.key.trim()).map((r) => [r.key.trim(), r.value]));

/** A time of the API (RFC 3339, or Unix seconds) in the reader's zone, with the exact value in `datetime`. */
export function Time({ value }) {
  if (value === undefined || value === null || value === '') return html`<span class="hint">–</span>`;
  const date = typeof value === 'number' ? new Date(value * 1000) : new Date(value);
  if (Number.isNaN(date.getTime())) return html`<span>${String(value)}</span>`;
  return html`<time datetime=${date.toISOString()}>${date.toLocaleString()}</time>`;
}

/** A key/value table of a map (device-meta, headers). */
export function MapTable({ map, caption, empty = 'None.' }) {
  const entries = Object.entries(map ?? {});
  if (entries.length === 0) return html`<p class="hint">${empty}</p>`;
  return html`<div class="scroll"><table>
    <caption class="visually-hidden">${caption}</caption>
    <thead><tr><th scope="col">Key</th><th scope="col">Value</th></tr></thead>
    <tbody>${entries.map(([k, v]) => html`<tr><td><code>${k}</code></td><td><code>${v}</code></td></tr>`)}</tbody>
  </table></div>`;
}

/** Pretty JSON (or the text as it is, when it is not JSON). */
export function Json({ value, label }) {
  let text = value;
  if (typeof value === 'string') {
    try {
      text = JSON.stringify(JSON.parse(value), null, 2);
    } catch {}
  } else text = JSON.stringify(value, null, 2);
  return html`<pre tabindex="0" aria-label=${label}>${text}</pre>`;
}

/** Asks again before a destructive action: the first press arms it, the second does it. */
export function ConfirmButton({ label, confirm, onConfirm, busy }) {
  const [armed, setArmed] = useState(false);
  const ref = useRef();
  useEffect(() => {
    if (armed) ref.current?.focus();
  }, [armed]);
  if (!armed)
    return html`<button type="button" class="danger" onClick=${() => setArmed(true)}>${label}</button>`;
  return html`<span class="row" role="group" aria-label=${label}>
    <button type="button" class="danger" ref=${ref} disabled=${busy} onClick=${onConfirm}>${confirm}</button>
    <button type="button" class="secondary" onClick=${() => setArmed(false)}>Cancel</button>
  </span>`;
}

/** Sets the document's title for the page shown. */
export function useTitle(title) {
  useEffect(() => {
    document.title = `${title} · Device Hub console`;
  }, [title]);
}

export const go = (hash) => {
  location.hash = hash;
};
