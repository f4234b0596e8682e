//! Deploying a UDF version to a group pipeline: into the tasks running here, and through
//! the group's version log to the other members.

use crate::steering::Steering;
use std::sync::Arc;
use weir_control::{prepare, swap_into, Deployed, Prepared, Refusal};
use weir_run::{RunState, SWAP_WAIT};

/// Deploys component `bytes` to a group pipeline: into every task running here, then
/// to the group's version log, which the other members follow.
pub fn swap_in_group(
    steering: &Steering,
    bytes: Arc<Vec<u8>>,
    number: u32,
) -> Result<Deployed, Refusal> {
    let deployed = swap_tasks(steering, Arc::clone(&bytes), number)?;
    steering.publish_version(number, &bytes).map_err(|e| {
        Refusal::NotPublished(format!(
            "version {number} runs here, but could not be sent to the group: {e:#}"
        ))
    })?;
    Ok(deployed)
}

/// Puts component `bytes` into every task of a group pipeline running here, and makes
/// it the version the tasks this process gets later start with.
pub fn swap_tasks(
    steering: &Steering,
    bytes: Arc<Vec<u8>>,
    number: u32,
) -> Result<Deployed, Refusal> {
    let (spec, probation_calls) = (&steering.spec, steering.probation_calls);
    let started = std::time::Instant::now();
    // A component that cannot work is refused before any task is touched.
    let Prepared { identity, .. } = prepare(spec, &bytes)?;
    let prepare_ms = started.elapsed().as_secs_f64() * 1e3;
    steering.set_udf(Arc::clone(&bytes), identity.sha256.clone());
    let mut pause_ms: f64 = 0.0;
    for (partition, control) in steering.task_controls() {
        // A task still restoring was started with the version before: wait until it runs.
        let deadline = std::time::Instant::now() + SWAP_WAIT;
        while control.status().state == RunState::Starting && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        if control.status().state != RunState::Running {
            continue; // stopping: it moves, and starts elsewhere or here with the new version
        }
        let deployed = swap_into(
            spec,
            &control,
            true,
            Arc::clone(&bytes),
            number,
            probation_calls,
        )
        .map_err(|r| r.context(&format!("task {partition}")))?;
        pause_ms = pause_ms.max(deployed.swap_pause_ms);
    }
    Ok(Deployed {
        version: number,
        sha256: identity.sha256,
        prepare_ms,
        swap_pause_ms: pause_ms,
    })
}
