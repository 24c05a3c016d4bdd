"""The per-topic failure of topic administration, apart from `kernel.topics` so that
the seams in `kernel.node` can name it without importing the code behind them."""

from __future__ import annotations

from oncelog.protocol.messages import ErrorCode


class TopicRequestError(Exception):
    """A per-topic failure answered with a Kafka error code and message."""

    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
