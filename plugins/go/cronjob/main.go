// cronjob: the kubebuilder book's CronJob controller, the Go twin of plugins/rust/cronjob (same
// CRD, deploy/crds/examples/cronjob.yaml, the same behaviour and the same split, whose reasons
// that port's doc gives): the Job due now and the CronJob's status as the desired state, the
// Job kind never pruned, and deleting Jobs (history beyond the limits, Replace's running Jobs)
// imperative. Schedules are parsed by robfig/cron/v3's ParseStandard, the parser the book uses,
// and read in UTC, the plugin's clock.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/robfig/cron/v3"
	"kubewasm.dev/sdk"
)

// scheduledAt is the annotation on each Job with the schedule time it ran for (RFC 3339).
const scheduledAt = "batch.tutorial.kubebuilder.io/scheduled-at"

// maxMissedStarts bounds the missed start times counted, as the original does, against a clock
// off by years eating the controller's CPU.
const maxMissedStarts = 100

var (
	cronJobKind = kubewasm.Kind{APIVersion: "batch.tutorial.kubebuilder.io/v1", Kind: "CronJob"}
	jobKind     = kubewasm.Kind{APIVersion: "batch/v1", Kind: "Job"}
)

// The kinds this plugin reads, with the fields it uses.
type (
	CronJob struct {
		kubewasm.TypeMeta
		kubewasm.ObjectMeta `json:"metadata"`
		Spec                struct {
			Schedule                   string `json:"schedule"`
			StartingDeadlineSeconds    *int64 `json:"startingDeadlineSeconds"`
			ConcurrencyPolicy          string `json:"concurrencyPolicy"`
			Suspend                    bool   `json:"suspend"`
			SuccessfulJobsHistoryLimit *int32 `json:"successfulJobsHistoryLimit"`
			FailedJobsHistoryLimit     *int32 `json:"failedJobsHistoryLimit"`
			JobTemplate                struct {
				Metadata struct {
					Labels      map[string]string `json:"labels"`
					Annotations map[string]string `json:"annotations"`
				} `json:"metadata"`
				Spec json.RawMessage `json:"spec"`
			} `json:"jobTemplate"`
		} `json:"spec"`
		Status struct {
			LastScheduleTime *time.Time `json:"lastScheduleTime"`
		} `json:"status"`
	}
	Job struct {
		kubewasm.TypeMeta
		kubewasm.ObjectMeta `json:"metadata"`
		Status              struct {
			StartTime  *time.Time `json:"startTime"`
			Conditions []struct {
				Type   string `json:"type"`
				Status string `json:"status"`
			} `json:"conditions"`
		} `json:"status"`
	}
)

// finished is "Complete" or "Failed" if job has that condition true; "" while it runs.
func finished(job *Job) string {
	for _, c := range job.Status.Conditions {
		if (c.Type == "Complete" || c.Type == "Failed") && c.Status == "True" {
			return c.Type
		}
	}
	return ""
}

// deleteJob deletes job (background propagation, as the original), if it is still the Job judged.
func deleteJob(job *Job) error {
	return kubewasm.Delete(jobKind, job.Namespace, job.Name, kubewasm.Preconditions{UID: job.UID}, kubewasm.Background)
}

// deleteBeyond deletes the oldest of done (by start time, a Job not started first) beyond
// limit; a failure is logged and left for a later reconcile, as the original does.
func deleteBeyond(done []*Job, limit *int32, what string) {
	if limit == nil {
		return
	}
	sort.SliceStable(done, func(i, j int) bool {
		if done[i].Status.StartTime == nil {
			return done[j].Status.StartTime != nil
		}
		return done[j].Status.StartTime != nil && done[i].Status.StartTime.Before(*done[j].Status.StartTime)
	})
	for i := 0; i < len(done)-int(*limit); i++ {
		if err := deleteJob(done[i]); err != nil {
			kubewasm.Logf("unable to delete old %s job %s: %v", what, done[i].Name, err)
		} else {
			kubewasm.Logf("deleted old %s job %s", what, done[i].Name)
		}
	}
}

// nextSchedule is the latest schedule time missed since the earliest time considered (zero if
// none) and the first after now: the original's getNextSchedule.
func nextSchedule(cj *CronJob, since, now time.Time) (missed, next time.Time, err error) {
	sched, err := cron.ParseStandard(cj.Spec.Schedule)
	if err != nil {
		return time.Time{}, time.Time{}, fmt.Errorf("unparseable schedule %q: %w", cj.Spec.Schedule, err)
	}
	earliest := since
	if d := cj.Spec.StartingDeadlineSeconds; d != nil && now.Add(-time.Duration(*d)*time.Second).After(earliest) {
		earliest = now.Add(-time.Duration(*d) * time.Second)
	}
	if earliest.After(now) {
		return time.Time{}, sched.Next(now), nil
	}
	starts := 0
	for t := sched.Next(earliest); !t.IsZero() && !t.After(now); t = sched.Next(t) {
		missed = t
		if starts++; starts > maxMissedStarts {
			return time.Time{}, time.Time{}, errors.New("too many missed start times (> 100): set or decrease .spec.startingDeadlineSeconds or check clock skew")
		}
	}
	return missed, sched.Next(now), nil
}

