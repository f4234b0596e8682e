// Replays a stream of steps into order-timeout on the SDK's TestHost and prints what it
// emits: the native side of tests/tests/test_hosts_agree.rs, which also runs the input
// through `weir run` with the built component and requires the same records in the same
// order. From the repository root (Node.js >= 20):
//
//   node udfs/js/order-timeout/testhost_driver.js '{"timeout": "1s"}' < steps
//
// The argument is the `[udf.config]` table as a JSON object. Each line of stdin is a step,
// as the engine would take it:
//
//   {"process": [key, value, timestamp]}   an element of input `main` (value: JSON text)
//   {"watermark": ms}                      the watermark advances (due timers fire)
//   {"finish": true}                       the end of input
//
// Each record emitted to `main` is a line on stdout, in order:
// `{"step": n, "from": "element" | "timer", "key": ..., "timestamp": ..., "value": ...}`,
// `step` counting the lines of stdin from 0, `value` the record's JSON text as emitted.

import { readFileSync } from "node:fs";

import { TestHost } from "../../../guest-sdk/js/sdk/testing.js";
import { processFunction } from "./app.js";

const host = new TestHost(processFunction, { config: JSON.parse(process.argv[2]) });
const lines = readFileSync(0, "utf8").split("\n").filter((line) => line.trim() !== "");
const out = [];
lines.forEach((line, step) => {
  const command = JSON.parse(line);
  let origin = "timer";
  if (command.process !== undefined) {
    const [key, value, timestamp] = command.process;
    host.process("main", key, value, timestamp);
    origin = "element";
  } else if (command.watermark !== undefined) {
    host.advanceWatermark(command.watermark);
  } else if (command.finish === true) {
    host.finish();
  } else {
    throw new Error(`step ${step}: unknown command ${line}`);
  }
  for (const record of host.takeOutputs("main")) {
    const key = typeof record.key === "string" || record.key === null ? record.key : Array.from(record.key);
    const head = JSON.stringify({ step, from: origin, key, timestamp: record.timestamp });
    out.push(`${head.slice(0, -1)},"value":${record.text}}\n`);
  }
});
process.stdout.write(out.join(""));
