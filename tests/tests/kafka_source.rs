//! The Kafka source against a real broker (tansu, started by scripts/services.sh):
//!
//! - seed 000 read from a topic gives exactly the records the same pipeline gives on the
//!   same clicks from a file, to a file and to another topic (with `weir-id` headers);
//! - four partitions, interleaved however the consumer fetches them, give seed 001's
//!   file-mode table;
//! - undecodable messages become dead letters naming `topic[partition]` and offset;
//! - `key = "@key"` and `timestamp = "@timestamp"` take the message's own key and time;
//! - offsets are committed after checkpoints, so a restart with `startup = "committed"`
//!   (or from the checkpoint itself) does not reprocess history, and `startup = "latest"`
//!   reads nothing old; a completed run commits where it ended and drops its checkpoints;
//! - one source reads several topics (`topics = [...]`);
//! - a partition that gets no data stops holding the watermark back after `idle_timeout`;
//! - brokers that cannot be reached fail the run, naming them, after `connect_timeout`.
//!
//! Every test uses its own topics, consumer group and folders, so they run in parallel.
//! Records are produced with `weir_e2e::kafka::produce`, one per message batch, because
//! the test broker reports a partition's end offset wrongly after multi-record batches
//! (see there).

use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use weir_e2e::gen::{self, Click, Rng};
use weir_e2e::kafka::{committed_offsets, create_topic, produce, read_topic, Outgoing};
use weir_e2e::model::{self, ChangeOnlyCounter};
use weir_e2e::services::{kafka_brokers, unique_table};
use weir_e2e::{component, datetime_millis, read_jsonl, repo_root, weir, Finished, Workdir};

/// The lines of a `[[source]]` table that read `topic` (after `name = ...`), with the
/// consumer group `group` and `extra` lines (startup, bounded, idle_timeout...).
fn kafka_lines(topic: &str, group: &str, extra: &str) -> String {
    format!(
        "type = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{topic}\"\ngroup = \"{group}\"\n{extra}\n",
        kafka_brokers()
    )
}

/// A copy of an example pipeline in `work` whose (file) source reads Kafka instead, per
/// `source_lines` (see [`kafka_lines`]); the UDF path is made absolute. Returns its path.
fn kafka_variant(work: &Workdir, example: &str, source_lines: &str) -> String {
    let dir = repo_root().join("examples").join(example);
    let text = std::fs::read_to_string(dir.join("pipeline.toml")).expect("example pipeline");
    let at = text
        .find("type = \"file\"\npath = \"")
        .expect("a file source");
    let end = at + text[at..].find(".jsonl\"\n").expect("its path") + ".jsonl\"\n".len();
    let text = format!("{}{source_lines}{}", &text[..at], &text[end..]).replace(
        "path = \"../../",
        &format!("path = \"{}/../../", dir.display()),
    );
    work.write(&format!("{example}-kafka.toml"), &text)
}

/// The echo UDF (`misbehaving-udf`, which emits each record as it is) on one Kafka
/// source `events` (`source_lines`), keyed by `k` with epoch-ms times in `ts`; main
/// output to `out.jsonl` and dead letters to `dead.jsonl` in `work`.
fn echo_pipeline(work: &Workdir, name: &str, source_lines: &str) -> String {
    let toml = format!(
        r#"name = "{name}"

[[source]]
name = "events"
{source_lines}
key = "k"
timestamp = "ts"
timestamp_format = "epoch_ms"

[udf]
path = "{udf}"

[[sink]]
output = "main"
type = "file"
path = "out.jsonl"

[dead_letter]
path = "dead.jsonl"
"#,
        udf = component("misbehaving-udf").display()
    );
    work.write(&format!("{name}.toml"), &toml)
}

fn path_arg(path: &Path) -> String {
    path.display().to_string()
}

/// The lines of a file (empty if it does not exist yet).
fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The checkpoint files in a state directory.
fn checkpoints(state: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(state)
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with("checkpoint-") && n.ends_with(".weir"))
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// Runs the ad-clicks example on `clicks` from a file; returns its output lines.
fn ad_clicks_from_file(work: &Workdir, clicks: &[Value]) -> Vec<String> {
    let input = work.write_jsonl("file-clicks.jsonl", clicks);
    let out = work.path("file-counts.jsonl");
    weir(&[
        "run",
        "examples/ad-clicks/pipeline.toml",
        "-q",
        "--input",
        &format!("clicks={input}"),
        "--output",
        &format!("main={}", out.display()),
        "--dead-letter",
        &path_arg(&work.path("file-dead.jsonl")),
    ])
    .assert_success();
    lines_of(&out)
}

/// A `weir run` going on in the background, stopped (SIGTERM) by the test. Killed if
/// the test fails first.
struct Live {
    child: Option<Child>,
    stderr: PathBuf,
}

impl Live {
    /// Starts `weir` with `args`; its stderr goes to `work/<label>.stderr`.
    fn start(work: &Workdir, label: &str, args: &[&str]) -> Self {
        let stderr = work.path(&format!("{label}.stderr"));
        let child = Command::new(weir_e2e::weir_bin())
            .current_dir(repo_root())
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start weir");
        Self {
            child: Some(child),
            stderr,
        }
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }

