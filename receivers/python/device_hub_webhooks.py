"""Verifies Device Hub webhook deliveries. Python 3.8 or later, standard library only: copy this file.

A delivery is signed as the hub's ``processors/delivery/signing.ts`` signs it:
``Webhook-Signature`` holds ``v1,<hex>`` entries separated by whitespace (two during a secret
rotation), each the hex HMAC-SHA256 of ``{Webhook-Id}.{Webhook-Timestamp}.{raw body}`` keyed with
the UTF-8 bytes of a subscription's secret (``whsec_`` included). The checks, their order and the
refusal reasons are the same as the TypeScript and Go receivers', and tested against the same
vectors (``test/fixtures/webhook-vectors.json``)::

    from device_hub_webhooks import verify, WebhookVerificationError

    try:
        event = verify(body=raw_bytes, headers=request_headers, secrets=[secret])
    except WebhookVerificationError as e:
        ...  # answer 400; e.reason is one of REFUSALS
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import time
from typing import Any, Iterable, Mapping, Union

__all__ = ['REFUSALS', 'DEFAULT_TOLERANCE_S', 'WebhookVerificationError', 'verify']

#: Seconds a delivery's timestamp may be from the receiver's clock, either way.
DEFAULT_TOLERANCE_S = 300

#: Why a delivery is refused, by name, in the order the checks run: the first that fails names it.
REFUSALS = {
    'no_secret': 'no secret to verify with, or an empty one (a blank setting would let anyone sign)',
    'missing_header': 'Webhook-Id, Webhook-Timestamp or Webhook-Signature is absent or empty',
    'malformed_timestamp': 'Webhook-Timestamp is not 1 to 12 ASCII digits (Unix seconds)',
    'timestamp_too_old': 'Webhook-Timestamp is more than the tolerance before now: a replay, or a clock far off',
    'timestamp_too_new': 'Webhook-Timestamp is more than the tolerance after now: a clock far off',
    'malformed_signature': 'Webhook-Signature has no entry of the shape v1,<64 lower-case hex digits>',
    'no_matching_signature': 'no v1 entry is the signature of this id, timestamp and body with any of the secrets',
}

# ASCII only: Python's \d also matches other scripts' digits, and $ a final newline.
_TIMESTAMP = re.compile(r'[0-9]{1,12}')
_ENTRY = re.compile(r'v1,([0-9a-f]{64})')


class WebhookVerificationError(Exception):
    """A delivery refused; ``reason`` is a key of REFUSALS."""

    def __init__(self, reason: str) -> None:
        super().__init__(f'{reason}: {REFUSALS[reason]}')
        self.reason = reason


def _header(headers: Any, name: str) -> str | None:
    """The first value of a header named in any case, from a dict, or anything with ``items()``
    (http.server's, Flask's, Django's request headers)."""
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def verify(
    body: Union[bytes, str],
    headers: Mapping[str, str],
    secrets: Union[str, Iterable[str]],
    tolerance_s: int = DEFAULT_TOLERANCE_S,
    now: int | None = None,
) -> Any:
    """Verifies a delivery and returns its parsed JSON payload.

    ``body`` is the raw body as received (bytes; a str is taken as its UTF-8 bytes), never JSON
    parsed and serialised again. ``secrets`` are the secrets the receiver accepts: during a rotation
    the new and the old one. ``now`` is the receiver's clock in Unix seconds (default: the time).
    Raises WebhookVerificationError with the reason of the first check that fails.
    """
    secrets = [secrets] if isinstance(secrets, str) else list(secrets)
    if not secrets or any(not isinstance(s, str) or s == '' for s in secrets):
        raise WebhookVerificationError('no_secret')
    webhook_id = _header(headers, 'webhook-id')
    timestamp = _header(headers, 'webhook-timestamp')
    signatures = _header(headers, 'webhook-signature')
    if not webhook_id or not timestamp or not signatures:
        raise WebhookVerificationError('missing_header')
    if not _TIMESTAMP.fullmatch(timestamp):
        raise WebhookVerificationError('malformed_timestamp')
    sent = int(timestamp)
    now = int(time.time()) if now is None else now
    if now - sent > tolerance_s:
        raise WebhookVerificationError('timestamp_too_old')
    if sent - now > tolerance_s:
        raise WebhookVerificationError('timestamp_too_new')
    given = [m.group(1) for m in map(_ENTRY.fullmatch, signatures.split()) if m]
    if not given:
        raise WebhookVerificationError('malformed_signature')
    raw = body.encode('utf-8') if isinstance(body, str) else bytes(body)
    # The signed text holds the timestamp as a number (as the hub formats it), not the header's text.
    signed = f'{webhook_id}.{sent}.'.encode('utf-8') + raw
    for secret in secrets:
        expected = hmac.new(secret.encode('utf-8'), signed, hashlib.sha256).hexdigest()
        if any(hmac.compare_digest(g, expected) for g in given):
            return json.loads(raw)
    raise WebhookVerificationError('no_matching_signature')
