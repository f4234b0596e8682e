"""A Python UDF for the end-to-end tests of the batch path (tests/tests/other_languages.rs):
it counts the records of each key and emits `{"key": K, "n": N, "record": R}` per record,
unless the record asks it to misbehave with `"fail"`:

- `"error"`: emits and counts, then raises (the call fails: the host takes both back);
- `"trap"`: emits and counts, then misuses the contract (a list call on a value state),
  which the host traps on;
- `"poison"`: stores bytes that are not JSON as the key's count, and emits
  `{"key": K, "poisoned": true}`: every later record of the key fails to decode its state
  (a state-decode error, which the host sends to the dead letters) until
- `"reset"`: clears the key's count without reading it, and emits `{"key": K, "reset": true}`.

Each record it counts that has `"timer": true` registers an event-time timer 1 ms after it
(the timer then falls due in the batch that registered it, which ends the batch there);
a timer emits
`{"key": K, "timer": T, "n": N}` with the count then (decoding the state: a poisoned key's
timer fails too).
"""

import weir
from weir import _bindings


class Misbehaving(weir.ProcessFunction):
    def init(self, ctx):
        self.count = ctx.value_state("n")
        self.raw = ctx.value_state("n", weir.RAW)  # the same state, as bytes
        self.out = ctx.main_output()

    def process_element(self, ctx, element):
        record = element.json()
        key = ctx.current_key_str()
        fail = record.get("fail")
        if fail == "poison":
            self.raw.set(b"\xff not JSON")
            self.out.emit({"key": key, "poisoned": True}, key=key)
            return
        if fail == "reset":
            self.count.clear()
            self.out.emit({"key": key, "reset": True}, key=key)
            return
        n = self.count.get(0) + 1
        self.count.set(n)
        if record.get("timer"):
            ctx.register_event_timer(element.timestamp() + 1)
        self.out.emit({"key": key, "n": n, "record": record}, key=key)
        if fail == "error":
            raise ValueError(f"asked to fail on {record}")
        if fail == "trap":
            _bindings.state.list_get(self.count._id)  # a value state: the host traps

    def on_timer(self, ctx, timer):
        key = ctx.current_key_str()
        self.out.emit({"key": key, "timer": timer.timestamp(), "n": self.count.get(0)}, key=key)


ProcessFunction = weir.export(Misbehaving)
