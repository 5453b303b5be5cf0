"""Redis databases the tests own, each suite its own number: emptied before use."""

from __future__ import annotations

import redis


def flush_redis(*urls: str) -> None:
    """Empty the Redis database of each URL."""
    for url in urls:
        client = redis.Redis.from_url(url)
        try:
            client.flushdb()
        finally:
            client.close()
