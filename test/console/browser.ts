// A real browser for the console's tests: Debian's Chromium (installed by infra/local.sh and
// .ci/run), driven by playwright-core (no browser download), with a fresh profile each launch; and
// the accessibility check of a page by axe-core, injected into it.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { type Browser, type BrowserContext, chromium, type Page } from 'playwright-core';

export const CHROMIUM = '/usr/bin/chromium';

export interface TestBrowser {
  browser: Browser;
  /** A new context (its own storage) and page, at `width` × `height`. */
  page(o?: { width?: number; height?: number }): Promise<{ context: BrowserContext; page: Page }>;
  close(): Promise<void>;
}

export async function launchBrowser(): Promise<TestBrowser> {
  // Playwright gives each launch a new, empty --user-data-dir of its own (and removes it on close).
  const browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: [
      '--headless',
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
    ],
  });
  return {
    browser,
    async page(o = {}) {
      const context = await browser.newContext({
        viewport: { width: o.width ?? 1280, height: o.height ?? 900 },
        permissions: ['clipboard-read', 'clipboard-write'],
      });
      const page = await context.newPage();
      // A script the CSP refused, or an uncaught error, fails the test that meets it.
      page.on('pageerror', (err) => errors.push(`${page.url()}: ${err.message}`));
      page.on('console', (m) => {
        if (m.type() === 'error' && /Content.Security.Policy|Refused/i.test(m.text()))
          errors.push(`${page.url()}: ${m.text()}`);
      });
      return { context, page };
    },
    async close() {
      await browser.close();
    },
  };
}

/** Errors the pages met (uncaught, or a CSP refusal): a test asserts there are none. */
export const errors: string[] = [];

const AXE = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

/**
 * axe-core's WCAG 2.x A/AA rules on the page as it is: no serious or critical violation. axe is
 * added through the DevTools protocol (page.evaluate), which the page's CSP does not govern.
 */
export async function assertAccessible(page: Page, name: string): Promise<number> {
  await page.evaluate(AXE);
  const result = (await page.evaluate(
    "axe.run(document, { runOnly: { type: 'tag', values: ['wcag2a', 'wcag2aa', 'wcag21a', 'wcag21aa'] } })",
  )) as {
    passes: unknown[];
    violations: { id: string; impact: string; help: string; nodes: { target: string[] }[] }[];
  };
  assert.ok(result.passes.length > 0, `${name}: axe checked nothing`);
  const grave = result.violations.filter((v) => v.impact === 'serious' || v.impact === 'critical');
  assert.deepEqual(
    grave.map(
      (v) => `${v.id} (${v.impact}): ${v.help} at ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`,
    ),
    [],
    `${name}: accessibility violations`,
  );
  return result.passes.length;
}

/** Signs in through the form. */
export async function signIn(page: Page, url: string, nick: string, password: string): Promise<void> {
  await page.goto(`${url}/console/#/signin`);
  await page.getByLabel('Nick or email').fill(nick);
  await page.getByLabel('Password').fill(password);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Devices', level: 1 }).waitFor();
}
