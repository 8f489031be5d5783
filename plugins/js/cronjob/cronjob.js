// cronjob: the kubebuilder book's CronJob controller, the JavaScript twin of
// plugins/rust/cronjob (same CRD, deploy/crds/examples/cronjob.yaml, the same behaviour and the
// same split, whose reasons that port's doc gives): the Job due now and the CronJob's status as
// the desired state, the Job kind never pruned, and deleting Jobs (history beyond the limits,
// `Replace`'s running Jobs) imperative. Schedules are parsed by croner (pinned in this
// directory's package.json and lock, bundled), five fields or a descriptor, and read in UTC.

import { Cron } from 'croner';
import { Kind, Registration, TerminalError, cache, client, desired, log, reconciler } from '../../sdk/js/kubewasm.js';

const CRONJOB = new Kind('batch.tutorial.kubebuilder.io/v1', 'CronJob');
const JOB = new Kind('batch/v1', 'Job');
const SCHEDULED_AT = 'batch.tutorial.kubebuilder.io/scheduled-at';
/** The bound on missed start times, as the original's, against a clock off by years. */
const MAX_MISSED_STARTS = 100;

/** Milliseconds since the epoch of an RFC 3339 time; undefined for none or a bad one. */
const parseTime = (text) => {
  const ms = text ? Date.parse(text) : NaN;
  return Number.isNaN(ms) ? undefined : ms;
};
/** RFC 3339 in UTC, whole seconds, as Go's `time.RFC3339` writes it. */
const rfc3339 = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, 'Z');

/** `Complete` or `Failed` if the Job has that condition true; undefined while it runs. */
const finished = (job) => (job.status?.conditions ?? [])
  .find((c) => (c.type === 'Complete' || c.type === 'Failed') && c.status === 'True')?.type;

/** Deletes `job` (background propagation, as the original), if it is still the Job judged. */
const remove = (job) => client.delete(JOB, job.metadata.name, job.metadata.namespace,
  { preconditions: { uid: job.metadata.uid }, propagationPolicy: 'background' });

/** Deletes the oldest of `done` (by start time, a Job not started first) beyond `limit`; a
 * failure is logged and left for a later reconcile, as the original does. */
function deleteBeyond(done, limit, what) {
  if (limit === undefined || limit === null) return;
  const started = (job) => parseTime(job.status?.startTime) ?? -Infinity;
  done.sort((a, b) => started(a) - started(b));
  for (const job of done.slice(0, Math.max(0, done.length - limit))) {
    try {
      remove(job);
      log.info(`deleted old ${what} job ${job.metadata.name}`);
    } catch (e) {
      log.warn(`unable to delete old ${what} job ${job.metadata.name}: ${e.message}`);
    }
  }
}

/** The latest schedule time missed since the earliest time considered (undefined if none) and
 * the first after now, in milliseconds: the original's `getNextSchedule`. */
function nextSchedule(spec, since, now) {
  let cron;
  try {
    cron = new Cron(spec.schedule, { utcOffset: 0, mode: '5-part' });
  } catch (e) {
    throw new TerminalError(`unparseable schedule ${JSON.stringify(spec.schedule)}: ${e.message}`);
  }
  const following = (ms) => cron.nextRun(new Date(ms))?.getTime() ?? Infinity;
  let earliest = since;
  if (spec.startingDeadlineSeconds !== undefined) {
    earliest = Math.max(earliest, now - spec.startingDeadlineSeconds * 1000);
  }
  if (earliest > now) return { next: following(now) };
  let missed;
  let starts = 0;
  for (let t = following(earliest); t <= now; t = following(t)) {
    missed = t;
    if (++starts > MAX_MISSED_STARTS) {
      throw new TerminalError('too many missed start times (> 100): set or decrease .spec.startingDeadlineSeconds or check clock skew');
    }
  }
  return { missed, next: following(now) };
}

/** The Job `cronjob` runs at `scheduled` (ms; the host adds the CronJob as its controller). */
const jobFor = (cronjob, scheduled) => {
  const meta = cronjob.spec.jobTemplate.metadata ?? {};
  return {
    apiVersion: 'batch/v1', kind: 'Job',
    metadata: {
      name: `${cronjob.metadata.name}-${Math.floor(scheduled / 1000)}`, namespace: cronjob.metadata.namespace,
      labels: meta.labels ?? {}, annotations: { ...meta.annotations, [SCHEDULED_AT]: rfc3339(scheduled) },
    },
    spec: cronjob.spec.jobTemplate.spec,
  };
};

/** The running Jobs (an empty list rather than none, so that a stale list another writer left
 * is replaced) and the last run. */
const status = (active, last) => ({
  active: active.map(({ metadata: m }) => ({
    apiVersion: 'batch/v1', kind: 'Job', name: m.name, namespace: m.namespace, uid: m.uid,
    resourceVersion: m.resourceVersion,
  })),
  ...(last === undefined ? {} : { lastScheduleTime: rfc3339(last) }),
});

export const { describe, reconcile, map } = reconciler(
  new Registration(CRONJOB).owns(JOB, {}, { prune: 'never' }),
  (request) => {
    const cronjob = cache.get(CRONJOB, request.name, request.namespace);
    if (!cronjob) return;
    const { spec } = cronjob;
    const jobs = cache.byIndex(JOB, 'controller-owner', cronjob.metadata.uid);
    let active = jobs.filter((j) => !finished(j)).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
    const times = [cronjob.status?.lastScheduleTime, ...jobs.map((j) => j.metadata.annotations?.[SCHEDULED_AT])]
      .map(parseTime).filter((t) => t !== undefined);
    let last = times.length ? Math.max(...times) : undefined;
    deleteBeyond(jobs.filter((j) => finished(j) === 'Failed'), spec.failedJobsHistoryLimit, 'failed');
    deleteBeyond(jobs.filter((j) => finished(j) === 'Complete'), spec.successfulJobsHistoryLimit, 'successful');
    if (spec.suspend) return desired([], { status: status(active, last) });

    const now = Date.now();
    const { missed, next } = nextSchedule(spec, last ?? parseTime(cronjob.metadata.creationTimestamp), now);
    const children = [];
    const deadline = spec.startingDeadlineSeconds;
    if (missed === undefined) {
      // nothing due
    } else if (deadline !== undefined && missed + deadline * 1000 < now) {
      log.info(`missed the starting deadline for the run at ${rfc3339(missed)}, waiting for the next`);
    } else if (spec.concurrencyPolicy === 'Forbid' && active.length) {
      log.info(`concurrency policy Forbid: the run at ${rfc3339(missed)} waits, ${active.length} still active`);
    } else {
      if (spec.concurrencyPolicy === 'Replace') {
        active.forEach(remove);
        active = [];
      }
      children.push(jobFor(cronjob, missed));
      last = missed;
    }
    const requeueAfterMs = Number.isFinite(next) ? next - now : undefined;
    return desired(children, { status: status(active, last), requeueAfterMs });
  },
);
