//! The kubebuilder book's CronJob controller's documented behaviour, ported to kubewasm
//! (plugins/rust, python, js and go/cronjob: each test runs every port), against a real
//! kube-apiserver + etcd: a missed schedule's Job made with its annotation and owner and reported
//! in the status, history limits, the concurrency policies, suspend and the starting deadline.
//!
//! No test waits for a schedule: each CronJob's schedule fires once a year, at a whole minute
//! in the past, and the test says when the CronJob last ran — its `status.lastScheduleTime`, or
//! a Job of the CronJob's it makes itself with the `scheduled-at` annotation the plugin reads, as
//! the book's own tests do. No controller-manager runs Jobs here either, so the test writes a
//! Job's status itself, as the Job controller would. Where a test checks that nothing was made,
//! it first waits for the status that shows the plugin saw the Job that made the schedule
//! missed: the host applies a reconcile's children before its status, so a Job that reconcile
//! made would exist by then.

use crate::common;

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::jiff::{SignedDuration, Timestamp, tz::TimeZone};
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::GroupVersionKind;
use kubewasm_host::app::App;
use kubewasm_testenv::ControlPlane;
use serde_json::{Value, json};

use common::eventually;
use common::examples::example_crd;

const CONVERGE: Duration = Duration::from_secs(60);

/// The annotation with the schedule time a Job ran for.
const SCHEDULED_AT: &str = "batch.tutorial.kubebuilder.io/scheduled-at";

/// The ports: the built component of each language.
const PORTS: [&str; 4] = ["cronjob.wasm", "cronjob_go.wasm", "cronjob_py.wasm", "cronjob_js.wasm"];

/// The CronJob CRD (deploy/crds/examples/cronjob.yaml) installed, and the API of CronJobs in `ns`.
async fn cronjobs(cp: &ControlPlane, client: &kube::Client, ns: &str) -> Api<DynamicObject> {
    let kind = GroupVersionKind::gvk("batch.tutorial.kubebuilder.io", "v1", "CronJob");
    example_crd(cp, client, "cronjob.yaml", "cronjobs.batch.tutorial.kubebuilder.io", kind, ns).await
}

/// A host serving the CronJob port `built` for namespace `ns` only.
async fn cronjob_controller(client: &kube::Client, ns: &str, built: &str) -> App {
    let config = format!("grants: {{namespaces: {{names: [{ns}]}}}}\n");
    let file = common::fixture_file("cronjob", built, &config);
    let mut app = common::app(client);
    app.add_plugin(&file).await.unwrap();
    eventually("readiness", CONVERGE, || async { app.readiness().is_ready().then_some(()) }).await;
    app
}

/// One port's world: its namespace, the CronJob and Job APIs there, and its host.
struct World {
    cronjobs: Api<DynamicObject>,
    jobs: Api<Job>,
    app: App,
}

impl World {
    async fn new(cp: &ControlPlane, client: &kube::Client, prefix: &str, built: &str) -> Self {
        eprintln!("cronjob port {built}");
        let ns = cp.namespace(prefix).await;
        let cronjobs = cronjobs(cp, client, &ns).await;
        let app = cronjob_controller(client, &ns, built).await;
        Self { cronjobs, jobs: Api::namespaced(client.clone(), &ns), app }
    }

