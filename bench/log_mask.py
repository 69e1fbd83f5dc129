"""The log mask's time on long texts without `@` (a malformed request's line, an over-long link):
each figure the time to mask one text, which must grow linearly with its length. The formatter
masks at most 16 KB of one message (pressroom.logs._MASKED_AT_MOST); a text of 1,000,000 characters is
there to show the growth.

Measured at load 31-33 on the shared 2-core machine, the mask before the fix (letters):
2,000: 0.804 s, 4,000: 3.832 s, 8,000: 17.434 s (quadratic; 64,000 would take about 18 minutes);
after: 2,000: 0.001 s, 8,000: 0.002 s, 64,000: 0.039 s, 1,000,000: 3.4 s (URL-like text, whose
words are each tried as base64: 8,000: 0.14 s, 64,000: 0.87 s, 1,000,000: 22 s, linear).

    .venv/bin/python bench/log_mask.py [--before path/to/old/logs.py] [--limit-seconds 60] [--lengths 2000,8000]

`--before` times another version of pressroom/logs.py (the one before the fix, to compare); a shape
whose time passes `--limit-seconds` is not timed at larger lengths.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import time

from pressroom import logs

LENGTHS = (2_000, 8_000, 64_000, 1_000_000)
SHAPES = {
    "letters": lambda n: "a" * n,
    "url-ish": lambda n: ("/unsubscribe/x-y.z_" * (n // 19 + 1))[:n],
    "percent": lambda n: ("%41" * (n // 3 + 1))[:n],
    "query": lambda n: ("&k=v" * (n // 4 + 1))[:n],
}


def load(path: str | None):
    if path is None:
        return logs
    spec = importlib.util.spec_from_file_location("logs_under_test", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", help="another pressroom/logs.py to time")
    parser.add_argument("--limit-seconds", type=float, default=60.0)
    parser.add_argument("--lengths", default=",".join(map(str, LENGTHS)), help="comma-separated lengths")
    args = parser.parse_args()
    lengths = [int(n) for n in args.lengths.split(",")]
    logs = load(args.before)
    mask = logs.Mask(["a-configured-secret-0123456789"])
    print(f"{args.before or 'pressroom/logs.py'}   load {os.getloadavg()[0]:.1f}", flush=True)
    for shape, make in SHAPES.items():
        print(f"  {shape:<8}", end="", flush=True)
        for length in lengths:
            text = f"GET /{make(length)} HTTP/1.1"
            started = time.perf_counter()
            mask(text)
            took = time.perf_counter() - started
            print(f"  {length:>9,}: {took:8.3f} s", end="", flush=True)
            if took > args.limit_seconds:
                print("  (larger not timed)", end="")
                break
        print(flush=True)

if __name__ == "__main__":
    main()