    /// Waits until `path` has at least `n` lines; panics after `within`, or if the run
    /// ends first.
    fn wait_for_lines(&mut self, path: &Path, n: usize, within: Duration) -> Vec<String> {
        let deadline = Instant::now() + within;
        loop {
            let lines = lines_of(path);
            if lines.len() >= n {
                return lines;
            }
            let child = self.child.as_mut().expect("running");
            if let Some(status) = child.try_wait().expect("wait") {
                panic!(
                    "weir ended ({status}) with {} of {n} lines in {}:\n{}",
                    lines.len(),
                    path.display(),
                    self.stderr()
                );
            }
            assert!(
                Instant::now() < deadline,
                "only {} of {n} lines in {} after {within:?}:\n{lines:#?}\n{}",
                lines.len(),
                path.display(),
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends SIGTERM and waits (at most 20 s) for the process to end.
    fn stop(mut self) -> Finished {
        let mut child = self.child.take().expect("running");
        let status = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = child.try_wait().expect("wait") {
                break status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "weir did not stop within 20 s of SIGTERM:\n{}",
                    self.stderr()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        Finished {
            code: status.code(),
            stdout: String::new(),
            stderr: self.stderr(),
        }
    }
}

impl Drop for Live {
    fn drop(&mut self) {
        if let Some(child) = &mut self.child {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn clicks_json(clicks: &[Click]) -> Vec<Value> {
    clicks.iter().map(Click::to_json).collect()
}

fn outgoing_json(values: &[Value]) -> Vec<Outgoing> {
    values
        .iter()
        .map(|v| Outgoing::new(v.to_string()))
        .collect()
}

/// Seed 000 on generated clicks: out of order, late, with quiet gaps.
fn seed_000_clicks() -> Vec<Value> {
    clicks_json(&gen::clicks(3_000, 20, 31, 400, 4_000, 0.02, 0.003))
}

#[test]
fn seed_000_from_a_topic_gives_exactly_the_file_records() {
    let clicks = seed_000_clicks();
    let work = Workdir::new();
    let expected = ad_clicks_from_file(&work, &clicks);
    assert!(expected.len() > 1_000, "{} records", expected.len());

    let topic = unique_table("src-clicks");
    create_topic(&topic, 1);
    produce(&topic, &outgoing_json(&clicks));
    let group = unique_table("src-group");
    let pipeline = kafka_variant(
        &work,
        "ad-clicks",
        &kafka_lines(&topic, &group, "startup = \"earliest\"\nbounded = true"),
    );
    let out = work.path("counts.jsonl");
    let dead = work.path("dead.jsonl");
    let run = weir(&[
        "run",
        &pipeline,
        "--output",
        &format!("main={}", out.display()),
        "--dead-letter",
        &path_arg(&dead),
    ]);
    run.assert_success();
    let got = lines_of(&out);
    assert_eq!(got.len(), expected.len(), "number of records");
    assert!(got == expected, "the records differ from the file run's");
    assert!(
        run.stderr.contains("source clicks: 3000 records read"),
        "{}",
        run.stderr
    );
    assert!(run.stderr.contains("dead letters: 0 "), "{}", run.stderr);
    assert!(
        !run.stderr.contains("stopped before the input ended"),
        "{}",
        run.stderr
    );
    // A completed run commits where it ended, for a later `startup = "committed"`.
    assert_eq!(
        committed_offsets(&group, &topic),
        BTreeMap::from([(0, 3_000)])
    );
}

/// In keyed shards (`--parallelism 2`, one shard per half of the key groups) records of
/// different ads interleave differently, but each ad gets exactly the file run's
/// records, in the file run's order.
#[test]
fn seed_000_from_a_topic_in_shards_gives_each_ad_the_file_records() {
    let clicks = seed_000_clicks();
    let work = Workdir::new();
    let expected = ad_clicks_from_file(&work, &clicks);
    let topic = unique_table("src-clicks");
    create_topic(&topic, 1);
    produce(&topic, &outgoing_json(&clicks));
    let group = unique_table("src-group");
    let pipeline = kafka_variant(
        &work,
        "ad-clicks",
        &kafka_lines(&topic, &group, "startup = \"earliest\"\nbounded = true"),
    );
    let out = work.path("counts.jsonl");
    let run = weir(&[
        "run",
        &pipeline,
        "--parallelism",
        "2",
        "--output",
        &format!("main={}", out.display()),
        "--dead-letter",
        &path_arg(&work.path("dead.jsonl")),
    ]);
    run.assert_success();
    assert!(
        run.stderr.contains("source clicks: 3000 records read"),
        "{}",
        run.stderr
    );
    let per_ad = |lines: &[String]| {
        let mut ads: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for line in lines {
            let record: Value = serde_json::from_str(line).expect("a JSON record");
            let ad = record["ad_id"].as_str().expect("ad_id").to_string();
            ads.entry(ad).or_default().push(line.clone());
        }
        ads
    };
    let got = lines_of(&out);
    assert_eq!(got.len(), expected.len(), "number of records");
    assert!(
        per_ad(&got) == per_ad(&expected),
        "an ad's records differ from the file run's"
    );
    assert!(got != expected, "two shards interleave the ads differently");
    assert_eq!(
        committed_offsets(&group, &topic),
        BTreeMap::from([(0, 3_000)])
    );
}

#[test]
fn seed_000_from_a_topic_to_a_topic_gives_the_file_records_with_ids() {
    let clicks = seed_000_clicks();
    let work = Workdir::new();
    let expected = ad_clicks_from_file(&work, &clicks);

    let input = unique_table("src-clicks-in");
    let output = unique_table("src-counts-out");
    create_topic(&input, 1);
    create_topic(&output, 1);
    produce(&input, &outgoing_json(&clicks));
    let group = unique_table("src-group");
    let pipeline = kafka_variant(
        &work,
        "ad-clicks",
        &kafka_lines(&input, &group, "startup = \"earliest\"\nbounded = true"),
    );
    // The example's main output goes to stdout: send it to the output topic instead.
    let text = std::fs::read_to_string(&pipeline).unwrap();
    let stdout_sink = "[[sink]]\noutput = \"main\"\ntype = \"stdout\"";
    assert!(
        text.contains(stdout_sink),
        "the example's main sink changed"
    );
    let kafka_sink = format!(
        "[[sink]]\noutput = \"main\"\ntype = \"kafka\"\nbrokers = \"{}\"\ntopic = \"{output}\"\nproperties = {{ \"linger.ms\" = \"5\" }}",
        kafka_brokers()
    );
    std::fs::write(&pipeline, text.replace(stdout_sink, &kafka_sink)).unwrap();

    let run = weir(&[
        "run",
        &pipeline,
        "--dead-letter",
        &path_arg(&work.path("dead.jsonl")),
    ]);
    run.assert_success();
    assert!(
        run.stderr
            .contains(&format!("output main: {} records emitted", expected.len())),
        "{}",
        run.stderr
    );

    let got = read_topic(&output, expected.len());
    for (n, (message, line)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(message.payload_str(), line, "payload of message {n}");
        let id = format!("ad-clicks/main/{n}");
        assert_eq!(message.header("weir-id"), Some(&*id), "id of message {n}");
        let record: Value = serde_json::from_str(line).unwrap();
        let ad = record["ad_id"].as_str().unwrap();
        assert_eq!(message.key.as_deref(), Some(ad.as_bytes()), "key {n}");
        assert_eq!(message.offset, n as i64);
    }
}

/// Hour windows of seed 001 (taxi revenue) start here: 2025-11-01 00:00:00 UTC.
const TAXI_BASE_MS: i64 = 1_761_955_200_000;
const HOUR: i64 = 3_600_000;
const ZONES: [i64; 6] = [4, 79, 132, 161, 236, 237];

/// One partition's rides, in time order: `n` rides 0 to 40 s apart, starting `lag_ms`
/// after the base time. Returns (timestamp, zone, cents, JSON text).
fn partition_rides(rng: &mut Rng, n: usize, lag_ms: i64) -> Vec<(i64, i64, i64, String)> {
    let mut clock = TAXI_BASE_MS + lag_ms;
    (0..n)
        .map(|_| {
            clock += rng.below(40_001) as i64;
            let zone = ZONES[rng.below(ZONES.len() as u64) as usize];
            let cents = 250 + rng.below(12_000) as i64;
            let amount = if rng.chance(0.5) {
                format!("\"{}.{:02}\"", cents / 100, cents % 100)
            } else {
                format!("{}.{:02}", cents / 100, cents % 100)
            };
            let text = format!(
                r#"{{"PULocationID": {zone}, "DOLocationID": 4, "trip_distance": 2.5, "total_amount": {amount}, "tpep_pickup_datetime": {clock}}}"#
            );
            (clock, zone, cents, text)
        })
        .collect()
}

/// Runs a copy of the taxi-revenue example in `work`; returns (final table, changelog,
/// late rides, dead letters, stderr).
fn taxi_run(
    work: &Workdir,
    pipeline: &str,
    extra: &[&str],
) -> (Vec<Value>, Vec<Value>, Vec<Value>, Vec<Value>, String) {
    let table = work.path("revenue.jsonl");
    let late = work.path("late.jsonl");
    let dead = work.path("dead.jsonl");
    let mut args = vec![
        "run".to_string(),
        pipeline.to_string(),
        "--output".into(),
        format!("main={}", table.display()),
        "--output".into(),
        format!("late={}", late.display()),
        "--dead-letter".into(),
        path_arg(&dead),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let run = weir(&args);
    run.assert_success();
    (
        read_jsonl(&table),
        read_jsonl(work.path("out/revenue.changelog.jsonl")),
        read_jsonl(&late),
        read_jsonl(&dead),
        run.stderr,
    )
}

fn sorted_texts(values: &[Value]) -> Vec<String> {
    let mut texts: Vec<String> = values.iter().map(Value::to_string).collect();
    texts.sort();
    texts
}

/// Four partitions, each in time order but lagging one another by minutes, read in
/// whatever interleaving the consumer fetches them. The result cannot depend on it:
/// the pipeline watermark is at most the minimum of the partitions' watermarks, and a
/// partition's watermark is at most its latest ride's time minus 5 s, so when a ride
/// arrives its window has not fired yet (it fires once the watermark reaches the window's
/// last millisecond). No ride is late, no window is corrected, and every window fires
/// once with all its rides: the final table and the changelog (as a multiset) are those
/// of the file run on all rides in time order, which is the GROUP BY of all rides.
/// (Idleness is off, so a partition cannot stop holding the watermark back however
/// slowly its messages come.) The same holds in 2 and 4 keyed shards, each of which sees
/// every partition's records and so the same watermark.
#[test]
fn four_partitions_give_the_file_result_whatever_the_interleaving() {
    let mut rng = Rng::new(41);
    let partitions: Vec<Vec<(i64, i64, i64, String)>> = [(0, 0), (1, 17), (2, 4), (3, 31)]
        .iter()
        .map(|&(p, lag_min)| partition_rides(&mut rng, 500 + 60 * p, lag_min * 60_000))
        .collect();
    let total: usize = partitions.iter().map(Vec::len).sum();

    // The file run: all rides in time order.
    let mut all: Vec<&(i64, i64, i64, String)> = partitions.iter().flatten().collect();
    all.sort_by_key(|r| r.0);
    let file_work = Workdir::new();
    let text: String = all.iter().map(|r| format!("{}\n", r.3)).collect();
    let rides_file = file_work.write("rides.jsonl", &text);
    let file_pipeline = weir_e2e::example_variant(&file_work, "taxi-revenue", "");
    let (file_table, file_changelog, file_late, file_dead, _) = taxi_run(
        &file_work,
        &file_pipeline,
        &["-q", "--input", &format!("rides={rides_file}")],
    );

    // The GROUP BY: what both runs must give.
    let mut groups: BTreeMap<(i64, i64), (u64, i64)> = BTreeMap::new();
    for (ts, zone, cents, _) in partitions.iter().flatten() {
        let group = groups
            .entry((ts.div_euclid(HOUR) * HOUR, *zone))
            .or_default();
        group.0 += 1;
        group.1 += cents;
    }
    let group_by: Vec<Value> = groups
        .iter()
        .map(|(&(start, zone), &(trips, cents))| {
            json!({
                "window_start": &datetime_millis(start)[..19],
                "PULocationID": zone,
                "num_trips": trips,
                "total_revenue": rust_decimal::Decimal::new(cents, 2).to_string(),
            })
        })
        .collect();
    assert!(group_by.len() > 25, "{} windows", group_by.len());
    assert_eq!(
        sorted_texts(&file_table),
        sorted_texts(&group_by),
        "file run"
    );
    assert!(file_late.is_empty() && file_dead.is_empty());

    let topic = unique_table("src-rides");
    create_topic(&topic, 4);
    let records: Vec<Outgoing> = partitions
        .iter()
        .enumerate()
        .flat_map(|(p, rides)| {
            rides
                .iter()
                .map(move |r| Outgoing::new(r.3.clone()).partition(p as i32))
        })
        .collect();
    produce(&topic, &records);
    // In one operator and in keyed shards, which each see every partition's records.
    for parallelism in ["1", "2", "4"] {
        let work = Workdir::new();
        let group = unique_table("src-group");
        let pipeline = kafka_variant(
            &work,
            "taxi-revenue",
            &kafka_lines(
                &topic,
                &group,
                "startup = \"earliest\"\nbounded = true\nidle_timeout = \"0\"",
            ),
        );
        let (table, changelog, late, dead, stderr) =
            taxi_run(&work, &pipeline, &["--parallelism", parallelism]);
        assert_same_as_file(
            parallelism,
            total,
            (&table, &changelog, &late, &dead, &stderr),
            (&file_table, &file_changelog),
            group_by.len(),
        );
    }
}

/// The Kafka run of `four_partitions_give_the_file_result_whatever_the_interleaving` at
/// `parallelism` against the file run: the same final table and changelog (as
/// multisets), no late rides, no dead letters.
fn assert_same_as_file(
    parallelism: &str,
    total: usize,
    (table, changelog, late, dead, stderr): (&[Value], &[Value], &[Value], &[Value], &str),
    (file_table, file_changelog): (&[Value], &[Value]),
    windows: usize,
) {
    assert!(
        stderr.contains(&format!("source rides: {total} records read")),
        "parallelism {parallelism}: {stderr}"
    );
    assert_eq!(
        sorted_texts(table),
        sorted_texts(file_table),
        "final table at parallelism {parallelism}"
    );
    assert_eq!(table.len(), windows, "one row per window and zone");
    assert_eq!(
        sorted_texts(changelog),
        sorted_texts(file_changelog),
        "changelog at parallelism {parallelism}"
    );
    assert_eq!(changelog.len(), table.len(), "no corrections");
    assert!(
        late.is_empty(),
        "late rides at parallelism {parallelism}: {late:?}"
    );
    assert!(
        dead.is_empty(),
        "dead letters at parallelism {parallelism}: {dead:?}"
    );
}

#[test]
fn bad_messages_become_dead_letters_naming_partition_and_offset() {
    let topic = unique_table("src-bad");
    create_topic(&topic, 2);
    let at = |s: i64| datetime_millis(gen::BASE_MS + s * 1_000);
    let click = |ad: &str, s: i64| json!({"ad_id": ad, "clicked_at": at(s)}).to_string();
    // Each ad in one partition, and all clicks within 20 s: no timer fires before the end,
    // so each ad's counts do not depend on how the partitions interleave.
    let p0 = [
        click("ad-a", 0).into_bytes(),
        b"not json".to_vec(),
        click("ad-a", 2).into_bytes(),
        json!({"clicked_at": at(3)}).to_string().into_bytes(),
        click("ad-b", 4).into_bytes(),
    ];
    let p1 = [
        click("ad-c", 1).into_bytes(),
        json!({"ad_id": "ad-c"}).to_string().into_bytes(),
        b"{\"ad_id\": \"ad-c\", \"clicked_at\": \"\xff\"}".to_vec(),
        click("ad-c", 5).into_bytes(),
        click("ad-c", 6).into_bytes(),
        json!({"ad_id": "ad-c", "clicked_at": "noon"})
            .to_string()
            .into_bytes(),
    ];
    let mut records: Vec<Outgoing> = p0.iter().map(|m| Outgoing::new(m.clone())).collect();
    records.extend(p1.iter().map(|m| Outgoing::new(m.clone()).partition(1)));
    produce(&topic, &records);

    let work = Workdir::new();
    let group = unique_table("src-group");
    let pipeline = kafka_variant(
        &work,
        "ad-clicks",
        &kafka_lines(&topic, &group, "startup = \"earliest\"\nbounded = true"),
    );
    let out = work.path("counts.jsonl");
    let dead = work.path("dead.jsonl");
    let run = weir(&[
        "run",
        &pipeline,
        "--output",
        &format!("main={}", out.display()),
        "--dead-letter",
        &path_arg(&dead),
    ]);
    run.assert_success();

    let mut letters = read_jsonl(&dead);
    letters.sort_by_key(|l| (l["partition"].to_string(), l["offset"].as_u64()));
    let letter = |p: i32, offset: u64, reason: &str, raw: &str| {
        json!({
            "source": "clicks",
            "partition": format!("{topic}[{p}]"),
            "offset": offset,
            "reason": reason,
            "raw": raw,
        })
    };
    let not_utf8 = letters
        .iter()
        .find(|l| l["offset"] == 2 && l["partition"] == format!("{topic}[1]"))
        .and_then(|l| l["reason"].as_str())
        .unwrap_or_default()
        .to_string();
    assert!(not_utf8.starts_with("not UTF-8 text: "), "{letters:#?}");
    let expected = vec![
        letter(
            0,
            1,
            "not valid JSON: expected ident at line 1 column 2",
            "not json",
        ),
        letter(
            0,
            3,
            "missing key field \"ad_id\"",
            &json!({"clicked_at": at(3)}).to_string(),
        ),
        letter(
            1,
            1,
            "missing timestamp field \"clicked_at\"",
            r#"{"ad_id":"ad-c"}"#,
        ),
        letter(
            1,
            2,
            &not_utf8,
            "{\"ad_id\": \"ad-c\", \"clicked_at\": \"\u{fffd}\"}",
        ),
        letter(
            1,
            5,
            "timestamp field \"clicked_at\": \"noon\" is not a date-time like \
             2026-11-29 10:00:00.123 or 2026-11-29T10:00:00Z",
            r#"{"ad_id":"ad-c","clicked_at":"noon"}"#,
        ),
    ];
    assert_eq!(letters, expected);

    // The good clicks were processed as the model says.
    let good = [
        ("ad-a", 0),
        ("ad-a", 2),
        ("ad-b", 4),
        ("ad-c", 1),
        ("ad-c", 5),
        ("ad-c", 6),
    ];
    let expected = model::event_time(
        &ChangeOnlyCounter { window: 300_000 },
        good.iter()
            .map(|(ad, s)| (ad.to_string(), gen::BASE_MS + s * 1_000, ())),
        5_000,
    );
    let got = read_jsonl(&out);
    assert_eq!(model::by_key(&got, "ad_id"), expected);
    assert_eq!(got.len(), 12, "6 rising counts and 6 falling ones");
    for line in [
        "source clicks: 11 records read",
        "dead letters: 5 (",
        "processed 6 records",
    ] {
        assert!(run.stderr.contains(line), "{line}: {}", run.stderr);
    }
}

#[test]
fn message_key_and_timestamp_stand_in_for_fields() {
    let topic = unique_table("src-meta");
    create_topic(&topic, 1);
    let clicks = gen::clicks(400, 6, 5, 1_500, 3_000, 0.02, 0.01);
    // The values carry decoy fields: the key and time must come from the message.
    let decoy = json!({"ad_id": "decoy", "clicked_at": "2000-01-01 00:00:00"}).to_string();
    let mut records: Vec<Outgoing> = clicks
        .iter()
        .map(|c| {
            Outgoing::new(decoy.clone())
                .key(c.ad.clone())
                .timestamp(c.ts)
        })
        .collect();
    // A message without a key is a dead letter.
    records.insert(100, Outgoing::new("{}").timestamp(gen::BASE_MS));

    let work = Workdir::new();
    let expected = ad_clicks_from_file(&work, &clicks_json(&clicks));
    produce(&topic, &records);
    let group = unique_table("src-group");
    let pipeline = kafka_variant(
        &work,
        "ad-clicks",
        &kafka_lines(&topic, &group, "startup = \"earliest\"\nbounded = true"),
    );
    let text = std::fs::read_to_string(&pipeline).unwrap();
    let fields = "key = \"ad_id\"\ntimestamp = \"clicked_at\"\n";
    assert!(text.contains(fields));
    let text = text.replace(fields, "key = \"@key\"\ntimestamp = \"@timestamp\"\n");
    std::fs::write(&pipeline, text).unwrap();
    let out = work.path("counts.jsonl");
    let dead = work.path("dead.jsonl");
    let run = weir(&[
        "run",
        &pipeline,
        "-q",
        "--output",
        &format!("main={}", out.display()),
        "--dead-letter",
        &path_arg(&dead),
    ]);
    run.assert_success();
    let got = lines_of(&out);
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the records differ from the file run's");
    assert_eq!(
        read_jsonl(&dead),
        vec![json!({
            "source": "clicks",
            "partition": format!("{topic}[0]"),
            "offset": 100,
            "reason": "the message has no key (key = \"@key\")",
            "raw": "{}",
        })]
    );
}

/// An echo record for the offset tests.
fn event(n: usize) -> Value {
    json!({"k": format!("k{}", n % 7), "ts": gen::BASE_MS + n as i64 * 1_000, "n": n})
}

/// Events `range` as records, event `n` to partition `n % partitions`.
fn events_to_partitions(range: std::ops::Range<usize>, partitions: usize) -> Vec<Outgoing> {
    range
        .map(|n| Outgoing::new(event(n).to_string()).partition((n % partitions) as i32))
        .collect()
}

/// The lines, sorted (records of different partitions interleave in any order).
fn sorted(mut lines: Vec<String>) -> Vec<String> {
    lines.sort();
    lines
}

/// Seed 004's question: after a restart, is history reprocessed? A live run with a
/// fresh group commits its offsets once its checkpoints are durable, and on SIGTERM; a
/// run with no checkpoint and `startup = "committed"` then reads only what came after.
/// A run that resumes from the first run's checkpoint also starts where it stopped,
/// whatever `startup` says, and appends to the output the checkpoint kept.
#[test]
fn committed_offsets_let_a_restart_skip_what_was_processed() {
    const K: usize = 40;
    const M: usize = 15;
    let topic = unique_table("src-commit");
    create_topic(&topic, 2);
    produce(&topic, &events_to_partitions(0..K, 2));
    let texts: Vec<String> = (0..K + M).map(|n| event(n).to_string()).collect();

    let work = Workdir::new();
    let group = unique_table("src-group");
    let pipeline = echo_pipeline(
        &work,
        "offsets",
        &kafka_lines(&topic, &group, "startup = \"committed\"\nbounded = false"),
    );
    let first_state = work.path("state-1");
    let first_out = work.path("out-1.jsonl");
    let args = |state: &Path, out: &Path| -> Vec<String> {
        vec![
            "run".into(),
            pipeline.clone(),
            "--state-dir".into(),
            path_arg(state),
            "--checkpoint-interval".into(),
            "1s".into(),
            "--output".into(),
            format!("main={}", out.display()),
        ]
    };
    let start = |label: &str, args: &[String]| {
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        Live::start(&work, label, &args)
    };

    // 1. K records, a fresh group (so from the earliest offsets): all of them, SIGTERM.
    let mut first = start("first", &args(&first_state, &first_out));
    let first_lines = first.wait_for_lines(&first_out, K, Duration::from_secs(15));
    assert_eq!(sorted(first_lines.clone()), sorted(texts[..K].to_vec()));
    let finished = first.stop();
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains(&format!("source events: {K} records read"))
            && finished.stderr.contains("stopped before the input ended"),
        "{}",
        finished.stderr
    );
    assert_eq!(
        lines_of(&first_out),
        first_lines,
        "nothing more after the stop"
    );
    assert!(
        !checkpoints(&first_state).is_empty(),
        "the stop left a checkpoint"
    );
    assert_eq!(
        committed_offsets(&group, &topic),
        BTreeMap::from([(0, (K / 2) as i64), (1, (K / 2) as i64)]),
        "committed after the first run"
    );

    // 2. M more; a run with an empty state dir starts at the committed offsets.
    produce(&topic, &events_to_partitions(K..K + M, 2));
    let second_out = work.path("out-2.jsonl");
    let mut second = start("second", &args(&work.path("state-2"), &second_out));
    second.wait_for_lines(&second_out, M, Duration::from_secs(15));
    // Time for a checkpoint, and for anything more to show up if it were coming.
    std::thread::sleep(Duration::from_millis(1_500));
    assert_eq!(sorted(lines_of(&second_out)), sorted(texts[K..].to_vec()));
    let finished = second.stop();
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains(&format!("source events: {M} records read")),
        "{}",
        finished.stderr
    );
    let evens = (K + M).div_ceil(2) as i64;
    assert_eq!(
        committed_offsets(&group, &topic),
        BTreeMap::from([(0, evens), (1, (K + M) as i64 - evens)]),
        "committed after the second run"
    );

    // 3. From the first run's checkpoint, with startup = "earliest" and bounded: the
    // checkpoint's positions win; the output it kept gets the M new records appended.
    std::fs::write(
        &pipeline,
        std::fs::read_to_string(&pipeline).unwrap().replace(
            "startup = \"committed\"\nbounded = false",
            "startup = \"earliest\"\nbounded = true",
        ),
    )
    .unwrap();
    let args: Vec<String> = args(&first_state, &first_out);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let third = weir(&args);
    third.assert_success();
    assert!(
        third
            .stderr
            .contains(&format!("source events: {} records read", K + M))
            && third
                .stderr
                .contains(&format!("processed {} records", K + M)),
        "the counts go on from the checkpoint's:\n{}",
        third.stderr
    );
    let all = lines_of(&first_out);
    assert_eq!(all[..K], first_lines, "the first run's output is kept");
    assert_eq!(sorted(all[K..].to_vec()), sorted(texts[K..].to_vec()));
    assert_eq!(
        checkpoints(&first_state),
        Vec::<String>::new(),
        "a completed run removes its checkpoints"
    );
    assert_eq!(
        committed_offsets(&group, &topic),
        BTreeMap::from([(0, evens), (1, (K + M) as i64 - evens)]),
        "a completed run commits where it ended"
    );
}

/// `topics = [...]`: one source reads every partition of several topics (here both
/// with partitions 0 and 1, so partition numbers alone do not tell them apart).
#[test]
fn one_source_reads_several_topics() {
    let topics = [unique_table("src-multi-a"), unique_table("src-multi-b")];
    for topic in &topics {
        create_topic(topic, 2);
    }
    produce(&topics[0], &events_to_partitions(0..30, 2));
    produce(&topics[1], &events_to_partitions(30..41, 2));
    let work = Workdir::new();
    let group = unique_table("src-group");
    let source = kafka_lines(&topics[0], &group, "startup = \"earliest\"\nbounded = true").replace(
        &format!("topic = \"{}\"", topics[0]),
        &format!("topics = [\"{}\", \"{}\"]", topics[0], topics[1]),
    );
    let pipeline = echo_pipeline(&work, "multi", &source);
    let run = weir(&["run", &pipeline]);
    run.assert_success();
    let texts: Vec<String> = (0..41).map(|n| event(n).to_string()).collect();
    assert_eq!(sorted(lines_of(&work.path("out.jsonl"))), sorted(texts));
    assert!(
        run.stderr.contains("source events: 41 records read"),
        "{}",
        run.stderr
    );
}

#[test]
fn startup_latest_reads_nothing_already_in_the_topic() {
    let topic = unique_table("src-latest");
    create_topic(&topic, 2);
    produce(&topic, &events_to_partitions(0..30, 2));
    let work = Workdir::new();
    let group = unique_table("src-group");
    let pipeline = echo_pipeline(
        &work,
        "latest",
        &kafka_lines(&topic, &group, "startup = \"latest\"\nbounded = true"),
    );
    let run = weir(&["run", &pipeline]);
    run.assert_success();
    assert!(
        run.stderr.contains("source events: 0 records read"),
        "{}",
        run.stderr
    );
    assert_eq!(lines_of(&work.path("out.jsonl")), Vec::<String>::new());

    // The same with earliest reads all 30: the topic did hold them.
    let pipeline = echo_pipeline(
        &work,
        "earliest",
        &kafka_lines(&topic, &group, "startup = \"earliest\"\nbounded = true"),
    );
    let run = weir(&["run", &pipeline, "-q"]);
    run.assert_success();
    assert_eq!(lines_of(&work.path("out.jsonl")).len(), 30);

    // Live, with latest: only what is produced after the start.
    let pipeline = echo_pipeline(
        &work,
        "live-latest",
        &kafka_lines(
            &topic,
            &unique_table("src-group"),
            "startup = \"latest\"\nbounded = false",
        ),
    );
    let out = work.path("live.jsonl");
    let mut live = Live::start(
        &work,
        "live-latest",
        &[
            "run",
            &pipeline,
            "--no-checkpoints",
            "--output",
            &format!("main={}", out.display()),
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !live.stderr().contains("reading 2 partition(s)") {
        assert!(Instant::now() < deadline, "no start:\n{}", live.stderr());
        std::thread::sleep(Duration::from_millis(50));
    }
    produce(&topic, &events_to_partitions(30..36, 2));
    let lines = live.wait_for_lines(&out, 6, Duration::from_secs(10));
    std::thread::sleep(Duration::from_millis(500));
    let texts: Vec<String> = (30..36).map(|n| event(n).to_string()).collect();
    assert_eq!(sorted(lines), sorted(texts));
    let finished = live.stop();
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert!(
        finished.stderr.contains("source events: 6 records read"),
        "{}",
        finished.stderr
    );
}

/// A live change-only counter on a 2-partition topic where only partition 0 gets data:
/// ad-1 and ad-2 click at 10:00:00-10:00:02, then ad-3 at 10:10:00, so the watermark
/// partition 0 alone allows (10:09:55) is past the 5-minute expiries of the first
/// three clicks. Returns the run (still going) and its output file.
fn start_idle_counter(work: &Workdir, idle_timeout: &str) -> (Live, PathBuf) {
    let topic = unique_table("src-idle");
    create_topic(&topic, 2);
    let at = |s: i64| datetime_millis(gen::BASE_MS + s * 1_000);
    let clicks = [("ad-1", 0), ("ad-1", 1), ("ad-2", 2), ("ad-3", 600)];
    let records: Vec<Outgoing> = clicks
        .iter()
        .map(|(ad, s)| Outgoing::new(json!({"ad_id": ad, "clicked_at": at(*s)}).to_string()))
        .collect();
    produce(&topic, &records);
    let group = unique_table("src-group");
    let pipeline = kafka_variant(
        work,
        "ad-clicks",
        &kafka_lines(
            &topic,
            &group,
            &format!("startup = \"earliest\"\nidle_timeout = \"{idle_timeout}\""),
        ),
    );
    let out = work.path("counts.jsonl");
    let args = [
        "run".to_string(),
        pipeline,
        "--no-checkpoints".into(),
        "--output".into(),
        format!("main={}", out.display()),
        "--dead-letter".into(),
        path_arg(&work.path("dead.jsonl")),
    ];
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    (Live::start(work, "idle", &args), out)
}

fn count(ad: &str, clicks: u32, s: i64) -> String {
    json!({"ad_id": ad, "clicks": clicks, "updated_at": datetime_millis(gen::BASE_MS + s * 1_000)})
        .to_string()
}

#[test]
fn an_idle_partition_stops_holding_the_watermark_back() {
    let work = Workdir::new();
    let started = Instant::now();
    let (mut run, out) = start_idle_counter(&work, "1s");
    let lines = run.wait_for_lines(&out, 7, Duration::from_secs(12));
    let waited = started.elapsed();
    assert_eq!(
        lines,
        vec![
            count("ad-1", 1, 0),
            count("ad-1", 2, 1),
            count("ad-2", 1, 2),
            count("ad-3", 1, 600),
            // Partition 1 went idle: the watermark is partition 0's, 10:09:55.
            count("ad-1", 1, 300),
            count("ad-1", 0, 301),
            count("ad-2", 0, 302),
        ]
    );
    let finished = run.stop();
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert!(
        finished
            .stderr
            .contains("no longer holds the watermark back"),
        "{}",
        finished.stderr
    );
    assert!(waited < Duration::from_secs(12), "{waited:?}");
}

/// The control: with idleness off, the empty partition holds the watermark at its
/// start, so no expiry fires while the run goes on.
#[test]
fn without_idleness_an_empty_partition_holds_the_timers_back() {
    let work = Workdir::new();
    let (mut run, out) = start_idle_counter(&work, "0");
    let rising = vec![
        count("ad-1", 1, 0),
        count("ad-1", 2, 1),
        count("ad-2", 1, 2),
        count("ad-3", 1, 600),
    ];
    assert_eq!(run.wait_for_lines(&out, 4, Duration::from_secs(12)), rising);
    // Three times the other test's idle timeout, and still nothing more.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(lines_of(&out), rising);
    let finished = run.stop();
    assert_eq!(finished.code, Some(0), "{}", finished.stderr);
    assert_eq!(lines_of(&out), rising, "a stop fires no pending timer");
}

#[test]
fn unreachable_brokers_fail_the_run_naming_them() {
    let work = Workdir::new();
    // Port 1 on loopback: nothing listens, connections are refused.
    let pipeline = echo_pipeline(
        &work,
        "nowhere",
        "type = \"kafka\"\nbrokers = \"127.0.0.1:1\"\ntopic = \"nowhere-in\"\nconnect_timeout = \"2s\"\nbounded = true",
    );
    let started = Instant::now();
    let run = weir(&["run", &pipeline]);
    let took = started.elapsed();
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr
            .contains("kafka topic(s) nowhere-in on 127.0.0.1:1: cannot reach the brokers"),
        "{}",
        run.stderr
    );
    assert!(took < Duration::from_secs(20), "took {took:?}");
}

/// `connect_timeout` is how long the source keeps trying, not a bound rounded down to
/// whole attempts: 7 s of trying, not one 5 s attempt.
#[test]
fn connect_timeout_is_how_long_the_source_keeps_trying() {
    let work = Workdir::new();
    let pipeline = echo_pipeline(
        &work,
        "patient",
        "type = \"kafka\"\nbrokers = \"127.0.0.1:1\"\ntopic = \"nowhere-in\"\nconnect_timeout = \"7s\"\nbounded = true",
    );
    let started = Instant::now();
    let run = weir(&["run", &pipeline]);
    let took = started.elapsed();
    assert_eq!(run.code, Some(1), "{}", run.stderr);
    assert!(
        run.stderr.contains(
            "kafka topic(s) nowhere-in on 127.0.0.1:1: cannot reach the brokers within 7 s"
        ),
        "{}",
        run.stderr
    );
    assert!(
        took >= Duration::from_millis(6_800) && took < Duration::from_secs(15),
        "took {took:?}"
    );
}