    /// Creates CronJob `name` with `spec` (its jobTemplate added); returns it as stored.
    async fn cronjob(&self, name: &str, spec: Value) -> DynamicObject {
        let mut spec = spec;
        spec["jobTemplate"] = json!({
            "metadata": {"labels": {"team": "tutorial"}, "annotations": {"note": "from the template"}},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "hello", "image": "busybox", "command": ["date"]}]}}},
        });
        let object = json!({"apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob",
            "metadata": {"name": name}, "spec": spec});
        self.cronjobs.create(&PostParams::default(), &serde_json::from_value(object).unwrap()).await.unwrap()
    }

    /// Makes a Job of `cronjob` as the plugin makes them (its mark, the CronJob as controller,
    /// the `scheduled-at` annotation) for the run at `scheduled`; returns its name.
    async fn job_of(&self, cronjob: &DynamicObject, scheduled: Timestamp) -> String {
        let owner = cronjob.metadata.name.as_deref().unwrap();
        let name = job_name(owner, scheduled);
        let job = json!({"metadata": {"name": name,
                "labels": {"kubewasm.dev/plugin": "cronjob"},
                "annotations": {SCHEDULED_AT: scheduled.to_string()},
                "ownerReferences": [{"apiVersion": "batch.tutorial.kubebuilder.io/v1", "kind": "CronJob",
                    "name": owner, "uid": cronjob.metadata.uid, "controller": true}]},
            "spec": {"template": {"spec": {"restartPolicy": "Never",
                "containers": [{"name": "hello", "image": "busybox"}]}}}});
        self.jobs.create(&PostParams::default(), &serde_json::from_value(job).unwrap()).await.unwrap();
        name
    }

    /// Writes Job `name`'s status as the Job controller would once it ended: `Complete` (or
    /// `Failed`), having started at `started`.
    async fn finish(&self, name: &str, complete: bool, started: Timestamp) {
        let ended = (started + SignedDuration::from_secs(30)).to_string();
        let condition = |kind: &str| json!({"type": kind, "status": "True", "lastTransitionTime": ended});
        let status = if complete {
            json!({"startTime": started.to_string(), "completionTime": ended, "succeeded": 1,
                   "conditions": [condition("SuccessCriteriaMet"), condition("Complete")]})
        } else {
            json!({"startTime": started.to_string(), "failed": 1,
                   "conditions": [condition("FailureTarget"), condition("Failed")]})
        };
        let patch = Patch::Merge(json!({ "status": status }));
        self.jobs.patch_status(name, &PatchParams::default(), &patch).await.unwrap();
    }

    /// Waits until Job `name` exists (`what` it is, for the failure).
    async fn made(&self, what: &str, name: &str) {
        eventually(what, CONVERGE, || async { self.jobs.get_opt(name).await.unwrap().map(|_| ()) }).await;
    }

    /// The names of the Jobs in the namespace.
    async fn job_names(&self) -> BTreeSet<String> {
        let jobs = self.jobs.list(&ListParams::default()).await.unwrap().items;
        jobs.into_iter().filter_map(|j| j.metadata.name).collect()
    }

    /// CronJob `name`'s status once it reports exactly the active Jobs `active` (by name) and
    /// `last` as its last run.
    async fn reported(&self, name: &str, active: &[&str], last: Timestamp) -> Value {
        let what = format!("{name}'s status: active {active:?}, last run {last}");
        eventually(&what, CONVERGE, || async {
            let status = self.cronjobs.get(name).await.unwrap().data.get("status").cloned()?;
            let listed: Vec<&str> = status["active"].as_array()?.iter().filter_map(|r| r["name"].as_str()).collect();
            let ran = status["lastScheduleTime"].as_str()?.parse::<Timestamp>().ok()?;
            (listed == active && ran == last).then_some(status)
        })
        .await
    }

    async fn shut_down(self) {
        assert!(self.app.shut_down(Duration::from_secs(10)).await);
    }
}

/// A whole minute `minutes` before now.
fn minutes_ago(minutes: i64) -> Timestamp {
    let now = Timestamp::now().as_second();
    Timestamp::from_second(now - now.rem_euclid(60) - minutes * 60).unwrap()
}

/// A schedule that fires once a year, at `at` (UTC).
fn yearly_at(at: Timestamp) -> String {
    let t = at.to_zoned(TimeZone::UTC);
    format!("{} {} {} {} *", t.minute(), t.hour(), t.day(), t.month())
}

/// The name the plugin gives the Job of `cronjob` for the run at `scheduled`.
fn job_name(cronjob: &str, scheduled: Timestamp) -> String {
    format!("{cronjob}-{}", scheduled.as_second())
}

