"""device_hub_webhooks against the shared vectors: one test per case, named after it.

Run from this folder: ``python3 -m unittest -v``. The vectors are test/fixtures/webhook-vectors.json,
or the file HUB_WEBHOOK_VECTORS names (npm test runs an altered copy too, which must fail).
"""

import json
import os
import re
import unittest

from device_hub_webhooks import REFUSALS, WebhookVerificationError, verify

VECTORS_FILE = os.environ.get('HUB_WEBHOOK_VECTORS') or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), '..', '..', 'test', 'fixtures', 'webhook-vectors.json'
)

with open(VECTORS_FILE, encoding='utf-8') as f:
    VECTORS = json.load(f)


class Vectors(unittest.TestCase):
    def test_reasons_are_the_files(self):
        self.assertEqual(list(VECTORS['reasons']), list(REFUSALS))


def _case_test(case):
    def test(self):
        try:
            payload = verify(
                body=case['body'].encode('utf-8'),
                headers=case['headers'],
                secrets=case['secrets'],
                tolerance_s=case.get('tolerance_s', VECTORS['tolerance_s']),
                now=case['now'],
            )
        except WebhookVerificationError as e:
            self.assertEqual((case['expect'], case['reason']), ('refused', e.reason), case['description'])
        else:
            self.assertEqual((case['expect'], case['reason']), ('accepted', None), case['description'])
            self.assertEqual(payload, json.loads(case['body']))

    return test


for number, case in enumerate(VECTORS['cases']):
    name = f"test_{number:02d}_{re.sub(r'[^0-9a-zA-Z_]', '_', case['name'])}"
    setattr(Vectors, name, _case_test(case))


if __name__ == '__main__':
    unittest.main()
