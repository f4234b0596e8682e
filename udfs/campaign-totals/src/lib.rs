//! Per campaign, the sum of its ads' current click counts, emitted only when it changes:
//! the second stage of `examples/ad-campaigns`, after seed 000's change-only count per
//! ad (`change-only-counter` with `carry = "campaign_id"`).
//!
//! Input: the per-ad counts `{"ad_id": "...", "clicks": N, "updated_at": "...",
//! "campaign_id": "..."}`, keyed by `campaign_id`, each at the event time the first stage
//! gave it. Each count replaces the ad's previous one (an upsert stream).
//! Output: `{"campaign_id": ..., "clicks": SUM, "ads": A, "updated_at": "..."}` keyed by
//! the campaign, at the count's event time, whenever the sum changes: `ads` is how many
//! of its ads have clicks now. An ad whose count falls to 0 leaves the campaign's state,
//! and a campaign with no ad left is cleared (after emitting its 0).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use weir_sdk::prelude::*;
use weir_sdk::time::format_millis;

/// One ad's count, as the first stage emits it.
#[derive(Deserialize)]
struct AdCount<'a> {
    #[serde(borrow)]
    ad_id: &'a str,
    clicks: u32,
}

/// A campaign's ads with clicks, and the sum last emitted.
#[derive(Serialize, Deserialize, Default)]
struct Campaign {
    ads: BTreeMap<String, u32>,
    emitted: u64,
}

#[derive(Serialize)]
struct CampaignTotal {
    campaign_id: String,
    clicks: u64,
    ads: usize,
    updated_at: String,
}

/// The process function; see the crate docs.
pub struct CampaignTotals {
    campaign: ValueState<Campaign>,
    out: Output<CampaignTotal>,
}

impl ProcessFunction for CampaignTotals {
    fn init(ctx: &mut InitContext) -> Result<Self> {
        Ok(CampaignTotals {
            campaign: ctx.value_state("campaign")?,
            out: ctx.main_output()?,
        })
    }

    fn process_element(&mut self, ctx: &mut Context, element: &Element) -> Result<()> {
        let count: AdCount = element.json()?;
        let at = element.timestamp();
        self.campaign.modify(|state| {
            let campaign = state.get_or_insert_with(Campaign::default);
            match count.clicks {
                0 => campaign.ads.remove(count.ad_id),
                n => campaign.ads.insert(count.ad_id.to_owned(), n),
            };
            let sum: u64 = campaign.ads.values().map(|&n| u64::from(n)).sum();
            if sum != campaign.emitted {
                campaign.emitted = sum;
                let total = CampaignTotal {
                    campaign_id: ctx.current_key_str()?.to_owned(),
                    clicks: sum,
                    ads: campaign.ads.len(),
                    updated_at: format_millis(at),
                };
                self.out
                    .emit_record(Record::new(total).with_key(ctx.current_key()))?;
            }
            if campaign.ads.is_empty() {
                *state = None;
            }
            Ok(())
        })
    }
}

weir_sdk::export!(CampaignTotals);
