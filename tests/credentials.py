"""The secrets the tests configure, each at least SECRET_MIN_CHARS (32) characters: a
shorter cron secret, metrics token, cursor or webhook secret is refused at start."""

CRON_SECRET = "test-cron-secret-0123456789abcdefgh"
METRICS_TOKEN = "metrics-token-for-tests-0123456789ab"
WEBHOOK_SECRET = "webhook-secret-for-tests-0123456789ab"
# two deployments' cursor keys: a cursor signed with one is foreign to the other
CURSOR_SECRET = "cursor-secret-for-tests-0123456789abc"
OTHER_CURSOR_SECRET = "another-deployment-cursor-secret-0123"
