// The registration challenge's captcha, pluggable: off by default; with HUB_CAPTCHA_VERIFY_URL
// set, the answer is checked by POSTing `secret` and `response` to that URL and reading
// `{"success": true}`: the protocol hCaptcha, reCAPTCHA and Turnstile share. A verifier that gives
// no verdict makes the challenge 503, not a refusal of the user's answer.
import { request } from 'undici';
import { HttpError } from '../errors.ts';

export type CaptchaCheck = (response: string, remoteIp: string) => Promise<boolean>;

/** The verifier did not give a verdict (down, or an answer that is not one): not the user's fault. */
const noVerdict = (why: string) =>
  new HttpError(503, 'unavailable', `The captcha could not be checked now (${why}); try again shortly.`, {
    headers: { 'Retry-After': '5' },
  });

export function captchaCheck(verifyUrl: string, secret: string): CaptchaCheck {
  if (!verifyUrl) return async () => true;
  return async (response, remoteIp) => {
    if (!response) return false;
    const res = await request(verifyUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
      body: new URLSearchParams({ secret, response, remoteip: remoteIp }).toString(),
      headersTimeout: 5000,
      bodyTimeout: 5000,
    }).catch(() => {
      throw noVerdict('the verifier does not answer');
    });
    if (res.statusCode !== 200) {
      await res.body.dump();
      throw noVerdict(`the verifier answered ${res.statusCode}`);
    }
    const body = (await res.body.json().catch(() => undefined)) as { success?: unknown } | undefined;
    if (typeof body?.success !== 'boolean') throw noVerdict('the verifier gave no verdict');
    return body.success;
  };
}