fn names(list: &[&str]) -> BTreeSet<String> {
    list.iter().map(|n| (*n).to_owned()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_schedule_creates_its_job_with_the_annotation_and_owner_and_reports_it_active() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for built in PORTS {
        let world = World::new(&cp, &client, "cronjob-missed", built).await;
        let (run, before) = (minutes_ago(60), minutes_ago(120));
        let cronjob = world.cronjob("report", json!({"schedule": yearly_at(run)})).await;
        let ran_before = Patch::Merge(json!({"status": {"lastScheduleTime": before.to_string()}}));
        world.cronjobs.patch_status("report", &PatchParams::default(), &ran_before).await.unwrap();

        let name = job_name("report", run);
        let job =
            eventually("the missed run's Job", CONVERGE, || async { world.jobs.get_opt(&name).await.unwrap() }).await;
        let annotations = job.metadata.annotations.clone().unwrap_or_default();
        assert_eq!(annotations.get(SCHEDULED_AT).map(String::as_str), Some(run.to_string().as_str()));
        assert_eq!(annotations.get("note").map(String::as_str), Some("from the template"));
        assert_eq!(job.metadata.labels.unwrap_or_default().get("team").map(String::as_str), Some("tutorial"));
        let owner = &job.metadata.owner_references.as_ref().expect("controlled by the CronJob")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str(), owner.controller),
            ("CronJob", cronjob.metadata.uid.as_deref().unwrap(), Some(true))
        );
        let containers = job.spec.unwrap().template.spec.unwrap().containers;
        assert_eq!(containers[0].command, Some(vec!["date".to_owned()]), "the Job runs the jobTemplate");

        let status = world.reported("report", &[&name], run).await;
        assert_eq!(status["active"][0]["uid"].as_str(), job.metadata.uid.as_deref());
        assert_eq!(
            (status["active"][0]["kind"].as_str(), status["active"][0]["apiVersion"].as_str()),
            (Some("Job"), Some("batch/v1"))
        );
        world.finish(&name, true, run).await;
        world.reported("report", &[], run).await;
        assert_eq!(world.job_names().await, names(&[&name]), "one run, one Job");
        world.shut_down().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn history_limits_delete_the_oldest_finished_jobs_beyond_each_limit() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for built in PORTS {
        let world = World::new(&cp, &client, "cronjob-history", built).await;
        // Every Job ran after the schedule's last time, so no run is due.
        let spec = json!({"schedule": yearly_at(minutes_ago(600)), "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 1});
        let cronjob = world.cronjob("history", spec).await;
        let mut made = Vec::new();
        for (hours, complete) in [(5, true), (4, false), (3, true), (2, false), (1, true)] {
            let scheduled = minutes_ago(hours * 60);
            let name = world.job_of(&cronjob, scheduled).await;
            world.finish(&name, complete, scheduled).await;
            made.push(name);
        }
        let running_since = minutes_ago(30);
        let running = world.job_of(&cronjob, running_since).await;
        // Kept: the newest failed (2 h), the newest successful (1 h), and the one still running.
        let kept = names(&[&made[3], &made[4], &running]);
        eventually("only the newest finished Jobs kept", CONVERGE, || async {
            (world.job_names().await == kept).then_some(())
        })
        .await;
        world.reported("history", &[&running], running_since).await;
        assert_eq!(world.job_names().await, kept, "nothing more deleted");
        world.shut_down().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_policy_forbid_creates_no_job_while_one_is_active() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for built in PORTS {
        let world = World::new(&cp, &client, "cronjob-forbid", built).await;
        let (run, before) = (minutes_ago(60), minutes_ago(120));
        let spec = json!({"schedule": yearly_at(run), "concurrencyPolicy": "Forbid"});
        let cronjob = world.cronjob("forbid", spec).await;
        let running = world.job_of(&cronjob, before).await;

        world.reported("forbid", &[&running], before).await;
        assert_eq!(world.job_names().await, names(&[&running]), "no second Job beside the running one");
        world.finish(&running, true, before).await;
        let next = job_name("forbid", run);
        world.made("the run once none is active", &next).await;
        world.shut_down().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrency_policy_replace_deletes_the_active_job_and_creates_the_new_one() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for built in PORTS {
        let world = World::new(&cp, &client, "cronjob-replace", built).await;
        let (run, before) = (minutes_ago(60), minutes_ago(120));
        let spec = json!({"schedule": yearly_at(run), "concurrencyPolicy": "Replace"});
        let cronjob = world.cronjob("replace", spec).await;
        let running = world.job_of(&cronjob, before).await;

        let next = job_name("replace", run);
        eventually("the running Job replaced by the new run's", CONVERGE, || async {
            (world.job_names().await == names(&[&next])).then_some(())
        })
        .await;
        world.reported("replace", &[&next], run).await;
        assert!(world.jobs.get_opt(&running).await.unwrap().is_none(), "{running} is deleted");
        world.shut_down().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_suspended_cronjob_creates_no_job_until_it_is_resumed() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for built in PORTS {
        let world = World::new(&cp, &client, "cronjob-suspend", built).await;
        let (run, before) = (minutes_ago(60), minutes_ago(120));
        let cronjob = world.cronjob("paused", json!({"schedule": yearly_at(run), "suspend": true})).await;
        let earlier = world.job_of(&cronjob, before).await;
        world.finish(&earlier, true, before).await;

        world.reported("paused", &[], before).await;
        assert_eq!(world.job_names().await, names(&[&earlier]), "no Job while suspended");
        let resume = Patch::Merge(json!({"spec": {"suspend": false}}));
        world.cronjobs.patch("paused", &PatchParams::default(), &resume).await.unwrap();
        let next = job_name("paused", run);
        world.made("the missed run once resumed", &next).await;
        world.shut_down().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missed_schedule_older_than_the_starting_deadline_is_skipped() {
    let Some(cp) = ControlPlane::shared() else { return };
    let client = cp.admin_client().await;
    for built in PORTS {
        let world = World::new(&cp, &client, "cronjob-deadline", built).await;
        let (run, before) = (minutes_ago(60), minutes_ago(120));
        let spec = json!({"schedule": yearly_at(run), "startingDeadlineSeconds": 600});
        let cronjob = world.cronjob("late", spec).await;
        let earlier = world.job_of(&cronjob, before).await;
        world.finish(&earlier, true, before).await;

        world.reported("late", &[], before).await;
        assert_eq!(world.job_names().await, names(&[&earlier]), "the run an hour ago is past a 10-minute deadline");
        let longer = Patch::Merge(json!({"spec": {"startingDeadlineSeconds": 7200}}));
        world.cronjobs.patch("late", &PatchParams::default(), &longer).await.unwrap();
        let next = job_name("late", run);
        world.made("the run within a 2-hour deadline", &next).await;
        world.shut_down().await;
    }
}
