"""One variant's process: set up from the environment, warm up, then time runs on request.

Started by `bench.harness.Worker` as `python -m bench.worker SPEC`. Commands arrive as JSON
lines on stdin; replies leave as JSON lines on a private copy of stdout (the real stdout is
pointed at stderr, so that nothing a library prints can corrupt the protocol).
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any


def peak_rss_mb(pid: int | str = "self") -> float:
    """The peak resident set size of a process (Linux: VmHWM), in MB; 0 where unknown."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def main() -> int:
    reply_to = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)

    def reply(**payload: Any) -> None:
        reply_to.write(json.dumps(payload) + "\n")

    variant: Any = None
    try:
        spec = json.loads(sys.argv[1])
        import django

        django.setup()
        from django.utils.module_loading import import_string

        variant = import_string(spec["factory"].replace(":", "."))(spec["options"])
        for _ in range(int(spec["warmup"])):
            variant.run()
        info = variant.check()
        reply(ready=True, info=info)
        for line in sys.stdin:
            command = json.loads(line)
            if command["cmd"] == "stop":
                break
            if command["cmd"] == "run":
                gc.collect()
                times = []
                for _ in range(int(command["n"])):
                    started = time.perf_counter()
                    variant.run()
                    times.append(time.perf_counter() - started)
                reply(times=times)
            elif command["cmd"] == "rss":
                reply(peak_rss_mb=peak_rss_mb())
            elif command["cmd"] == "call":
                reply(result=getattr(variant, command["method"])(**command.get("kwargs", {})))
            else:
                reply(error=f"unknown command {command['cmd']!r}")
    except BaseException:
        reply(error=traceback.format_exc())
        return 1
    finally:
        if variant is not None:
            variant.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
