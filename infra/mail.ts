// Outgoing mail through nodemailer: SMTP in production (HUB_MAIL_TRANSPORT=smtp://…), a folder of
// JSON files (the embedded default, which tests read), or the log (recipient and subject only:
// emails carry secret links, which never reach a log line).
import { randomBytes } from 'node:crypto';
import { mkdirSync, renameSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import nodemailer from 'nodemailer';
import type { Logger } from './telemetry.ts';

export interface Mail {
  to: string;
  subject: string;
  text: string;
}

export interface Mailer {
  send(mail: Mail): Promise<void>;
  close(): void;
}

export function createMailer(transport: string, from: string, dir: string, logger: Logger): Mailer {
  if (transport.startsWith('smtp://') || transport.startsWith('smtps://')) {
    const smtp = nodemailer.createTransport(transport);
    return {
      async send(mail) {
        await smtp.sendMail({ from, ...mail });
      },
      close: () => smtp.close(),
    };
  }
  if (transport === 'log') {
    return {
      async send(mail) {
        logger.info({ to: mail.to, subject: mail.subject }, 'mail (log transport: body not shown)');
      },
      close() {},
    };
  }
  // file: one JSON file per message, rendered by nodemailer's JSON transport.
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const json = nodemailer.createTransport({ jsonTransport: true });
  return {
    async send(mail) {
      const info = await json.sendMail({ from, ...mail });
      const name = `${Date.now()}-${randomBytes(4).toString('hex')}`;
      // Written aside, then renamed: whoever reads the folder never meets half a message.
      writeFileSync(join(dir, `${name}.part`), String(info.message), { mode: 0o600 });
      renameSync(join(dir, `${name}.part`), join(dir, `${name}.json`));
    },
    close: () => json.close(),
  };
}
