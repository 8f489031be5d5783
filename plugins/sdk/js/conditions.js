// Status conditions with apimachinery's `meta.SetStatusCondition` semantics: one condition per
// type; `lastTransitionTime` moves only when the status changes; reason, message and
// `observedGeneration` always follow the new condition. Pure functions over the plain objects of
// `status.conditions`, re-exported by kubewasm.js (no host imports, so `node --test` runs them).
//
//   const conditions = (object.status ??= {}).conditions ??= [];
//   if (setStatusCondition(conditions, newCondition('Ready', true, 'Synced', '', generationOf(object)))) {
//     client.applyStatus(...);
//   }

/** The current time as Kubernetes writes it (RFC 3339, seconds, UTC). */
export const now = () => new Date().toISOString().replace(/\.\d+Z$/, 'Z');

/** `metadata.generation` of `object`, for a condition's `observedGeneration`. */
export const generationOf = (object) => object?.metadata?.generation;

/** A condition of `type`; `status` is `true`/`false` or `'True'`, `'False'`, `'Unknown'`.
 * `setStatusCondition` fills `lastTransitionTime`. */
export function newCondition(type, status, reason, message = '', observedGeneration = undefined) {
  const condition = { type, status: typeof status === 'boolean' ? (status ? 'True' : 'False') : status, reason, message };
  if (observedGeneration !== undefined && observedGeneration !== null) condition.observedGeneration = observedGeneration;
  return condition;
}

/** The condition of `type`, or `undefined` (`meta.FindStatusCondition`). */
export const findStatusCondition = (conditions, type) => (conditions ?? []).find((c) => c.type === type);

/** Whether the condition of `type` is `'True'` (`meta.IsStatusConditionTrue`). */
export const isStatusConditionTrue = (conditions, type) => findStatusCondition(conditions, type)?.status === 'True';

/**
 * Sets `condition` in `conditions` (in place) like `meta.SetStatusCondition`: a new type is
 * appended with `lastTransitionTime` (the condition's own, else `at`, else now); an existing one
 * takes the new status and, only if the status changed, the new `lastTransitionTime`; reason,
 * message and observedGeneration always. Returns whether anything changed, so a status write can
 * be skipped when nothing did.
 */
export function setStatusCondition(conditions, condition, at = undefined) {
  const stamp = condition.lastTransitionTime || at || now();
  const existing = findStatusCondition(conditions, condition.type);
  if (!existing) {
    conditions.push({ ...condition, lastTransitionTime: stamp });
    return true;
  }
  let changed = false;
  if (existing.status !== condition.status) {
    existing.status = condition.status;
    existing.lastTransitionTime = stamp;
    changed = true;
  }
  for (const field of ['reason', 'message', 'observedGeneration']) {
    if (existing[field] !== condition[field]) {
      if (condition[field] === undefined || condition[field] === null) delete existing[field];
      else existing[field] = condition[field];
      changed = true;
    }
  }
  return changed;
}

/** Removes the condition of `type` (in place); returns whether it was there
 * (`meta.RemoveStatusCondition`). */
export function removeStatusCondition(conditions, type) {
  const index = conditions.findIndex((c) => c.type === type);
  if (index < 0) return false;
  conditions.splice(index, 1);
  return true;
}
