"""One SDK operation per element, chosen by config `op`: what each costs inside the
component, measured by scripts/python-op-costs.sh as a run's time over that of `op=noop`.
Not a UDF anyone deploys; its outputs are not records of interest.

The operations are those the change-only counter (udfs/python/change-only-counter) does
per click, on values of the same shape.
"""

import marshal
from dataclasses import dataclass, field

import weir
from weir import _bindings

#: The counter's state as its JSON codec writes it, with three clicks held.
STATE_JSON = b'{"times":[1700000000000,1700000000010,1700000000020],"emitted":3}'
STATE_MARSHAL = marshal.dumps(([1700000000000, 1700000000010, 1700000000020], 3))
FIELDS = ("times", "emitted")
TIMES = [1700000000000, 1700000000010, 1700000000020]
#: How often the loop operations run per element (their cost is per iteration).
LOOP = 10


@dataclass
class Clicks:
    times: list = field(default_factory=list)
    emitted: int = 0


def _two(a, b):
    return a


class OpCosts(weir.ProcessFunction):
    def init(self, ctx):
        op = ctx.config_str("op", "noop")
        self.run = getattr(self, "op_" + op.replace("-", "_"), None)
        if self.run is None:
            ops = sorted(n[3:].replace("_", "-") for n in dir(self) if n.startswith("op_"))
            raise weir.Error(f"config `op`: no operation {op!r}; one of {', '.join(ops)}")
        self.state = ctx.value_state("clicks", weir.JsonCodec(Clicks))
        self.raw = ctx.value_state("raw", weir.RAW)
        self.codec = weir.JsonCodec(Clicks)
        self.out = ctx.main_output()

    def process_element(self, ctx, element):
        self.run(ctx, element)

    def op_noop(self, ctx, element):
        pass

    def op_call_x10(self, ctx, element):
        for _ in range(LOOP):
            _two(1, 2)

    def op_import_x10(self, ctx, element):
        value_set, state_id = _bindings.state.value_set, self.raw._id
        for _ in range(LOOP):
            value_set(state_id, STATE_JSON)

    def op_raw_set(self, ctx, element):
        self.raw.set(STATE_JSON)

    def op_raw_get_set(self, ctx, element):
        self.raw.get()
        self.raw.set(STATE_JSON)

    def op_json_decode(self, ctx, element):
        self.codec.decode(STATE_JSON)

    def op_json_encode(self, ctx, element):
        self.codec.encode(Clicks(list(TIMES), 3))

    def op_marshal_decode(self, ctx, element):
        clicks = Clicks.__new__(Clicks)
        clicks.__dict__ = dict(zip(FIELDS, marshal.loads(STATE_MARSHAL)))

    def op_marshal_encode(self, ctx, element):
        marshal.dumps(tuple(Clicks(list(TIMES), 3).__dict__.values()))

    def op_dataclass(self, ctx, element):
        Clicks(list(TIMES), 3)

    def op_emit(self, ctx, element):
        record = {"ad_id": ctx.current_key_str(), "clicks": 3, "updated_at": "2023-11-14 22:13:20.000"}
        self.out.emit(record, key=ctx.current_key())

    def op_timer(self, ctx, element):
        # Fires later: the cost includes that `on_timer` call (which does nothing).
        ctx.register_event_timer(element.timestamp() + 300_000)


ProcessFunction = weir.export(OpCosts)
