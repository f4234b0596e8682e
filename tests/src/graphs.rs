//! Pipeline files of several stages that more than one test (or the bench) runs.

use std::path::Path;

/// The source and the two stages of `examples/ad-campaigns` over the clicks at `clicks`
/// (`{"ad_id", "campaign_id", "clicked_at"}`): seed 000's change-only count per ad,
/// carrying its campaign, at `p1` shards, then per campaign the sum of its ads' current
/// counts at `p2` shards. The caller adds the name, the sinks and the rest.
pub fn ad_campaigns_stages(clicks: &Path, (p1, p2): (usize, usize)) -> String {
    format!(
        r#"
[[source]]
name = "clicks"
type = "file"
path = "{clicks}"
key = "ad_id"
timestamp = "clicked_at"
timestamp_format = "datetime"
out_of_orderness = "5s"

[[stage]]
name = "per-ad"
parallelism = {p1}
udf = {{ path = "{counter}", config = {{ window = "5m", carry = "campaign_id" }} }}
[[stage.input]]
from = "clicks"

[[stage]]
name = "per-campaign"
parallelism = {p2}
udf = {{ path = "{totals}" }}
[[stage.input]]
from = "per-ad"
key = "campaign_id"
"#,
        clicks = clicks.display(),
        counter = crate::component("change-only-counter").display(),
        totals = crate::component("campaign-totals").display(),
    )
}

/// The text of a pipeline `name` of two keyed stages over the JSON lines of
/// `events.jsonl` beside it (`{"key", "ts", ...}`, `ts` in epoch ms), for the tests that
/// swap one stage's UDF: stage `first` runs the component at `first`, stage `second` the
/// one at `second`, keyed by the `key` field of the first's records; each stage has
/// `parallelism` shards and writes its output to `first.jsonl` or `second.jsonl` beside
/// the file.
pub fn two_stage_pipeline(name: &str, first: &str, second: &str, parallelism: usize) -> String {
    format!(
        r#"name = "{name}"
parallelism = {parallelism}

[[source]]
name = "events"
type = "file"
path = "events.jsonl"
key = "key"
timestamp = "ts"
timestamp_format = "epoch_ms"

[[stage]]
name = "first"
udf = {{ path = "{first}" }}
[[stage.input]]
from = "events"

[[stage]]
name = "second"
udf = {{ path = "{second}" }}
[[stage.input]]
from = "first"
key = "key"

[[sink]]
stage = "first"
output = "main"
type = "file"
path = "first.jsonl"

[[sink]]
stage = "second"
output = "main"
type = "file"
path = "second.jsonl"
"#
    )
}
