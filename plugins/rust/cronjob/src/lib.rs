//! cronjob: the kubebuilder book's CronJob controller (the tutorial's
//! `internal/controller/cronjob_controller.go`), ported to kubewasm. For each `CronJob`
//! (`batch.tutorial.kubebuilder.io/v1`, CRD in deploy/crds/examples/cronjob.yaml) it makes a Job
//! from `spec.jobTemplate`, named `<cronjob>-<unix time>` and annotated
//! `batch.tutorial.kubebuilder.io/scheduled-at`, for the latest schedule time missed since the
//! last run (or the CronJob's creation) — unless the CronJob is suspended, the run is older than
//! `startingDeadlineSeconds`, or `concurrencyPolicy: Forbid` finds a Job still running
//! (`Replace` deletes the running Jobs first). It deletes the oldest finished Jobs beyond
//! `successfulJobsHistoryLimit` and `failedJobsHistoryLimit`, reports the running Jobs in
//! `status.active` and the last run in `status.lastScheduleTime`, and is reconciled again at the
//! next schedule time. A schedule that does not parse, or more than 100 missed times, is a
//! terminal error: the original logs it and waits for an edit of the CronJob, which is what a
//! terminal error does.
//!
//! Mode: desired state where it fits, imperative calls where time decides. The desired state is
//! the CronJob's status and the one Job due now: the host applies that Job as the plugin (a
//! controller ownerReference, the plugin's mark) and the status only once the Job exists, so
//! `lastScheduleTime` never names a run whose Job is missing. Which other Jobs exist is time's
//! doing, not the spec's: their names carry the times they ran, and a kept Job cannot be
//! rendered again from a changed `jobTemplate` (a Job's `spec.template` is immutable, so
//! re-applying it would fail). So the plugin cannot list every Job it wants, the Job kind is
//! never pruned, and deleting Jobs is imperative: the finished ones beyond the history limits
//! (oldest start first) and, for `Replace`, the running ones, each on the uid it was judged by.
//!
//! Unlike the original, `lastScheduleTime` is the later of the status's own and the newest Job's
//! `scheduled-at`: the original derives it from the Jobs alone, so once the history limits
//! have deleted every Job it counts from the CronJob's creation again and runs the latest
//! schedule time a second time. Schedules are read in UTC, the plugin's clock.

pub mod schedule;

use jiff::Timestamp;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kubewasm_sdk::client::{self, DeleteOptions, Preconditions, PropagationPolicy};
use kubewasm_sdk::{Desired, DesiredState, Error, Gvk, Prune, Registration, Request, Result, cache, gvk};
use serde::Deserialize;
use serde_json::{Value, json};

/// The annotation on each Job with the schedule time it ran for (RFC 3339).
pub const SCHEDULED_AT: &str = "batch.tutorial.kubebuilder.io/scheduled-at";

fn cronjob_kind() -> Gvk {
    Gvk { group: "batch.tutorial.kubebuilder.io".into(), version: "v1".into(), kind: "CronJob".into() }
}

/// A CronJob as cached, with the fields the controller reads.
#[derive(Deserialize)]
struct CronJob {
    metadata: ObjectMeta,
    spec: Spec,
    #[serde(default)]
    status: Status,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Spec {
    schedule: String,
    starting_deadline_seconds: Option<i64>,
    #[serde(default)]
    concurrency_policy: Option<String>,
    suspend: Option<bool>,
    job_template: Template,
    successful_jobs_history_limit: Option<i32>,
    failed_jobs_history_limit: Option<i32>,
}

/// `spec.jobTemplate`, kept as given: the API server checks it when the Job is made.
#[derive(Deserialize)]
struct Template {
    #[serde(default)]
    metadata: ObjectMeta,
    #[serde(default)]
    spec: Value,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Status {
    last_schedule_time: Option<Time>,
}

/// The CronJob's Jobs, by how they ended.
#[derive(Default)]
struct Jobs {
    active: Vec<Job>,
    successful: Vec<Job>,
    failed: Vec<Job>,
    /// The latest `scheduled-at` among them.
    most_recent: Option<Timestamp>,
}

impl Jobs {
    fn of(jobs: Vec<Job>) -> Self {
        let mut sorted = Jobs::default();
        for job in jobs {
            let annotations = job.metadata.annotations.as_ref();
            let scheduled = annotations.and_then(|a| a.get(SCHEDULED_AT)).and_then(|t| t.parse::<Timestamp>().ok());
            sorted.most_recent = sorted.most_recent.max(scheduled);
            match finished(&job) {
                None => sorted.active.push(job),
                Some("Failed") => sorted.failed.push(job),
                Some(_) => sorted.successful.push(job),
            }
        }
        sorted.active.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        sorted
    }
}

/// `Complete` or `Failed` if the Job has that condition true; `None` while it runs.
fn finished(job: &Job) -> Option<&str> {
    let conditions = job.status.as_ref().and_then(|s| s.conditions.as_ref())?;
    let done = conditions.iter().find(|c| (c.type_ == "Complete" || c.type_ == "Failed") && c.status == "True");
    done.map(|c| c.type_.as_str())
}

/// Deletes `job` (background propagation, as the original), if it is still the Job judged.
fn delete(job: &Job) -> Result<()> {
    let preconditions = Preconditions { uid: job.metadata.uid.clone(), resource_version: None };
    let options = DeleteOptions { preconditions, propagation_policy: Some(PropagationPolicy::Background) };
    let name = job.metadata.name.as_deref().unwrap_or_default();
    client::delete_with(&gvk::<Job>(), job.metadata.namespace.as_deref(), name, &options)
}

/// Deletes the oldest of `finished` (by start time, a Job not started first) beyond `limit`; a
/// failure is logged and left for a later reconcile, as the original does.
fn delete_beyond(mut finished: Vec<Job>, limit: Option<i32>, what: &str) {
    let Some(limit) = limit.map(|l| usize::try_from(l).unwrap_or(0)) else { return };
    finished.sort_by_key(|job| job.status.as_ref().and_then(|s| s.start_time.clone()).map(|t| t.0));
    let beyond = finished.len().saturating_sub(limit);
    for job in &finished[..beyond] {
        let name = job.metadata.name.as_deref().unwrap_or_default();
        match delete(job) {
            Ok(()) => kubewasm_sdk::info!("deleted old {what} job {name}"),
            Err(e) => kubewasm_sdk::warn!("unable to delete old {what} job {name}: {e}"),
        }
    }
}

/// The Job `cronjob` runs for `scheduled` (the host adds the CronJob as its controller).
fn job_for(cronjob: &CronJob, scheduled: Timestamp) -> Value {
    let template = &cronjob.spec.job_template;
    let mut annotations = template.metadata.annotations.clone().unwrap_or_default();
    annotations.insert(SCHEDULED_AT.into(), scheduled.to_string());
    let name = format!("{}-{}", cronjob.metadata.name.as_deref().unwrap_or_default(), scheduled.as_second());
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": cronjob.metadata.namespace,
                     "labels": template.metadata.labels.clone().unwrap_or_default(), "annotations": annotations},
        "spec": template.spec,
    })
}

