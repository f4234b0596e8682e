"""Replays a stream of steps into the counter on `weir.testing.TestHost` and prints what it
emits: the native side of tests/tests/test_hosts_agree.rs, which also runs the input
through `weir run` with the built component and requires the same records in the same
order. From the repository root:

    PYTHONPATH=guest-sdk/python:udfs/python/change-only-counter \\
        python3 udfs/python/change-only-counter/testhost_driver.py '{"window": "5m"}' < steps

The argument is the `[udf.config]` table as a JSON object. Each line of stdin is a step,
as the engine would take it:

    {"process": [key, value, timestamp]}   an element of input `main` (value: JSON text)
    {"watermark": ms}                      the watermark advances (due timers fire)
    {"finish": true}                       the end of input

Each record emitted to `main` is a line on stdout, in order:
`{"step": n, "from": "element" | "timer", "key": ..., "timestamp": ..., "value": ...}`,
`step` counting the lines of stdin from 0.
"""

import json
import sys

from weir.testing import TestHost

from app import ChangeOnlyCounter


def main():
    host = TestHost(ChangeOnlyCounter, config=json.loads(sys.argv[1]))
    out = sys.stdout
    for step, line in enumerate(sys.stdin):
        command = json.loads(line)
        if "process" in command:
            key, value, timestamp = command["process"]
            host.process("main", key, value, timestamp)
            origin = "element"
        elif "watermark" in command:
            host.advance_watermark(command["watermark"])
            origin = "timer"
        elif command.get("finish"):
            host.finish()
            origin = "timer"
        else:
            raise ValueError(f"step {step}: unknown command {line!r}")
        for record in host.take_outputs("main"):
            fields = {
                "step": step,
                "from": origin,
                "key": None if record.key is None else record.key.decode(),
                "timestamp": record.timestamp,
                "value": record.value,
            }
            out.write(json.dumps(fields, ensure_ascii=False, separators=(",", ":")) + "\n")
    out.flush()


if __name__ == "__main__":
    main()
