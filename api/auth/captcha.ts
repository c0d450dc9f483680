// The registration challenge's captcha, pluggable: off by default; with HUB_CAPTCHA_VERIFY_URL
// set, the answer is checked by POSTing `secret` and `response` to that URL and reading
// `{"success": true}`: the protocol hCaptcha, reCAPTCHA and Turnstile share.
import { request } from 'undici';

export type CaptchaCheck = (response: string, remoteIp: string) => Promise<boolean>;

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
    });
    if (res.statusCode !== 200) {
      await res.body.dump();
      return false;
    }
    const body = (await res.body.json()) as { success?: unknown };
    return body.success === true;
  };
}
