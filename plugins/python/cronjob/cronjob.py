"""cronjob: the kubebuilder book's CronJob controller, the Python twin of plugins/rust/cronjob
(same CRD, deploy/crds/examples/cronjob.yaml, the same behaviour and the same split, whose
reasons that port's doc gives): the Job due now and the CronJob's status as the desired state,
the Job kind never pruned, and deleting Jobs (history beyond the limits, ``Replace``'s running
Jobs) imperative. Schedules are parsed by cronsim (plugins/python/cronjob/requirements.txt), with
robfig/cron's ``@yearly``…``@hourly`` descriptors spelled out, and read in UTC."""

from datetime import datetime, timedelta, timezone

from cronsim import CronSim, CronSimError

from kubewasm import Desired, Kind, Preconditions, Registration, TerminalError, cache, client, log, reconciler

CRONJOB = Kind("batch.tutorial.kubebuilder.io/v1", "CronJob")
JOB = Kind("batch/v1", "Job")
SCHEDULED_AT = "batch.tutorial.kubebuilder.io/scheduled-at"
# The bound on missed start times, as the original's, against a clock off by years.
MAX_MISSED_STARTS = 100
DESCRIPTORS = {"@yearly": "0 0 1 1 *", "@annually": "0 0 1 1 *", "@monthly": "0 0 1 * *",
               "@weekly": "0 0 * * 0", "@daily": "0 0 * * *", "@midnight": "0 0 * * *", "@hourly": "0 * * * *"}


def parse_time(text):
    """An RFC 3339 time (``Z`` or an offset) as an aware datetime; ``None`` for none."""
    return datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def finished(job: dict):
    """``Complete`` or ``Failed`` if the Job has that condition true; ``None`` while it runs."""
    for condition in (job.get("status") or {}).get("conditions") or []:
        if condition.get("type") in ("Complete", "Failed") and condition.get("status") == "True":
            return condition["type"]
    return None


def delete(job: dict):
    """Deletes ``job`` (background propagation, as the original), if it is still the Job judged."""
    meta = job["metadata"]
    client.delete(JOB, meta["name"], meta.get("namespace"), preconditions=Preconditions(uid=meta.get("uid")),
                  propagation_policy=client.PropagationPolicy.BACKGROUND)


def delete_beyond(done: list, limit, what: str):
    """Deletes the oldest of ``done`` (by start time, a Job not started first) beyond ``limit``; a
    failure is logged and left for a later reconcile, as the original does."""
    if limit is None:
        return
    started = lambda job: parse_time((job.get("status") or {}).get("startTime"))
    done.sort(key=lambda job: (started(job) is not None, started(job) or datetime.min.replace(tzinfo=timezone.utc)))
    for job in done[:max(0, len(done) - limit)]:
        try:
            delete(job)
            log.info(f"deleted old {what} job {job['metadata']['name']}")
        except Exception as e:  # best effort, as the original
            log.warn(f"unable to delete old {what} job {job['metadata']['name']}: {e}")


def next_schedule(spec: dict, since: datetime, now: datetime):
    """The latest schedule time missed since the earliest time considered (``None`` if none)
    and the first after now: the original's ``getNextSchedule``."""
    text = spec["schedule"].strip()
    expression = DESCRIPTORS.get(text.lower(), text)
    if len(expression.split()) != 5:
        raise TerminalError(f"unparseable schedule {text!r}: five fields or a descriptor")
    try:
        following = lambda moment: next(CronSim(expression, moment))
        upcoming = following(now)
    except (CronSimError, StopIteration) as e:
        raise TerminalError(f"unparseable schedule {text!r}: {e}") from None
    earliest = since
    deadline = spec.get("startingDeadlineSeconds")
    if deadline is not None:
        earliest = max(earliest, now - timedelta(seconds=deadline))
    if earliest > now:
        return None, upcoming
    missed, starts, moment = None, 0, following(earliest)
    while moment <= now:
        missed, starts = moment, starts + 1
        if starts > MAX_MISSED_STARTS:
            raise TerminalError("too many missed start times (> 100): set or decrease "
                                ".spec.startingDeadlineSeconds or check clock skew")
        moment = following(moment)
    return missed, upcoming


def job_for(cronjob: dict, scheduled: datetime) -> dict:
    """The Job ``cronjob`` runs for ``scheduled`` (the host adds the CronJob as its controller)."""
    template = cronjob["spec"]["jobTemplate"]
    meta = template.get("metadata") or {}
    annotations = {**(meta.get("annotations") or {}), SCHEDULED_AT: rfc3339(scheduled)}
    name = f"{cronjob['metadata']['name']}-{int(scheduled.timestamp())}"
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": cronjob["metadata"]["namespace"],
                         "labels": meta.get("labels") or {}, "annotations": annotations},
            "spec": template.get("spec")}


def status(active: list, last) -> dict:
    """The running Jobs (an empty list rather than none, so that a stale list another writer
    left is replaced) and the last run."""
    refs = [{"apiVersion": "batch/v1", "kind": "Job", "name": job["metadata"]["name"],
             "namespace": job["metadata"].get("namespace"), "uid": job["metadata"].get("uid"),
             "resourceVersion": job["metadata"].get("resourceVersion")} for job in active]
    return {"active": refs, **({"lastScheduleTime": rfc3339(last)} if last else {})}


@reconciler(Registration(CRONJOB).owns(JOB, prune="never"))
def reconcile(request):
    cronjob = cache.get(CRONJOB, request.name, request.namespace)
    if cronjob is None:
        return
    spec = cronjob["spec"]
    jobs = cache.by_index(JOB, "controller-owner", cronjob["metadata"]["uid"])
    active = sorted((j for j in jobs if finished(j) is None), key=lambda j: j["metadata"]["name"])
    scheduled = [parse_time((j["metadata"].get("annotations") or {}).get(SCHEDULED_AT)) for j in jobs]
    own = parse_time((cronjob.get("status") or {}).get("lastScheduleTime"))
    last = max([t for t in scheduled + [own] if t is not None], default=None)
    delete_beyond([j for j in jobs if finished(j) == "Failed"], spec.get("failedJobsHistoryLimit"), "failed")
    delete_beyond([j for j in jobs if finished(j) == "Complete"], spec.get("successfulJobsHistoryLimit"), "successful")
    if spec.get("suspend"):
        return Desired(status=status(active, last))

    now = datetime.now(timezone.utc)
    missed, upcoming = next_schedule(spec, last or parse_time(cronjob["metadata"]["creationTimestamp"]), now)
    children = []
    deadline = spec.get("startingDeadlineSeconds")
    if missed is None:
        pass
    elif deadline is not None and missed + timedelta(seconds=deadline) < now:
        log.info(f"missed the starting deadline for the run at {rfc3339(missed)}, waiting for the next")
    elif spec.get("concurrencyPolicy") == "Forbid" and active:
        log.info(f"concurrency policy Forbid: the run at {rfc3339(missed)} waits, {len(active)} still active")
    else:
        if spec.get("concurrencyPolicy") == "Replace":
            for job in active:
                delete(job)
            active = []
        children, last = [job_for(cronjob, missed)], missed
    return Desired(children=children, status=status(active, last), requeue_after=upcoming - now)