/// A reference to a running Job, as `ref.GetReference` makes one.
fn reference(job: &Job) -> ObjectReference {
    ObjectReference {
        api_version: Some("batch/v1".into()),
        kind: Some("Job".into()),
        name: job.metadata.name.clone(),
        namespace: job.metadata.namespace.clone(),
        uid: job.metadata.uid.clone(),
        resource_version: job.metadata.resource_version.clone(),
        field_path: None,
    }
}

/// The status: the running Jobs (an empty list rather than none, so that a stale list another
/// writer left is replaced) and the last run.
fn status(active: &[Job], last: Option<Timestamp>) -> Value {
    let active: Vec<_> = active.iter().map(reference).collect();
    let mut status = json!({ "active": active });
    if let Some(last) = last {
        status["lastScheduleTime"] = json!(last.to_string());
    }
    status
}

struct CronJobController;

impl DesiredState for CronJobController {
    fn describe() -> Registration {
        Registration::reconciles_kind(cronjob_kind()).owns::<Job>().prune::<Job>(Prune::Never)
    }

    fn desired(request: Request) -> Result<Option<Desired>> {
        let namespace = request.namespace.as_deref();
        let Some(cronjob) = cache::get_as::<CronJob>(&cronjob_kind(), namespace, &request.name)? else {
            return Ok(None);
        };
        let uid = cronjob.metadata.uid.as_deref().unwrap_or_default();
        let Jobs { mut active, successful, failed, most_recent } =
            Jobs::of(cache::by_index::<Job>("controller-owner", uid)?);
        let mut last = cronjob.status.last_schedule_time.as_ref().map(|t| t.0).max(most_recent);
        let spec = &cronjob.spec;
        delete_beyond(failed, spec.failed_jobs_history_limit, "failed");
        delete_beyond(successful, spec.successful_jobs_history_limit, "successful");
        if spec.suspend == Some(true) {
            return Ok(Some(Desired::new().status(&status(&active, last))));
        }

        let created = cronjob.metadata.creation_timestamp.as_ref().map_or_else(Timestamp::now, |t| t.0);
        let now = Timestamp::now();
        let cron = schedule::parse(&spec.schedule).map_err(|e| Error::terminal(e.to_string()))?;
        let runs = schedule::runs(&cron, last.unwrap_or(created), spec.starting_deadline_seconds, now)
            .map_err(|e| Error::terminal(e.to_string()))?;
        let mut desired = Desired::new().requeue_after(now.duration_until(runs.next).unsigned_abs());
        match runs.missed {
            None => {}
            Some(run) if schedule::too_late(run, spec.starting_deadline_seconds, now) => {
                kubewasm_sdk::info!("missed the starting deadline for the run at {run}, waiting for the next");
            }
            Some(run) if spec.concurrency_policy.as_deref() == Some("Forbid") && !active.is_empty() => {
                kubewasm_sdk::info!("concurrency policy Forbid: the run at {run} waits, {} still active", active.len());
            }
            Some(run) => {
                if spec.concurrency_policy.as_deref() == Some("Replace") {
                    active.drain(..).try_for_each(|job| delete(&job))?;
                }
                desired = desired.child(&job_for(&cronjob, run));
                last = Some(run);
            }
        }
        Ok(Some(desired.status(&status(&active, last))))
    }
}

kubewasm_sdk::export_desired_state!(CronJobController);
