"""What the Lambda runtime hands a handler, the part the handler reads: its name and the
time the invocation has left."""

from __future__ import annotations

import time
import uuid


class LambdaContext:
    function_name = "skiplock-dev-pipeline"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:eu-west-1:123456789012:function:skiplock-dev-pipeline"

    def __init__(self, remaining_seconds: float = 300.0) -> None:
        self.aws_request_id = str(uuid.uuid4())
        self._deadline = time.monotonic() + remaining_seconds

    def get_remaining_time_in_millis(self) -> int:
        return int(max(0.0, self._deadline - time.monotonic()) * 1000)