// jobFor is the Job cj runs for scheduled (the host adds the CronJob as its controller).
func jobFor(cj *CronJob, scheduled time.Time) map[string]any {
	annotations := map[string]string{}
	for k, v := range cj.Spec.JobTemplate.Metadata.Annotations {
		annotations[k] = v
	}
	annotations[scheduledAt] = scheduled.UTC().Format(time.RFC3339)
	metadata := map[string]any{
		"name": fmt.Sprintf("%s-%d", cj.Name, scheduled.Unix()), "namespace": cj.Namespace,
		"labels": cj.Spec.JobTemplate.Metadata.Labels, "annotations": annotations,
	}
	return map[string]any{"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": cj.Spec.JobTemplate.Spec}
}

// status is the CronJob's status: the running Jobs (an empty list rather than none, so that a
// stale list another writer left is replaced) and the last run.
func status(active []*Job, last *time.Time) map[string]any {
	refs := []map[string]any{}
	for _, job := range active {
		refs = append(refs, map[string]any{"apiVersion": "batch/v1", "kind": "Job", "name": job.Name,
			"namespace": job.Namespace, "uid": job.UID, "resourceVersion": job.ResourceVersion})
	}
	s := map[string]any{"active": refs}
	if last != nil {
		s["lastScheduleTime"] = last.UTC().Format(time.RFC3339)
	}
	return s
}

type cronJobController struct{}

func (cronJobController) Describe() *kubewasm.Registration {
	return kubewasm.For(cronJobKind).Owns(jobKind).Pruned(jobKind, kubewasm.PruneNever)
}

func (cronJobController) Reconcile(_ context.Context, req kubewasm.Request) (kubewasm.Result, error) {
	cj, err := kubewasm.Get[CronJob](cronJobKind, req.Namespace, req.Name)
	if err != nil || cj == nil {
		return kubewasm.Result{}, err
	}
	jobs, err := kubewasm.ByIndex[Job](jobKind, "controller-owner", cj.UID)
	if err != nil {
		return kubewasm.Result{}, err
	}
	var active, successful, failed []*Job
	last := cj.Status.LastScheduleTime
	for i := range jobs {
		job := &jobs[i]
		switch finished(job) {
		case "":
			active = append(active, job)
		case "Failed":
			failed = append(failed, job)
		default:
			successful = append(successful, job)
		}
		if t, err := time.Parse(time.RFC3339, job.Annotations[scheduledAt]); err == nil && (last == nil || last.Before(t)) {
			last = &t
		}
	}
	sort.Slice(active, func(i, j int) bool { return active[i].Name < active[j].Name })
	deleteBeyond(failed, cj.Spec.FailedJobsHistoryLimit, "failed")
	deleteBeyond(successful, cj.Spec.SuccessfulJobsHistoryLimit, "successful")
	if cj.Spec.Suspend {
		return kubewasm.Result{Desired: &kubewasm.Desired{Status: status(active, last)}}, nil
	}

	now := time.Now().UTC()
	since, _ := time.Parse(time.RFC3339, cj.CreationTimestamp)
	if last != nil {
		since = *last
	}
	missed, next, err := nextSchedule(cj, since, now)
	if err != nil {
		return kubewasm.Result{}, kubewasm.Terminal(err)
	}
	desired := &kubewasm.Desired{}
	deadline := cj.Spec.StartingDeadlineSeconds
	switch {
	case missed.IsZero():
	case deadline != nil && missed.Add(time.Duration(*deadline)*time.Second).Before(now):
		kubewasm.Logf("missed the starting deadline for the run at %s, waiting for the next", missed)
	case cj.Spec.ConcurrencyPolicy == "Forbid" && len(active) > 0:
		kubewasm.Logf("concurrency policy Forbid: the run at %s waits, %d still active", missed, len(active))
	default:
		if cj.Spec.ConcurrencyPolicy == "Replace" {
			for _, job := range active {
				if err := deleteJob(job); err != nil {
					return kubewasm.Result{}, err
				}
			}
			active = nil
		}
		desired.Children = []any{jobFor(cj, missed)}
		last = &missed
	}
	desired.Status = status(active, last)
	return kubewasm.Result{Desired: desired, RequeueAfter: next.Sub(now)}, nil
}

func init() { kubewasm.Register(cronJobController{}) }

func main() {}
