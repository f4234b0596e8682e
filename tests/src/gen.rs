//! Deterministic input generators: out-of-order data, late data and quiet gaps.

use serde_json::{json, Value};

/// A small xorshift generator, so every run of a test sees the same input.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// True with probability `p`.
    pub fn chance(&mut self, p: f64) -> bool {
        (self.next_u64() % 1_000_000) as f64 / 1_000_000.0 < p
    }
}

/// 2026-11-29 10:00:00 UTC.
pub const BASE_MS: i64 = 1_795_946_400_000;

/// A click: ad id and event time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Click {
    pub ad: String,
    pub ts: i64,
}

impl Click {
    pub fn to_json(&self) -> Value {
        json!({"ad_id": self.ad, "clicked_at": crate::datetime_millis(self.ts)})
    }
}

/// `n` clicks over `ads` ads. Time moves forward by up to `step_ms` per click; clicks
/// are out of order by up to `jitter_ms`; with probability `late` a click is older by up
/// to ten minutes (late for a 5 s watermark bound, sometimes by more than a window); with probability `gap` the stream goes
/// quiet for 6 to 20 minutes, long enough for 5-minute windows to drain.
pub fn clicks(
    n: usize,
    ads: u64,
    seed: u64,
    step_ms: u64,
    jitter_ms: u64,
    late: f64,
    gap: f64,
) -> Vec<Click> {
    let mut rng = Rng::new(seed);
    let mut clock = BASE_MS;
    (0..n)
        .map(|_| {
            clock += rng.below(step_ms + 1) as i64;
            if rng.chance(gap) {
                clock += 360_000 + rng.below(840_000) as i64;
            }
            let mut ts = clock - rng.below(jitter_ms + 1) as i64;
            if rng.chance(late) {
                // Late for the watermark, and sometimes older than a whole window, so
                // that its timer is already behind the watermark when it is registered.
                ts -= 5_000 + rng.below(595_000) as i64;
            }
            Click {
                ad: format!("ad-{}", rng.below(ads)),
                ts,
            }
        })
        .collect()
}

/// A purchase event of an order.
#[derive(Debug, Clone, PartialEq)]
pub struct Purchase {
    pub order: u64,
    pub item: String,
    /// The cost as written in the record: a string, or a JSON number.
    pub cost: Value,
    pub ts: i64,
}

impl Purchase {
    pub fn to_json(&self) -> Value {
        json!({"orderId": self.order, "item": self.item, "cost": self.cost, "timestamp": crate::datetime_millis(self.ts)})
    }
}

/// `orders` orders with 1 to 5 events each, interleaved in time. Events of an order are
/// 100 to 900 ms apart, sometimes (probability `pause`) 1.5 to 3 s apart so the order
/// times out and starts again; with probability `swap` two neighbouring events are out
/// of order.
pub fn purchases(orders: u64, seed: u64, pause: f64, swap: f64) -> Vec<Purchase> {
    const ITEMS: [&str; 8] = [
        "tea", "cake", "scone", "jam", "coffee", "bagel", "lemon", "water",
    ];
    let mut rng = Rng::new(seed);
    let mut events = Vec::new();
    for order in 0..orders {
        let mut ts = BASE_MS + (order as i64) * 150 + rng.below(400) as i64;
        for _ in 0..=rng.below(5) {
            let cents = 1 + rng.below(2_000);
            let cost = if rng.chance(0.1) {
                serde_json::from_str(&format!("{}.{:02}", cents / 100, cents % 100))
                    .expect("a JSON number")
            } else {
                Value::String(format!("{}.{:02}", cents / 100, cents % 100))
            };
            let item = ITEMS[rng.below(ITEMS.len() as u64) as usize].to_string();
            events.push(Purchase {
                order: 17 + order,
                item,
                cost,
                ts,
            });
            ts += if rng.chance(pause) {
                1_500 + rng.below(1_500) as i64
            } else {
                100 + rng.below(800) as i64
            };
        }
    }
    events.sort_by_key(|e| e.ts);
    for i in 1..events.len() {
        if rng.chance(swap) {
            events.swap(i - 1, i);
        }
    }
    events
}

/// Taxi rides (seed 001) over a few hours and four zones, in order but for some late
/// ones, within the hour of allowed lateness, that correct windows already published.
pub fn rides(n: usize, seed: u64) -> Vec<Value> {
    let mut rng = Rng::new(seed);
    let mut clock = 1_761_955_200_000i64;
    (0..n)
        .map(|_| {
            clock += rng.below(20_000) as i64;
            let mut ts = clock;
            if rng.chance(0.05) {
                ts -= 600_000 + rng.below(1_800_000) as i64; // late, within the 1 h lateness
            }
            let cents = 300 + rng.below(9_000);
            let zone = [79, 132, 161, 236][rng.below(4) as usize];
            json!({
                "PULocationID": zone,
                "DOLocationID": 1,
                "trip_distance": 1.5,
                "total_amount": format!("{}.{:02}", cents / 100, cents % 100),
                "tpep_pickup_datetime": ts,
            })
        })
        .collect()
}
