// The pluggable parts of registration against real servers on loopback: a captcha verifier
// speaking the siteverify protocol, and an SMTP server receiving the verification email.
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { simpleParser } from 'mailparser';
import { SMTPServer } from 'smtp-server';
import { request } from '../harness.ts';
import { startHub, type TestHub } from '../hub.ts';

describe('registration with captcha and SMTP (e2e)', function () {
  this.timeout(60_000);
  let hub: TestHub;
  const inbox: { to: string; subject: string; text: string }[] = [];
  const checks: URLSearchParams[] = [];
  let smtp: SMTPServer;
  let verifier: ReturnType<typeof createServer>;

  before(async () => {
    verifier = createServer((req, res) => {
      let body = '';
      req.on('data', (c) => {
        body += c;
      });
      req.on('end', () => {
        const form = new URLSearchParams(body);
        checks.push(form);
        // Two answers that are no verdict: an error page, and a 200 that is not JSON.
        if (form.get('response') === 'verifier down') return res.writeHead(502).end('Bad Gateway');
        if (form.get('response') === 'verifier garbled') return res.end('<html>maintenance</html>');
        res.setHeader('content-type', 'application/json');
        res.end(
          JSON.stringify({
            success: form.get('secret') === 'site-secret' && form.get('response') === 'I am human',
          }),
        );
      });
    }).listen(0, '127.0.0.1');
    await once(verifier, 'listening');
    smtp = new SMTPServer({
      authOptional: true,
      disabledCommands: ['STARTTLS'],
      onData(stream, _session, done) {
        simpleParser(stream).then(
          (mail) => {
            inbox.push({
              to: (mail.to as { text: string }).text,
              subject: mail.subject ?? '',
              text: mail.text ?? '',
            });
            done();
          },
          (err) => done(err),
        );
      },
    });
    smtp.listen(0, '127.0.0.1');
    await once(smtp.server, 'listening');
    hub = await startHub({
      HUB_CAPTCHA_VERIFY_URL: `http://127.0.0.1:${(verifier.address() as AddressInfo).port}/siteverify`,
      HUB_CAPTCHA_SECRET: 'site-secret',
      HUB_MAIL_TRANSPORT: `smtp://127.0.0.1:${(smtp.server.address() as AddressInfo).port}`,
      HUB_MAIL_FROM: 'Hub <hub@example.com>',
    });
  });
  after(async () => {
    await hub.stop();
    smtp.close();
    verifier.close();
  });

  it('refuses a wrong captcha answer (422, nothing sent), accepts the right one and mails the link over SMTP', async () => {
    const r = await hub.call('POST', '/auth/accounts', {
      body: { email: 'dora@example.com', nick: 'dora', password: 'explorer-pw' },
    });
    const challenge = new URL(r.body['redirect-uri']).pathname;
    const page = await request(`${hub.url}${challenge}`);
    assert.match(page.body, /Captcha answer/);
    const wrong = await hub.call('POST', challenge, { body: { captcha: 'I am a bot' } });
    assert.equal(wrong.status, 422);
    assert.equal(wrong.body.details[0].field, 'captcha');
    assert.equal((await hub.call('POST', challenge, { body: {} })).status, 422);
    // A verifier that gives no verdict is not the user's fault: 503, try again; nothing sent.
    for (const captcha of ['verifier down', 'verifier garbled']) {
      const r = await hub.call('POST', challenge, { body: { captcha } });
      assert.equal(r.status, 503, captcha);
      assert.equal(r.body.error, 'unavailable');
      assert.equal(r.headers.get('retry-after'), '5');
    }
    const right = await hub.call('POST', challenge, { body: { captcha: 'I am human' } });
    assert.equal(right.status, 202);
    assert.equal(checks.at(-1)?.get('secret'), 'site-secret');
    const deadline = Date.now() + 10_000;
    while (inbox.length === 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 50));
    assert.equal(inbox.length, 1, 'exactly one email: the refused attempts sent none');
    assert.equal(inbox[0]!.to, 'dora@example.com');
    assert.match(inbox[0]!.subject, /Verify/);
    const link = /(http\S+\/auth\/verify\?token=\S+)/.exec(inbox[0]!.text)![1]!;
    assert.equal((await request(link)).status, 200);
    assert.equal(
      (await hub.call('POST', '/auth/login', { body: { username: 'dora', password: 'explorer-pw' } })).status,
      200,
    );
  });
});
