//! Status conditions with apimachinery's `meta.SetStatusCondition` semantics: one condition per
//! type; `lastTransitionTime` moves only when the status changes; reason, message and
//! `observedGeneration` are always updated.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition of `type_` with `status` (`True`, `False`, `Unknown`), `reason`, `message`, for
/// the object's `generation` (its `metadata.generation`); `lastTransitionTime` is filled by
/// [`set`].
pub fn new(type_: &str, status: bool, reason: &str, message: &str, generation: Option<i64>) -> Condition {
    Condition {
        type_: type_.to_owned(),
        status: if status { "True" } else { "False" }.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: generation,
        last_transition_time: Time(Timestamp::UNIX_EPOCH),
    }
}

/// Sets `condition` in `conditions` like `meta.SetStatusCondition`: a new type is added (with
/// `lastTransitionTime` now, unless the condition carries one); an existing one takes the new
/// status, and `lastTransitionTime` (now, or the given one) only if the status changed; reason,
/// message and observedGeneration always. Returns whether anything changed (so a status write
/// can be skipped when nothing did).
pub fn set(conditions: &mut Vec<Condition>, condition: Condition) -> bool {
    let given =
        (condition.last_transition_time.0 != Timestamp::UNIX_EPOCH).then_some(condition.last_transition_time.clone());
    let now = || given.clone().unwrap_or_else(now);
    let Some(existing) = conditions.iter_mut().find(|c| c.type_ == condition.type_) else {
        conditions.push(Condition { last_transition_time: now(), ..condition });
        return true;
    };
    let mut changed = false;
    if existing.status != condition.status {
        existing.status = condition.status;
        existing.last_transition_time = now();
        changed = true;
    }
    if existing.reason != condition.reason {
        existing.reason = condition.reason;
        changed = true;
    }
    if existing.message != condition.message {
        existing.message = condition.message;
        changed = true;
    }
    if existing.observed_generation != condition.observed_generation {
        existing.observed_generation = condition.observed_generation;
        changed = true;
    }
    changed
}

/// The wall-clock time (WASI's clock), whole seconds as Kubernetes serializes it. Through
/// `SystemTime`: k8s-openapi's jiff is built without `std`, so `Timestamp::now` is absent.
fn now() -> Time {
    let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let seconds = i64::try_from(since.as_secs()).unwrap_or(i64::MAX);
    Time(Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH))
}

/// The condition of `type_`, if set (`meta.FindStatusCondition`).
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

/// Whether the condition of `type_` is `True` (`meta.IsStatusConditionTrue`).
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

/// Removes the condition of `type_`; returns whether it was there (`meta.RemoveStatusCondition`).
pub fn remove(conditions: &mut Vec<Condition>, type_: &str) -> bool {
    let before = conditions.len();
    conditions.retain(|c| c.type_ != type_);
    conditions.len() != before
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> Time {
        Time(Timestamp::from_second(seconds).unwrap())
    }

    #[test]
    fn the_transition_time_moves_only_when_the_status_changes() {
        let mut conditions = Vec::new();
        let first = Condition { last_transition_time: at(100), ..new("Ready", false, "Waiting", "", Some(1)) };
        assert!(set(&mut conditions, first));
        let same_status = Condition { last_transition_time: at(200), ..new("Ready", false, "Still", "m", Some(2)) };
        assert!(set(&mut conditions, same_status), "reason, message and generation changed");
        let c = find(&conditions, "Ready").unwrap();
        assert_eq!(
            (c.last_transition_time.clone(), c.reason.as_str(), c.observed_generation),
            (at(100), "Still", Some(2))
        );
        let flipped = Condition { last_transition_time: at(300), ..new("Ready", true, "Done", "m", Some(2)) };
        assert!(set(&mut conditions, flipped));
        assert_eq!(find(&conditions, "Ready").unwrap().last_transition_time, at(300));
        assert!(is_true(&conditions, "Ready"));
    }

    #[test]
    fn setting_an_identical_condition_changes_nothing() {
        let mut conditions = Vec::new();
        set(&mut conditions, new("Ready", true, "Done", "ok", Some(3)));
        assert!(!set(&mut conditions, new("Ready", true, "Done", "ok", Some(3))));
        assert_eq!(conditions.len(), 1);
        assert!(remove(&mut conditions, "Ready") && conditions.is_empty());
    }
}
