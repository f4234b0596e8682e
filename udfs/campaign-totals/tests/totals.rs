//! The campaign totals through the in-memory host, with exact expected records.

use campaign_totals::CampaignTotals;
use serde_json::json;
use weir_sdk::testing::{Emitted, TestHost};

fn count(host: &mut TestHost<CampaignTotals>, campaign: &str, ad: &str, clicks: u32, at: i64) {
    let value = json!({"ad_id": ad, "clicks": clicks, "updated_at": "-", "campaign_id": campaign});
    host.process("main", campaign, &value, at).unwrap();
}

fn total(campaign: &str, clicks: u64, ads: usize, at: i64, updated_at: &str) -> Emitted {
    Emitted::new(
        json!({"campaign_id": campaign, "clicks": clicks, "ads": ads, "updated_at": updated_at}),
        at,
    )
    .with_key(campaign)
}

#[test]
fn each_ads_count_replaces_its_last_and_the_sum_is_emitted_when_it_changes() {
    let mut h = TestHost::<CampaignTotals>::new().unwrap();
    count(&mut h, "c1", "ad1", 1, 1_000);
    count(&mut h, "c1", "ad2", 2, 2_000);
    count(&mut h, "c2", "ad3", 5, 2_500);
    count(&mut h, "c1", "ad1", 2, 3_000);
    count(&mut h, "c1", "ad2", 1, 4_000); // 2 + 1 = 3: unchanged, nothing emitted
    count(&mut h, "c1", "ad1", 0, 5_000);
    count(&mut h, "c1", "ad2", 0, 6_000);
    assert_eq!(
        h.take_outputs("main"),
        vec![
            total("c1", 1, 1, 1_000, "1970-01-01 00:00:01.000"),
            total("c1", 3, 2, 2_000, "1970-01-01 00:00:02.000"),
            total("c2", 5, 1, 2_500, "1970-01-01 00:00:02.500"),
            total("c1", 4, 2, 3_000, "1970-01-01 00:00:03.000"),
            total("c1", 3, 2, 4_000, "1970-01-01 00:00:04.000"),
            total("c1", 1, 1, 5_000, "1970-01-01 00:00:05.000"),
            total("c1", 0, 0, 6_000, "1970-01-01 00:00:06.000"),
        ]
    );
    assert!(!h.has_state("c1"), "a campaign with no ad left is cleared");
    assert!(h.has_state("c2"));
}
